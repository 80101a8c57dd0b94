package chsink_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

func (e chEnv) withRollup(t *testing.T) {
	e.exec(t, "CREATE TABLE "+e.db+".kind_counts (kind String, n UInt64) ENGINE = MergeTree ORDER BY kind SETTINGS enable_block_number_column = 1, non_replicated_deduplication_window = 1000")
	e.exec(t, "CREATE MATERIALIZED VIEW "+e.db+".mv_kind_counts TO "+e.db+".kind_counts AS SELECT toString(kind) AS kind, count() AS n FROM "+e.db+".events GROUP BY kind")
}

// assertExact checks that the table and its rollup hold records [0, to)
// exactly once.
func (e chEnv) assertExact(t *testing.T, to int64, rollup bool) {
	t.Helper()
	want := uint64(expectedRows(0, to))
	assert.Equal(t, want, e.count(t, "SELECT count() FROM "+e.db+".events"), "rows")
	assert.Equal(t, want, e.count(t, "SELECT uniqExact(id) FROM "+e.db+".events"), "distinct rows")
	if rollup {
		assert.Equal(t, want, e.count(t, "SELECT toUInt64(sum(n)) FROM "+e.db+".kind_counts"), "rollup total")
	}
}

func TestNewRejectsTableWithoutDedupWindow(t *testing.T) {
	env := setup(t, `CREATE TABLE %s.events (id UInt64, org String, kind LowCardinality(String), at DateTime64(3),
		score Float64, tags Array(String), note Nullable(String)) ENGINE = MergeTree ORDER BY id`)
	_, err := chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "events"},
		checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: env.db})
	require.ErrorIs(t, err, chsink.ErrNoDedupWindow)
	assert.Contains(t, err.Error(), "non_replicated_deduplication_window")

	_, err = chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "missing"},
		checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: env.db})
	require.ErrorIs(t, err, chsink.ErrTableSchema)
}

func TestNewRejectsViewTargetWithoutDedupWindow(t *testing.T) {
	env := setup(t, eventsDDL)
	env.exec(t, "CREATE TABLE "+env.db+".kind_counts (kind String, n UInt64) ENGINE = SummingMergeTree ORDER BY kind")
	env.exec(t, "CREATE MATERIALIZED VIEW "+env.db+".mv_kind_counts TO "+env.db+".kind_counts AS SELECT toString(kind) AS kind, count() AS n FROM "+env.db+".events GROUP BY kind")
	_, err := chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "events"},
		checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: env.db})
	require.ErrorIs(t, err, chsink.ErrNoDedupWindow)
	assert.Contains(t, err.Error(), "materialized view")
}

// TestKilledBeforeCheckpointCompleted abandons a sink (as kill -9 would)
// after it inserted batches that no completed checkpoint covers, one of them
// without its acknowledgement, and restores a new one from the last
// checkpoint: the table and a materialized-view rollup hold exact counts.
func TestKilledBeforeCheckpointCompleted(t *testing.T) {
	env := setup(t, eventsDDL)
	env.withRollup(t)
	ctx := context.Background()
	store := &faultStorage{Storage: checkpoint.NewMemoryStorage()}

	s1 := env.newSink(t, store, chsink.Options{MaxRows: 37})
	require.NoError(t, feed(ctx, t, s1, 0, 100))
	state1, err := s1.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, s1.CheckpointCompleted(ctx, 1))

	require.NoError(t, feed(ctx, t, s1, 100, 200))
	_, err = s1.Snapshot(ctx, 2) // inserted, but checkpoint 2 never completes
	require.NoError(t, err)
	require.NoError(t, feed(ctx, t, s1, 200, 260)) // size flushes
	require.NoError(t, feed(ctx, t, s1, 260, 300)) // the last insert lands; its ack rides on an intent that never comes
	// kill -9: s1 is abandoned without Snapshot or Close.

	require.Greater(t, env.count(t, "SELECT count() FROM "+env.db+".events"), uint64(expectedRows(0, 100)))

	s2 := env.newSink(t, store, chsink.Options{MaxRows: 1000}) // other batching: the journal wins
	require.NoError(t, s2.Restore(ctx, state1))
	require.NoError(t, feed(ctx, t, s2, 100, 400))
	_, err = s2.Snapshot(ctx, 3)
	require.NoError(t, err)
	require.NoError(t, s2.CheckpointCompleted(ctx, 3))

	env.assertExact(t, 400, true)
}

func TestQuietStreamFlushesWithinMaxDelay(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := env.newSink(t, checkpoint.NewMemoryStorage(), chsink.Options{MaxDelay: 200 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	start := time.Now()
	require.NoError(t, feed(ctx, t, s, 0, 3)) // 3 rows, then silence
	want := uint64(expectedRows(0, 3))
	require.Eventually(t, func() bool {
		return env.count(t, "SELECT count() FROM "+env.db+".events") == want
	}, 5*time.Second, 20*time.Millisecond)
	assert.Less(t, time.Since(start), 2*time.Second)

	require.NoError(t, s.Close())
	require.NoError(t, <-done)
	require.NoError(t, s.Close()) // twice is fine
}

func TestPermanentErrorFailsCheckpoint(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	s := env.newSink(t, checkpoint.NewMemoryStorage(), chsink.Options{InitialBackoff: 50 * time.Millisecond})
	env.exec(t, "ALTER TABLE "+env.db+".events DROP COLUMN note")
	require.NoError(t, feed(ctx, t, s, 0, 10))

	start := time.Now()
	_, err := s.Snapshot(ctx, 1)
	require.Error(t, err)
	var ie *chsink.InsertError
	require.True(t, errors.As(err, &ie), "%v", err)
	assert.True(t, ie.Permanent)
	assert.Equal(t, 1, ie.Attempts)
	assert.False(t, chsink.IsRetryable(err))
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Contains(t, err.Error(), "note")

	// The sink stays broken: the next checkpoint fails too, nothing is dropped.
	_, err = s.Snapshot(ctx, 2)
	require.Error(t, err)
	assert.Equal(t, uint64(0), env.count(t, "SELECT count() FROM "+env.db+".events"))
}

func TestConnectionCutDuringInsertLeavesOneCopy(t *testing.T) {
	env := setup(t, eventsDDL)
	env.withRollup(t)
	ctx := context.Background()
	px := newProxy(t, env.addr)
	s := env.newSinkAt(t, px.Addr(), checkpoint.NewMemoryStorage(), chsink.Options{InitialBackoff: 20 * time.Millisecond})

	require.NoError(t, feed(ctx, t, s, 0, 3000))
	px.cutAfter.Store(20 << 10) // the insert block is larger than any query
	_, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), px.cuts.Load(), "the insert connection was cut")
	env.assertExact(t, 3000, true)
}

// TestInsertTimeoutIsRetried shows that an insert attempt that runs out of
// InsertTimeout (the server got the block, the answer never came) is an
// outcome-unknown failure: it is retried with the same token, not reported as
// permanent, and the table holds exactly one copy.
func TestInsertTimeoutIsRetried(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	px := newProxy(t, env.addr)
	s := env.newSinkAt(t, px.Addr(), checkpoint.NewMemoryStorage(),
		chsink.Options{InitialBackoff: 20 * time.Millisecond, InsertTimeout: 500 * time.Millisecond})

	require.NoError(t, feed(ctx, t, s, 0, 3000))
	px.stall.Store(true)
	px.cutAfter.Store(20 << 10) // the insert block is larger than any query
	_, err := s.Snapshot(ctx, 1)
	require.NoError(t, err, "a timed-out attempt is retried")
	require.Equal(t, int64(1), px.cuts.Load(), "the insert's answer was swallowed")
	env.assertExact(t, 3000, false)
}

func TestOutOfOrderRowIsRejected(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	s := env.newSink(t, checkpoint.NewMemoryStorage(), chsink.Options{})
	require.NoError(t, s.Add(ctx, sink.Position{Offset: 5}, event{ID: 1}))
	err := s.Add(ctx, sink.Position{Offset: 5}, event{ID: 2})
	require.ErrorIs(t, err, sink.ErrOutOfOrder)
	require.NoError(t, s.Add(ctx, sink.Position{Offset: 5, Index: 1}, event{ID: 2}))
}

// TestServerErrorRetryable proves a server that fails New's own queries
// because it is going away (ABORTED while it shuts down) gets the chain
// built again by kafkasource, while a server that refuses the query for good
// (no such table, no access) stops it.
func TestServerErrorRetryable(t *testing.T) {
	aborted := &chsink.ServerError{Op: "inspect db.events", Err: &ch.Exception{
		Code: proto.ErrAborted, Name: "ABORTED", Message: "The server is shutting down due to a fatal error"}}
	assert.True(t, kafkasource.IsRetryable(fmt.Errorf("new processor: %w", aborted)))
	denied := &chsink.ServerError{Op: "inspect db.events", Err: &ch.Exception{
		Code: proto.ErrAccessDenied, Name: "ACCESS_DENIED", Message: "not enough privileges"}}
	assert.False(t, kafkasource.IsRetryable(fmt.Errorf("new processor: %w", denied)))
	assert.Contains(t, aborted.Error(), "inspect db.events")
}

// TestNewOnUnreachableServerRetryable proves New's error on a server that
// is not there says so to kafkasource, which then builds the chain again.
func TestNewOnUnreachableServerRetryable(t *testing.T) {
	addr := testkit.FreeAddr(t) // nothing listens there
	_, err := chsink.New(t.Context(), chsink.Table{Name: "events", Addr: addr},
		checkpoint.TopicPartition{Topic: "t", Partition: 0}, checkpoint.NewMemoryStorage(), eventSchema,
		chsink.Options{Database: "default", DialTimeout: time.Second})
	require.Error(t, err)
	assert.True(t, kafkasource.IsRetryable(err), "%v", err)
}
