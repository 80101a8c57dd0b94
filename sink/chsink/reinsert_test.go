package chsink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

const replacingDDL = `CREATE TABLE %s.events (
	id UInt64, org String, kind LowCardinality(String), at DateTime64(3),
	score Float64, tags Array(String), note Nullable(String)
) ENGINE = ReplacingMergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000`

// feedChanged hands records [from, to) to s with processing changed since
// the first run: every score is one higher.
func feedChanged(ctx context.Context, t *testing.T, s *chsink.Sink[event], from, to int64) error {
	t.Helper()
	for o := from; o < to; o++ {
		for i, r := range rowsOf(o) {
			r.Score++
			if err := s.Add(ctx, sink.Position{Offset: o, Index: uint32(i)}, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestMismatchReinsert replays a batch that landed without its ack with
// different content: the new rows land under a fresh token, FINAL reads
// are exact and show the new version, and a second replay of the same new
// content (its insert landed, unacknowledged) is deduplicated.
func TestMismatchReinsert(t *testing.T) {
	env := setup(t, replacingDDL)
	env.exec(t, "SYSTEM STOP MERGES "+env.db+".events") // keep every inserted row visible without FINAL
	ctx := context.Background()
	store := &faultStorage{Storage: checkpoint.NewMemoryStorage()}
	state := crashAfterUnackedInsert(t, env, store) // records [100, 150) landed, unacked

	opts := chsink.Options{OnMismatch: chsink.MismatchReinsert}
	s2 := env.newSink(t, store, opts)
	require.NoError(t, s2.Restore(ctx, state))
	require.NoError(t, feedChanged(ctx, t, s2, 100, 160))
	// kill -9: the reinserted batch is in ClickHouse, records [150, 160) are
	// buffered, no checkpoint covers either.

	s3 := env.newSink(t, store, opts)
	require.NoError(t, s3.Restore(ctx, state))
	require.NoError(t, feedChanged(ctx, t, s3, 100, 160))
	_, err := s3.Snapshot(ctx, 3)
	require.NoError(t, err)

	final := "SELECT count() FROM " + env.db + ".events FINAL"
	assert.Equal(t, uint64(expectedRows(0, 160)), env.count(t, final), "FINAL rows")
	assert.Equal(t, uint64(expectedRows(100, 160)), env.count(t, final+" WHERE id >= 1000 AND score = id / 2 + 1"), "FINAL rows of the new version")
	assert.Equal(t, uint64(expectedRows(0, 100)), env.count(t, final+" WHERE score = id / 2"), "FINAL rows of the old version")
	// Without FINAL: the first version of [100, 150) once, the new one once.
	assert.Equal(t, uint64(expectedRows(0, 160)+expectedRows(100, 150)), env.count(t, "SELECT count() FROM "+env.db+".events"), "inserted rows")
	assert.Equal(t, uint64(expectedRows(100, 150)), env.count(t, "SELECT count() FROM "+env.db+".events WHERE id >= 1000 AND id < 1500 AND score = id / 2 + 1"), "new version inserted once")
}

func TestMismatchReinsertRefusedOnNonIdempotentTables(t *testing.T) {
	tests := []struct {
		name string
		ddl  []string
		def  error // New's answer under the default policy
	}{
		{"plain MergeTree", []string{eventsDDL}, nil},
		{"view into SummingMergeTree", []string{
			replacingDDL,
			"CREATE TABLE %s.kind_counts (kind String, n UInt64) ENGINE = SummingMergeTree ORDER BY kind SETTINGS non_replicated_deduplication_window = 1000",
		}, chsink.ErrUnprovenTarget},
		// A re-inserted sum adds up: issue 26's review found this
		// engine accepted.
		{"view into AggregatingMergeTree", []string{
			replacingDDL,
			"CREATE TABLE %s.kind_counts (kind String, n SimpleAggregateFunction(sum, UInt64)) ENGINE = AggregatingMergeTree ORDER BY kind SETTINGS non_replicated_deduplication_window = 1000",
		}, chsink.ErrUnprovenTarget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t, tt.ddl...)
			if len(tt.ddl) > 1 {
				env.exec(t, "CREATE MATERIALIZED VIEW "+env.db+".mv_kind_counts TO "+env.db+".kind_counts AS SELECT toString(kind) AS kind, count() AS n FROM "+env.db+".events GROUP BY kind")
			}
			_, err := chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "events"},
				checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema,
				chsink.Options{Database: env.db, OnMismatch: chsink.MismatchReinsert})
			require.ErrorIs(t, err, chsink.ErrNotIdempotent)
			var tce *chsink.TableCheckError
			require.ErrorAs(t, err, &tce)
			assert.Contains(t, tce.Engine, "MergeTree")

			// Under the default policy the plain table is accepted; a
			// folding target on a plain server is refused all the same
			// (see TestNewRefusesUnprovenShapes).
			s, err := chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "events"},
				checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: env.db})
			if tt.def != nil {
				require.ErrorIs(t, err, tt.def)
				return
			}
			require.NoError(t, err)
			require.NoError(t, s.Close())
		})
	}
}
