package chsink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

func newKindSink(t *testing.T, env chEnv, store checkpoint.Storage, maxRows int) *chsink.Sink[chsink.KindRow] {
	t.Helper()
	s, err := chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "kinds"},
		checkpoint.TopicPartition{Topic: "kinds"}, store, chsink.KindSchema, chsink.Options{Database: env.db, MaxRows: maxRows})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func addKinds(ctx context.Context, t *testing.T, s *chsink.Sink[chsink.KindRow], rows []chsink.KindRow) {
	t.Helper()
	for _, r := range rows {
		require.NoError(t, s.Add(ctx, sink.Position{Offset: int64(r.ID)}, r))
	}
}

// readKinds reads the table back, ordered by id, into rows, through the
// schema's own ch-go columns.
func readKinds(t *testing.T, env chEnv) []chsink.KindRow {
	t.Helper()
	cols := chsink.KindSchema()
	var results proto.Results
	names := ""
	for i, c := range cols {
		results = append(results, proto.ResultColumn{Name: c.Name(), Data: chsink.RawData(c).(proto.ColResult)})
		if i > 0 {
			names += ", "
		}
		names += c.Name()
	}
	var rows []chsink.KindRow
	require.NoError(t, env.conn.Do(context.Background(), ch.Query{
		Body:   fmt.Sprintf("SELECT %s FROM %s.kinds ORDER BY id", names, env.db),
		Result: results,
		OnResult: func(ctx context.Context, b proto.Block) error {
			for i := range b.Rows {
				rows = append(rows, chsink.KindRow{
					ID: kindAt[uint64](cols[0], i), S: kindAt[string](cols[1], i), LC: kindAt[string](cols[2], i),
					I64: kindAt[int64](cols[3], i), I32: kindAt[int32](cols[4], i), U64: kindAt[uint64](cols[5], i),
					U32: kindAt[uint32](cols[6], i), U8: kindAt[uint8](cols[7], i), F: kindAt[float64](cols[8], i),
					Milli: kindAt[time.Time](cols[9], i).UTC(), Nano: kindAt[time.Time](cols[10], i).UTC(),
					NS: kindAt[proto.Nullable[string]](cols[11], i), NI: kindAt[proto.Nullable[int64]](cols[12], i),
					AS: nonNil(kindAt[[]string](cols[13], i)), AI: nonNil(kindAt[[]int64](cols[14], i)),
					ALC: nonNil(kindAt[[]string](cols[15], i)), ANS: nonNil(kindAt[[]proto.Nullable[string]](cols[16], i)),
					M: kindAt[map[string]uint64](cols[17], i),
				})
			}
			return nil
		},
	}))
	return rows
}

func kindAt[V any](c chsink.Column[chsink.KindRow], i int) V {
	return chsink.RawData(c).(proto.ColumnOf[V]).Row(i)
}

func nonNil[V any](s []V) []V {
	if s == nil {
		return []V{}
	}
	return s
}

// TestEveryColumnKindRoundTrips inserts rows of every column kind through
// the sink, in batches that are pipelined (one fills while the previous one
// is inserted) and one that a checkpoint flushes, and reads them back
// exactly: values, NULLs next to empty strings, empty arrays and maps,
// unicode, extreme integers and nanosecond times.
func TestEveryColumnKindRoundTrips(t *testing.T) {
	env := setup(t, chsink.KindDDL)
	ctx := context.Background()
	s := newKindSink(t, env, checkpoint.NewMemoryStorage(), 7)
	want := chsink.KindRows(0, penultimate)
	addKinds(ctx, t, s, want)
	_, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)

	got := readKinds(t, env)
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i], got[i], "row %d", i)
	}
}

const penultimate = 7*9 + 3 // nine full batches of 7 and three rows that Snapshot flushes

// TestEveryColumnKindReplays kills a sink after it inserted batches of every
// column kind that no completed checkpoint covers, and replays them from the
// checkpoint through a new sink that batches differently: each journaled
// batch is cut again and its content hash matches (the default MismatchFail
// would stop the replay otherwise), and the table holds every row once.
func TestEveryColumnKindReplays(t *testing.T) {
	env := setup(t, chsink.KindDDL)
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	rows := chsink.KindRows(0, 200) // maps of up to three entries: Map sorts them

	s1 := newKindSink(t, env, store, 9)
	addKinds(ctx, t, s1, rows[:50])
	state, err := s1.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, s1.CheckpointCompleted(ctx, 1))
	addKinds(ctx, t, s1, rows[50:150])
	_, err = s1.Snapshot(ctx, 2) // inserted; checkpoint 2 never completes
	require.NoError(t, err)
	require.NoError(t, s1.Close()) // kill -9, as far as the journal knows

	s2 := newKindSink(t, env, store, 1000)
	require.NoError(t, s2.Restore(ctx, state))
	addKinds(ctx, t, s2, rows[50:])
	_, err = s2.Snapshot(ctx, 3)
	require.NoError(t, err)

	got := readKinds(t, env)
	require.Len(t, got, len(rows))
	for i := range rows {
		assert.Equal(t, rows[i], got[i], "row %d", i)
	}
}
