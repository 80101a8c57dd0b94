package window

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sums keeps several counts and sums in one window row, and its state
// survives a checkpoint.
func TestSums(t *testing.T) {
	type pr struct {
		merged bool
		lines  int64
	}
	agg := Sums[pr, int64]{Of: func(e pr, v *Fields[int64]) {
		v[0] = 1
		if e.merged {
			v[1] = 1
		}
		v[2] = e.lines
	}}
	op, err := New(Tumbling(time.Minute), agg, Options{MaxOutOfOrderness: -1})
	require.NoError(t, err)
	var out Output[pr, Fields[int64]]
	for i, e := range []pr{{true, 10}, {false, 5}, {true, 1}} {
		require.NoError(t, op.Add(Event[pr]{Key: "org", Time: at(time.Duration(i) * time.Second), Value: e}, &out))
	}
	snap, err := op.Snapshot(t.Context(), 1)
	require.NoError(t, err)
	again, err := New(Tumbling(time.Minute), agg, Options{MaxOutOfOrderness: -1})
	require.NoError(t, err)
	require.NoError(t, again.Restore(t.Context(), snap))
	again.EndInput(&out)
	require.Len(t, out.Rows, 1)
	assert.Equal(t, Fields[int64]{3, 2, 16}, out.Rows[0].Result)

	for _, f := range []Fields[int64]{{}, {1}, {0, 0, 0, 0, 0, 0, 0, -1}} {
		got, err := agg.ParseState(agg.AppendState(nil, f))
		require.NoError(t, err)
		assert.Equal(t, f, got)
	}
	for _, bad := range [][]byte{nil, {9}, {1, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0}} {
		_, err := agg.ParseState(bad)
		assert.ErrorIs(t, err, ErrCorrupt, "%x", bad)
	}
}
