package chsink_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// Scenario 1 of issue 12: a materialized view's target whose deduplication
// window is above 0 but smaller than the replay depth was accepted. After a
// crash the source table drops a replayed block while a target that already
// forgot the token counts it twice; a target fed by two source tables uses
// its window up twice as fast. New refuses both.
func TestNewRejectsViewTargetWindowBelowReplayDepth(t *testing.T) {
	const twoCol = "(id UInt64, org String, kind LowCardinality(String), at DateTime64(3), score Float64, tags Array(String), note Nullable(String))"
	tests := []struct {
		name         string
		targetWindow string
		sources      int
		wantErr      bool
	}{
		{"window below the source's", "10", 1, true},
		{"window equal to the source's", "1000", 1, false},
		{"two sources use it up twice as fast", "1500", 2, true},
		{"two sources, window covers both", "2000", 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t, eventsDDL)
			env.exec(t, "CREATE TABLE "+env.db+".kind_counts (kind String, n UInt64) ENGINE = MergeTree ORDER BY kind SETTINGS enable_block_number_column = 1, non_replicated_deduplication_window = "+tt.targetWindow)
			env.exec(t, "CREATE MATERIALIZED VIEW "+env.db+".mv_kind_counts TO "+env.db+".kind_counts AS SELECT toString(kind) AS kind, count() AS n FROM "+env.db+".events GROUP BY kind")
			if tt.sources == 2 {
				env.exec(t, "CREATE TABLE "+env.db+".events2 "+twoCol+" ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1")
				env.exec(t, "CREATE MATERIALIZED VIEW "+env.db+".mv_kind_counts2 TO "+env.db+".kind_counts AS SELECT toString(kind) AS kind, count() AS n FROM "+env.db+".events2 GROUP BY kind")
			}
			s, err := chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "events"},
				checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: env.db, DistinctViewRows: true})
			if !tt.wantErr {
				require.NoError(t, err)
				require.NoError(t, s.Close())
				return
			}
			require.ErrorIs(t, err, chsink.ErrNoDedupWindow)
			var tce *chsink.TableCheckError
			require.True(t, errors.As(err, &tce))
			assert.Equal(t, "kind_counts", tce.Table)
			assert.Contains(t, err.Error(), "materialized view")
		})
	}
}

// checkpoints feeds s through five checkpoints of 50 records each, all
// completed, and returns their states by id.
func checkpoints(t *testing.T, s *chsink.Sink[event]) map[checkpoint.ID][]byte {
	ctx := context.Background()
	states := map[checkpoint.ID][]byte{}
	for id := checkpoint.ID(1); id <= 5; id++ {
		require.NoError(t, feed(ctx, t, s, int64(id-1)*50, int64(id)*50))
		st, err := s.Snapshot(ctx, id)
		require.NoError(t, err)
		require.NoError(t, s.CheckpointCompleted(ctx, id))
		states[id] = st
	}
	return states
}

// Scenario 3 of issue 12: the store keeps the newest three checkpoints so
// that restore can fall back past a corrupt newest one. The journal was
// pruned through the newest completed checkpoint, so every fallback failed
// with ErrStaleCheckpoint. Now it is pruned only through the oldest one kept.
func TestRestoreFallsBackToOldestKeptCheckpoint(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	s1 := env.newSink(t, store, chsink.Options{MaxRows: 40})
	states := checkpoints(t, s1)
	require.NoError(t, feed(ctx, t, s1, 250, 270)) // inserted past checkpoint 5, then killed
	_, err := s1.Snapshot(ctx, 6)
	require.NoError(t, err)
	require.NoError(t, s1.Close())

	// Checkpoints 4 and 5 are corrupt: restore falls back to 3, the oldest kept.
	s2 := env.newSink(t, store, chsink.Options{MaxRows: 40})
	require.NoError(t, s2.Restore(ctx, states[3]))
	require.NoError(t, feed(ctx, t, s2, 150, 300))
	_, err = s2.Snapshot(ctx, 7)
	require.NoError(t, err)
	env.assertExact(t, 300, false)
}

// Scenario 6 of issue 12: when every checkpoint of a partition is lost, the
// sink started fresh over a journal already pruned, with new batch cuts, and
// re-inserted what the source replayed, silently. Now it refuses with
// sink.ErrPrunedJournal unless Options.AllowFreshStart says otherwise.
func TestFreshStartOverPrunedJournalRefused(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	s1 := env.newSink(t, store, chsink.Options{MaxRows: 40})
	checkpoints(t, s1)
	require.NoError(t, s1.Close())

	s2 := env.newSink(t, store, chsink.Options{})
	err := feed(ctx, t, s2, 0, 10)
	require.ErrorIs(t, err, sink.ErrPrunedJournal)
	assert.Equal(t, uint64(expectedRows(0, 250)), env.count(t, "SELECT count() FROM "+env.db+".events"))

	s3 := env.newSink(t, store, chsink.Options{AllowFreshStart: true})
	require.NoError(t, feed(ctx, t, s3, 300, 310))
	_, err = s3.Snapshot(ctx, 1)
	require.NoError(t, err)
}

// Scenario 5 of issue 12: with processing that is not byte-for-byte
// deterministic, a replay can come up short; on a quiet partition no row past
// the journaled batch arrives, and the sink stayed in replay: every
// checkpoint was declined and buffered rows never reached ClickHouse. Now
// Run finishes the replay MaxDelay after the last row, with what is buffered.
func TestShortReplayFinishesOnQuietPartition(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := &faultStorage{Storage: checkpoint.NewMemoryStorage()}
	state := crashAfterUnackedInsert(t, env, store) // batch [100, 150) inserted, not acknowledged

	s := env.newSink(t, store, chsink.Options{OnMismatch: chsink.MismatchKeepFirst, MaxDelay: 100 * time.Millisecond})
	require.NoError(t, s.Restore(ctx, state))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.NoError(t, feed(ctx, t, s, 100, 120)) // the replay comes up short; then the partition is quiet

	require.Eventually(t, func() bool {
		_, err := s.Snapshot(ctx, 3)
		require.True(t, err == nil || errors.Is(err, sink.ErrReplayInProgress), "%v", err)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the replay never finished")
	env.assertExact(t, 150, false) // ClickHouse kept the first version of the batch

	// Rows of the finished batch that come late are not inserted again.
	require.NoError(t, feed(ctx, t, s, 120, 170))
	_, err := s.Snapshot(ctx, 4)
	require.NoError(t, err)
	env.assertExact(t, 170, false)
	cancel()
	<-done
}

// crashBeforeInsert journals batch [100, 150) after checkpoint 1 and freezes
// its insert before it is sent, as a kill -9 there would: the intent is in
// the journal, the rows are not in ClickHouse. It returns checkpoint 1's
// state. The frozen insert is let go when the test ends: its context is
// cancelled first (Close), so it is never sent.
func crashBeforeInsert(t *testing.T, env chEnv, store checkpoint.Storage) []byte {
	ctx := context.Background()
	s := env.newSink(t, store, chsink.Options{})
	require.NoError(t, feed(ctx, t, s, 0, 100))
	state, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, feed(ctx, t, s, 100, 150))
	frozen, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.SetHooks(nil, func() { once.Do(func() { close(frozen) }); <-release })
	go func() { _, _ = s.Snapshot(ctx, 2) }() // journals [100, 150), then hangs in the insert
	<-frozen
	t.Cleanup(func() { go func() { _ = s.Close() }(); close(release) })
	return state
}

// A replay that stalls longer than MaxDelay (a slow fetch, a broker
// restarting) looks short to the timer, which finishes the batch with what
// is buffered; the batch's other rows come later. They were dropped as rows
// of a finished batch, which is right only if ClickHouse held the batch
// before the crash: found by make chaos, one window row lost (344 of 345
// review comments). Whether or not the first insert landed, every row now
// reaches ClickHouse once.
func TestStalledReplayKeepsLateRows(t *testing.T) {
	tests := []struct {
		name   string
		policy chsink.MismatchPolicy
		ddl    string
		landed bool
	}{
		{"keep first, batch landed before the crash", chsink.MismatchKeepFirst, eventsDDL, true},
		{"keep first, batch never inserted", chsink.MismatchKeepFirst, eventsDDL, false},
		{"reinsert, batch landed before the crash", chsink.MismatchReinsert, replacingDDL, true},
		{"reinsert, batch never inserted", chsink.MismatchReinsert, replacingDDL, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t, tt.ddl)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			store := &faultStorage{Storage: checkpoint.NewMemoryStorage()}
			var state []byte
			if tt.landed {
				state = crashAfterUnackedInsert(t, env, store)
			} else {
				state = crashBeforeInsert(t, env, store)
			}

			s := env.newSink(t, store, chsink.Options{OnMismatch: tt.policy, MaxDelay: 100 * time.Millisecond})
			require.NoError(t, s.Restore(ctx, state))
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			require.NoError(t, feed(ctx, t, s, 100, 120)) // the replay stalls here
			require.Eventually(t, func() bool {
				_, err := s.Snapshot(ctx, 3)
				require.True(t, err == nil || errors.Is(err, sink.ErrReplayInProgress), "%v", err)
				return err == nil
			}, 10*time.Second, 50*time.Millisecond, "the timer never finished the replay")

			require.NoError(t, feed(ctx, t, s, 120, 170)) // the stalled rest of the batch, and more
			_, err := s.Snapshot(ctx, 4)
			require.NoError(t, err)
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)

			from := env.db + ".events"
			if tt.policy == chsink.MismatchReinsert {
				from += " FINAL" // a replay may insert rows again; FINAL keeps one of each id
			}
			want := uint64(expectedRows(0, 170))
			assert.Equal(t, want, env.count(t, "SELECT count() FROM "+from), "rows")
			assert.Equal(t, want, env.count(t, "SELECT uniqExact(id) FROM "+from), "distinct rows")
		})
	}
}

// deleteFaults fails every Delete while armed.
type deleteFaults struct {
	checkpoint.Storage
	armed atomic.Bool
}

func (f *deleteFaults) Delete(ctx context.Context, name string) error {
	if f.armed.Load() {
		return errors.New("injected: delete failed")
	}
	return f.Storage.Delete(ctx, name)
}

// Scenario 7 of issue 12: a failed delete while pruning failed the
// checkpoint notification, which stops the pipeline. Now it is logged and
// retried at the next completion.
func TestFailedPruneDeleteIsNotFatal(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	store := &deleteFaults{Storage: checkpoint.NewMemoryStorage()}
	store.armed.Store(true)
	s := env.newSink(t, store, chsink.Options{MaxRows: 40})
	checkpoints(t, s) // every CheckpointCompleted returns nil
	names, err := store.List(ctx, sink.JournalPrefix)
	require.NoError(t, err)
	before := len(names)

	store.armed.Store(false)
	require.NoError(t, feed(ctx, t, s, 250, 300))
	_, err = s.Snapshot(ctx, 6)
	require.NoError(t, err)
	require.NoError(t, s.CheckpointCompleted(ctx, 6))
	names, err = store.List(ctx, sink.JournalPrefix)
	require.NoError(t, err)
	assert.Less(t, len(names), before, "the entries kept by the failed deletes are deleted later")
	env.assertExact(t, 300, false)
}

// A checkpoint taken after a short replay was finished by the timer lies
// before the end of that batch: the source restarts inside it. Restored
// from it, the sink must take the batch's late rows (dropping those
// ClickHouse holds) instead of refusing them as out of order, which kept
// a processor in a crash loop at the same offset forever (found by
// make chaos: "row position not increasing: 493.0 after 563.0").
func TestRestoreInsideSettledBatch(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := &faultStorage{Storage: checkpoint.NewMemoryStorage()}
	state := crashAfterUnackedInsert(t, env, store) // batch [100, 150) inserted, not acknowledged

	s := env.newSink(t, store, chsink.Options{OnMismatch: chsink.MismatchKeepFirst, MaxDelay: 100 * time.Millisecond})
	require.NoError(t, s.Restore(ctx, state))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.NoError(t, feed(ctx, t, s, 100, 120)) // the replay comes up short
	var inside []byte
	require.Eventually(t, func() bool {
		var err error
		inside, err = s.Snapshot(ctx, 3) // at offset 120, inside the settled batch
		require.True(t, err == nil || errors.Is(err, sink.ErrReplayInProgress), "%v", err)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the replay never finished")
	cancel()
	<-done

	// kill -9 after checkpoint 3: the next owner restores it, and the
	// source replays from offset 120.
	ctx = context.Background()
	next := env.newSink(t, store, chsink.Options{OnMismatch: chsink.MismatchKeepFirst})
	require.NoError(t, next.Restore(ctx, inside))
	require.NoError(t, feed(ctx, t, next, 120, 170))
	_, err := next.Snapshot(ctx, 4)
	require.NoError(t, err)
	env.assertExact(t, 170, false)
}

// A checkpoint taken between two replayed batches expects the second one in
// the journal. If that batch's replay then stalls and is cut short, the
// journal holds the cut prefix in its place, and a restore from that
// checkpoint refused it as missing entries: a processor in a crash loop
// (found by a 1 M-event make chaos run, "snapshot expects 1 batches
// 17548.0..17588.0, journal has 1").
func TestRestoreExpectingBatchCutShort(t *testing.T) {
	env := setup(t, replacingDDL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := checkpoint.NewMemoryStorage()
	old := env.newSink(t, store, chsink.Options{})
	require.NoError(t, feed(ctx, t, old, 0, 100))
	state1, err := old.Snapshot(ctx, 1)
	require.NoError(t, err)
	for _, to := range []int64{150, 200} { // batches [100, 150) and [150, 200), the second unacknowledged
		require.NoError(t, feed(ctx, t, old, to-50, to))
		_, err = old.Snapshot(ctx, checkpoint.ID(to))
		require.NoError(t, err)
	}

	opts := chsink.Options{OnMismatch: chsink.MismatchReinsert, MaxDelay: 100 * time.Millisecond}
	s := env.newSink(t, store, opts)
	require.NoError(t, s.Restore(ctx, state1))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.NoError(t, feed(ctx, t, s, 100, 150))
	between, err := s.Snapshot(ctx, 3) // expects [150, 200) to be replayed
	require.NoError(t, err)
	require.NoError(t, feed(ctx, t, s, 150, 170)) // then the replay stalls
	require.Eventually(t, func() bool {
		_, err := s.Snapshot(ctx, 4)
		require.True(t, err == nil || errors.Is(err, sink.ErrReplayInProgress), "%v", err)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the timer never finished the replay")
	cancel()
	<-done // kill -9; checkpoint 4 never completed

	next := env.newSink(t, store, chsink.Options{OnMismatch: chsink.MismatchReinsert})
	require.NoError(t, next.Restore(context.Background(), between))
	require.NoError(t, feed(context.Background(), t, next, 150, 220))
	_, err = next.Snapshot(context.Background(), 5)
	require.NoError(t, err)
	want := uint64(expectedRows(0, 220))
	assert.Equal(t, want, env.count(t, "SELECT count() FROM "+env.db+".events FINAL"), "rows")
	assert.Equal(t, want, env.count(t, "SELECT uniqExact(id) FROM "+env.db+".events FINAL"), "distinct rows")
}

// TestStalledReplayKilledAfterItsInsert is issue 26's case 3: a replay of
// a batch that never landed stalls, the timer inserts its first 20
// records' rows under the batch's token, and the process dies right after
// sending that insert. The cut-short entry was written after the insert,
// so the next owner replayed the whole batch, ClickHouse dropped it as a
// duplicate of the prefix, and the last 30 records' rows were lost (139 of
// 169). The entry is now journaled before the insert.
func TestStalledReplayKilledAfterItsInsert(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := &deadStorage{Storage: checkpoint.NewMemoryStorage()}
	state := crashBeforeInsert(t, env, store) // [100, 150) journaled, never inserted

	s := env.newSink(t, store, chsink.Options{OnMismatch: chsink.MismatchKeepFirst, MaxDelay: 100 * time.Millisecond})
	require.NoError(t, s.Restore(ctx, state))
	var once sync.Once
	s.SetHooks(nil, func() { once.Do(func() { store.dead.Store(true) }) }) // dies as the insert goes out
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.NoError(t, feed(ctx, t, s, 100, 120)) // the replay stalls here
	require.Eventually(t, func() bool {
		return env.count(t, "SELECT count() FROM "+env.db+".events") == uint64(expectedRows(0, 120))
	}, 20*time.Second, 50*time.Millisecond, "the stalled prefix is inserted")
	cancel()
	<-done
	require.NoError(t, s.Close())

	store.dead.Store(false)
	next := env.newSink(t, store, chsink.Options{OnMismatch: chsink.MismatchKeepFirst, MaxDelay: 100 * time.Millisecond})
	require.NoError(t, next.Restore(context.Background(), state))
	require.NoError(t, feed(context.Background(), t, next, 100, 170))
	_, err := next.Snapshot(context.Background(), 5)
	require.NoError(t, err)
	want := uint64(expectedRows(0, 170))
	assert.Equal(t, want, env.count(t, "SELECT count() FROM "+env.db+".events"), "rows")
	assert.Equal(t, want, env.count(t, "SELECT uniqExact(id) FROM "+env.db+".events"), "distinct rows")
}
