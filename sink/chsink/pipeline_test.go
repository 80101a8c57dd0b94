package chsink_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/internal/journal"
)

// row is one row of the test stream with its position.
type row struct {
	pos sink.Position
	ev  event
}

// rowsFrom returns the rows that records [from, to) produce, in order.
func rowsFrom(from, to int64) []row {
	var out []row
	for o := from; o < to; o++ {
		for i, r := range rowsOf(o) {
			out = append(out, row{sink.Position{Offset: o, Index: uint32(i)}, r})
		}
	}
	return out
}

func addRows(ctx context.Context, s *chsink.Sink[event], rows []row) error {
	for _, r := range rows {
		if err := s.Add(ctx, r.pos, r.ev); err != nil {
			return err
		}
	}
	return nil
}

// sinkGoroutines counts the goroutines running code of the sink or of its
// ClickHouse client.
func sinkGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "exactlyonce/sink/chsink.") || strings.Contains(g, "ClickHouse/ch-go.") {
			n++
		}
	}
	return n
}

// TestAddOverlapsInsertSnapshotWaits shows the pipelining: while a sealed
// batch is being inserted the next one fills without waiting for it, and
// Snapshot returns only when ClickHouse holds every row before the barrier.
func TestAddOverlapsInsertSnapshotWaits(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	s := env.newSink(t, checkpoint.NewMemoryStorage(), chsink.Options{MaxRows: 50})
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	s.SetHooks(nil, func() {
		if calls.Add(1) == 1 {
			close(started)
			<-release // the first insert hangs until released
		}
	})
	rows := rowsFrom(0, 200)
	require.GreaterOrEqual(t, len(rows), 150)

	require.NoError(t, addRows(ctx, s, rows[:50])) // the 50th row seals the batch
	<-started
	// The first batch is not in ClickHouse, yet the next one fills.
	require.NoError(t, addRows(ctx, s, rows[50:99]))
	assert.Equal(t, uint64(0), env.count(t, "SELECT count() FROM "+env.db+".events"))

	done := make(chan error, 1)
	go func() {
		_, err := s.Snapshot(ctx, 1)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Snapshot returned while a batch was in flight: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-done)
	assert.Equal(t, uint64(99), env.count(t, "SELECT count() FROM "+env.db+".events"), "every row before the barrier")

	// Many pipelined batches, then a barrier: all of them are in ClickHouse.
	require.NoError(t, addRows(ctx, s, rows[99:]))
	_, err := s.Snapshot(ctx, 2)
	require.NoError(t, err)
	env.assertExact(t, 200, false)
}

// TestPerCallContextDoesNotCancelInsert adds every row under a context that
// is cancelled as soon as Add returns, a common way to bound each call: the
// batches sealed by those calls are inserted anyway, because the insert in
// the background belongs to the sink, not to the call.
func TestPerCallContextDoesNotCancelInsert(t *testing.T) {
	env := setup(t, eventsDDL)
	s := env.newSink(t, checkpoint.NewMemoryStorage(), chsink.Options{MaxRows: 50})
	var calls atomic.Int32
	s.SetHooks(nil, func() {
		if calls.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond) // the first insert outlives its call
		}
	})
	for _, r := range rowsFrom(0, 200) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := s.Add(ctx, r.pos, r.ev)
		cancel()
		require.NoError(t, err)
	}
	_, err := s.Snapshot(context.Background(), 1)
	require.NoError(t, err)
	env.assertExact(t, 200, false)
}

// TestFailedBackgroundInsertSurfaces shows that the failure of a batch
// inserted in the background is returned by the next call (Add, or the
// Snapshot of the barrier) as the batch's *InsertError, that the sink stays
// broken, and that nothing after it is acknowledged: the journal holds the
// batch unacknowledged, and a restore from the last checkpoint writes every
// row exactly once once the table is fixed.
func TestFailedBackgroundInsertSurfaces(t *testing.T) {
	tests := []struct {
		name string
		next func(ctx context.Context, s *chsink.Sink[event], more row) error
	}{
		{"next Add", func(ctx context.Context, s *chsink.Sink[event], more row) error {
			return s.Add(ctx, more.pos, more.ev)
		}},
		{"Snapshot", func(ctx context.Context, s *chsink.Sink[event], _ row) error {
			_, err := s.Snapshot(ctx, 2)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t, eventsDDL)
			ctx := context.Background()
			store := checkpoint.NewMemoryStorage()
			s := env.newSink(t, store, chsink.Options{MaxRows: 50, InitialBackoff: 10 * time.Millisecond})
			require.NoError(t, feed(ctx, t, s, 0, 100))
			state, err := s.Snapshot(ctx, 1)
			require.NoError(t, err)
			require.NoError(t, s.CheckpointCompleted(ctx, 1))

			env.exec(t, "ALTER TABLE "+env.db+".events DROP COLUMN note") // every insert fails permanently
			rows := rowsFrom(100, 300)
			require.NoError(t, addRows(ctx, s, rows[:50]), "the batch is sealed; its insert runs in the background")
			time.Sleep(300 * time.Millisecond) // it has failed by now

			err = tt.next(ctx, s, rows[50])
			var ie *chsink.InsertError
			require.ErrorAs(t, err, &ie)
			assert.True(t, ie.Permanent)
			assert.Equal(t, rows[0].pos, ie.Intent.First)
			assert.Equal(t, rows[49].pos, ie.Intent.Last)

			// Broken until Restore: the checkpoint fails, Close reports nothing new.
			_, err = s.Snapshot(ctx, 3)
			require.ErrorAs(t, err, &ie)
			require.ErrorAs(t, s.Add(ctx, rows[51].pos, rows[51].ev), &ie)
			require.NoError(t, s.Close())
			assert.Equal(t, uint64(expectedRows(0, 100)), env.count(t, "SELECT count() FROM "+env.db+".events"))

			j, err := journal.Open(store, env.db+".events", checkpoint.TopicPartition{Topic: "events"})
			require.NoError(t, err)
			require.NoError(t, j.Claim(ctx))
			before := rowsFrom(0, 100)
			entries, err := j.Load(ctx, &before[len(before)-1].pos) // after checkpoint 1
			require.NoError(t, err)
			require.NotEmpty(t, entries)
			for _, in := range entries {
				assert.False(t, in.Acked, "batch %s..%s acknowledged past the failure", in.First, in.Last)
			}

			env.exec(t, "ALTER TABLE "+env.db+".events ADD COLUMN note Nullable(String)")
			s2 := env.newSink(t, store, chsink.Options{MaxRows: 64})
			require.NoError(t, s2.Restore(ctx, state))
			require.NoError(t, feed(ctx, t, s2, 100, 300))
			_, err = s2.Snapshot(ctx, 4)
			require.NoError(t, err)
			env.assertExact(t, 300, false)
		})
	}
}

// TestCloseWithBatchInFlight closes a sink whose insert hangs (the server
// got the block, the answer never comes) while the batch before it is
// acknowledged but its ack not yet journaled: Close returns at once, no
// goroutine of the sink outlives it, and a replay from the last checkpoint
// writes every row exactly once.
func TestCloseWithBatchInFlight(t *testing.T) {
	env := setup(t, eventsDDL)
	env.withRollup(t)
	ctx := context.Background()
	px := newProxy(t, env.addr)
	store := checkpoint.NewMemoryStorage()
	s := env.newSinkAt(t, px.Addr(), store, chsink.Options{MaxRows: 50, InsertTimeout: 30 * time.Second})
	require.NoError(t, feed(ctx, t, s, 0, 100))
	state, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)

	var calls atomic.Int32
	s.SetHooks(nil, func() {
		if calls.Add(1) == 2 { // the second batch after the checkpoint
			px.stall.Store(true)
			px.cutAfter.Store(1) // this connection already sent more: its answers are swallowed
		}
	})
	rows := rowsFrom(100, 300)
	require.NoError(t, addRows(ctx, s, rows[:120])) // two batches sealed, rows buffered
	require.Eventually(t, func() bool { return px.cuts.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Positive(t, sinkGoroutines(), "the insert is in flight")

	start := time.Now()
	require.NoError(t, s.Close())
	assert.Less(t, time.Since(start), 5*time.Second)
	require.Eventually(t, func() bool { return sinkGoroutines() == 0 }, 2*time.Second, 10*time.Millisecond,
		"goroutines of the sink after Close")
	require.ErrorIs(t, s.Add(ctx, rows[120].pos, rows[120].ev), sink.ErrClosed)

	s2 := env.newSink(t, store, chsink.Options{MaxRows: 1000}) // other batching: the journal wins
	require.NoError(t, s2.Restore(ctx, state))
	require.NoError(t, feed(ctx, t, s2, 100, 300))
	_, err = s2.Snapshot(ctx, 2)
	require.NoError(t, err)
	env.assertExact(t, 300, true)
}
