package chsink_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// TestAddBatchEqualsAdd: the same rows through AddBatch (in slices of 7,
// across flushes at 40 rows and checkpoints) and through one Add per row
// give the same checkpoint states (the table's name aside) and the same
// rows in ClickHouse.
func TestAddBatchEqualsAdd(t *testing.T) {
	ctx := context.Background()
	run := func(batch bool) (chEnv, [][]byte) {
		env := setup(t, eventsDDL)
		s := env.newSink(t, checkpoint.NewMemoryStorage(), chsink.Options{MaxRows: 40})
		var states [][]byte
		for id := checkpoint.ID(1); id <= 4; id++ {
			var pos []sink.Position
			var rows []event
			for o := int64(id-1) * 50; o < int64(id)*50; o++ {
				for i, r := range rowsOf(o) {
					pos, rows = append(pos, sink.Position{Offset: o, Index: uint32(i)}), append(rows, r)
				}
			}
			for len(rows) > 0 {
				n := min(7, len(rows))
				if batch {
					k, err := s.AddBatch(ctx, pos[:n], rows[:n])
					require.NoError(t, err)
					require.Equal(t, n, k)
				} else {
					for i := range n {
						require.NoError(t, s.Add(ctx, pos[i], rows[i]))
					}
				}
				pos, rows = pos[n:], rows[n:]
			}
			st, err := s.Snapshot(ctx, id)
			require.NoError(t, err)
			require.NoError(t, s.CheckpointCompleted(ctx, id))
			states = append(states, bytes.ReplaceAll(st, []byte(env.db), []byte("DB")))
		}
		env.assertExact(t, 200, false)
		return env, states
	}
	_, one := run(false)
	_, batch := run(true)
	assert.Equal(t, one, batch)
}

// TestAddBatchOutOfOrder: AddBatch stops at the first row Add would refuse
// and says how many it buffered; the rows before it count.
func TestAddBatchOutOfOrder(t *testing.T) {
	ctx := context.Background()
	env := setup(t, eventsDDL)
	s := env.newSink(t, checkpoint.NewMemoryStorage(), chsink.Options{})
	rows := []event{rowsOf(1)[0], rowsOf(2)[0], rowsOf(4)[0]}
	pos := []sink.Position{{Offset: 1}, {Offset: 2}, {Offset: 2}}
	n, err := s.AddBatch(ctx, pos, rows)
	require.ErrorIs(t, err, sink.ErrOutOfOrder)
	assert.Equal(t, 2, n)
	_, err = s.AddBatch(ctx, pos[:1], rows[:2])
	require.Error(t, err, "positions and rows differ in number")
	_, err = s.Snapshot(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), env.count(t, "SELECT count() FROM "+env.db+".events"))
}
