package chsink_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// TestRestoreAcceptsEveryCrashState enumerates the journals a crash can
// leave after a checkpoint that expects a batch to be replayed (issue 26,
// case 5: make demo NAIVE=all restarted a processor forever with "journal
// entries expected by the snapshot are missing"): the replay superseded
// the batch (another version under a fresh token), cut it short (a
// stalled replay, under either policy), or both, then the process died at
// once or after journaling the next batch, whose insert never finished. A
// restore from that checkpoint must accept each, and the rows end up in
// ClickHouse exactly once.
func TestRestoreAcceptsEveryCrashState(t *testing.T) {
	tests := []struct {
		name    string
		policy  chsink.MismatchPolicy
		changed bool // the replay's content differs from the journal's
		stall   bool // the replay stalls and the timer finishes it
		next    bool // a later batch is journaled, its insert never ends
	}{
		{"replayed as journaled", chsink.MismatchKeepFirst, false, false, false},
		{"replayed as journaled, next insert failed", chsink.MismatchKeepFirst, false, false, true},
		{"reinserted under a fresh token", chsink.MismatchReinsert, true, false, false},
		{"reinserted, next insert failed", chsink.MismatchReinsert, true, false, true},
		{"reinserted and cut short", chsink.MismatchReinsert, true, true, false},
		{"reinserted and cut short, next insert failed", chsink.MismatchReinsert, true, true, true},
		{"kept first and cut short", chsink.MismatchKeepFirst, false, true, false},
		{"kept first and cut short, next insert failed", chsink.MismatchKeepFirst, false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t, replacingDDL)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			store := checkpoint.NewMemoryStorage()
			feedAs := feed
			if tt.changed {
				feedAs = feedChanged
			}

			old := env.newSink(t, store, chsink.Options{})
			require.NoError(t, feed(ctx, t, old, 0, 100))
			state1, err := old.Snapshot(ctx, 1)
			require.NoError(t, err)
			require.NoError(t, feed(ctx, t, old, 100, 150))
			_, err = old.Snapshot(ctx, 2) // [100, 150) lands, its ack rides on no later intent
			require.NoError(t, err)

			opts := chsink.Options{OnMismatch: tt.policy, MaxDelay: 100 * time.Millisecond}
			s := env.newSink(t, store, opts)
			require.NoError(t, s.Restore(ctx, state1))
			expecting, err := s.Snapshot(ctx, 3) // expects [100, 150) to be replayed
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			replayed := int64(150)
			if tt.stall {
				replayed = 120
			}
			require.NoError(t, feedAs(ctx, t, s, 100, replayed))
			require.Eventually(t, func() bool {
				_, err := s.Snapshot(ctx, 4)
				require.True(t, err == nil || errors.Is(err, sink.ErrReplayInProgress), "%v", err)
				return err == nil
			}, 20*time.Second, 50*time.Millisecond, "the replay is settled")
			if tt.next {
				frozen, release := make(chan struct{}), make(chan struct{})
				var once sync.Once
				s.SetHooks(nil, func() { once.Do(func() { close(frozen) }); <-release })
				require.NoError(t, feedAs(ctx, t, s, replayed, 160))
				go func() { _, _ = s.Snapshot(ctx, 5) }() // journals the next batch, hangs in its insert
				<-frozen
				cancel() // kill -9: Run and the hung insert end at cleanup
				t.Cleanup(func() { close(release); <-done })
			} else {
				cancel() // kill -9
				<-done
			}

			next := env.newSink(t, store, opts)
			require.NoError(t, next.Restore(context.Background(), expecting), "a restore accepts the journal")
			require.NoError(t, feedAs(context.Background(), t, next, 100, 200))
			_, err = next.Snapshot(context.Background(), 6)
			require.NoError(t, err)
			want := uint64(expectedRows(0, 200))
			final := "SELECT count() FROM " + env.db + ".events FINAL"
			assert.Equal(t, want, env.count(t, final), "rows")
			assert.Equal(t, want, env.count(t, "SELECT uniqExact(id) FROM "+env.db+".events"), "distinct rows")
		})
	}
}

// TestRestoreAcceptsBatchBeforeExpected is the journal a chain whose rows
// move between owners leaves (a Tick-driven flush, as chaudit's folder and
// window early firings have): the snapshot expects the batch at 110, and
// after it the replay's rows came at 104, before that batch, so they were
// journaled as a batch of their own (see journal.NextStep) ahead of the one
// the snapshot expects. A restore from that snapshot must accept the
// journal: an 8-instance rolling restart (make chaos -kinds
// processor-rolling-restart) restarted a processor forever on it with
// "snapshot expects 3 batches 71.0..73.0, journal has 4".
func TestRestoreAcceptsBatchBeforeExpected(t *testing.T) {
	for name, policy := range map[string]chsink.MismatchPolicy{"keep first": chsink.MismatchKeepFirst, "reinsert": chsink.MismatchReinsert} {
		t.Run(name, func(t *testing.T) {
			env := setup(t, replacingDDL)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			store := checkpoint.NewMemoryStorage()
			old := env.newSink(t, store, chsink.Options{})
			require.NoError(t, feed(ctx, t, old, 0, 100))
			state1, err := old.Snapshot(ctx, 1)
			require.NoError(t, err)
			require.NoError(t, feed(ctx, t, old, 110, 111)) // the batch at 110, landed
			_, err = old.Snapshot(ctx, 2)
			require.NoError(t, err)

			opts := chsink.Options{OnMismatch: policy, MaxDelay: 50 * time.Millisecond}
			s := env.newSink(t, store, opts)
			require.NoError(t, s.Restore(ctx, state1))
			expecting, err := s.Snapshot(ctx, 3) // expects the batch at 110
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			require.NoError(t, feed(ctx, t, s, 104, 105)) // rows before it: a batch of their own
			require.Eventually(t, func() bool {
				names, err := store.List(ctx, sink.JournalPrefix)
				require.NoError(t, err)
				for _, n := range names {
					if strings.Contains(n, "/b-00000000000000000104-") {
						return true
					}
				}
				return false
			}, 20*time.Second, 20*time.Millisecond, "the batch at 104 is journaled (Run's MaxDelay)")
			cancel() // kill -9
			<-done

			next := env.newSink(t, store, opts)
			require.NoError(t, next.Restore(context.Background(), expecting), "a restore accepts the journal")
			require.NoError(t, feed(context.Background(), t, next, 104, 105))
			require.NoError(t, feed(context.Background(), t, next, 110, 111))
			_, err = next.Snapshot(context.Background(), 4)
			require.NoError(t, err)
			want := uint64(expectedRows(0, 100) + len(rowsOf(104)) + len(rowsOf(110)))
			assert.Equal(t, want, env.count(t, "SELECT count() FROM "+env.db+".events FINAL"), "rows")
			assert.Equal(t, want, env.count(t, "SELECT uniqExact(id) FROM "+env.db+".events"), "distinct rows")
		})
	}
}
