package chsink_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

func TestServerKilledAndRestarted(t *testing.T) {
	srv := testkit.StartClickHouse(t)
	db := testkit.NewDatabase(t, srv.Addr())
	c := testkit.DialClickHouse(t, srv.Addr(), db)
	env := chEnv{addr: srv.Addr(), db: db, conn: c}
	env.exec(t, fmt.Sprintf(eventsDDL, db))
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()

	// Down for longer than the retry budget: the checkpoint fails, bounded.
	s1 := env.newSink(t, store, chsink.Options{MaxAttempts: 4, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	require.NoError(t, feed(ctx, t, s1, 0, 100))
	state1, err := s1.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, feed(ctx, t, s1, 100, 200))
	srv.Kill()
	start := time.Now()
	_, err = s1.Snapshot(ctx, 2)
	var ie *chsink.InsertError
	require.True(t, errors.As(err, &ie), "%v", err)
	assert.False(t, ie.Permanent)
	assert.Equal(t, 4, ie.Attempts)
	assert.Less(t, time.Since(start), 10*time.Second)
	srv.Restart()
	env.conn = testkit.DialClickHouse(t, srv.Addr(), db)

	s2 := env.newSink(t, store, chsink.Options{MaxAttempts: 21, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 300 * time.Millisecond})
	require.NoError(t, s2.Restore(ctx, state1))
	require.NoError(t, feed(ctx, t, s2, 100, 300))

	// Down for less than the retry budget: the sink waits it out.
	srv.Kill()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(500 * time.Millisecond)
		srv.Restart()
	}()
	_, err = s2.Snapshot(ctx, 3)
	wg.Wait()
	require.NoError(t, err)
	env.conn = testkit.DialClickHouse(t, srv.Addr(), db)
	env.assertExact(t, 300, false)
}

// TestPausedOldOwnerResumesLate pauses the old owner (as SIGSTOP would)
// inside a flush while a new owner restores the partition and writes past
// it, then lets the old owner resume (SIGCONT): no duplicate, no gap.
func TestPausedOldOwnerResumesLate(t *testing.T) {
	tests := []struct {
		name  string
		where string // the old owner pauses before its intent or before its insert
	}{
		{"before intent", "record"},
		{"after intent, before insert", "insert"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t, eventsDDL)
			env.withRollup(t)
			ctx := context.Background()
			store := checkpoint.NewMemoryStorage()

			old := env.newSink(t, store, chsink.Options{MaxRows: 1000})
			require.NoError(t, feed(ctx, t, old, 0, 50))
			state1, err := old.Snapshot(ctx, 1)
			require.NoError(t, err)
			require.NoError(t, old.CheckpointCompleted(ctx, 1))

			require.NoError(t, feed(ctx, t, old, 50, 120))
			paused, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			pause := func() { once.Do(func() { close(paused); <-resume }) }
			if tt.where == "record" {
				old.SetHooks(pause, nil)
			} else {
				old.SetHooks(nil, pause)
			}
			oldDone := make(chan error, 1)
			go func() { // the old owner's chain, frozen mid-flush; its context never ends
				_, err := old.Snapshot(ctx, 2)
				oldDone <- err
			}()
			<-paused

			// The group rebalanced: a new owner restores checkpoint 1.
			next := env.newSink(t, store, chsink.Options{MaxRows: 7})
			require.NoError(t, next.Restore(ctx, state1))
			require.NoError(t, feed(ctx, t, next, 50, 200))
			_, err = next.Snapshot(ctx, 3)
			require.NoError(t, err)

			close(resume) // SIGCONT
			err = <-oldDone
			if tt.where == "record" {
				require.ErrorIs(t, err, sink.ErrFenced)
			} else {
				require.NoError(t, err) // its insert was deduplicated
			}
			// Whatever the old owner does next is refused.
			_ = feed(ctx, t, old, 200, 260)
			_, err = old.Snapshot(ctx, 4)
			require.ErrorIs(t, err, sink.ErrFenced)

			env.assertExact(t, 200, true)
		})
	}
}

// naiveSink reproduces the seed's sink: a buffer that is not checkpoint
// state, a time check that runs only when a row arrives, and a batch that is
// logged and dropped when its retries are exhausted.
type naiveSink struct {
	addr, db  string
	buf       []event
	batch     int
	delay     time.Duration
	lastFlush time.Time
	dropped   int
}

func (n *naiveSink) Add(ctx context.Context, e event) {
	n.buf = append(n.buf, e)
	if len(n.buf) >= n.batch || time.Since(n.lastFlush) >= n.delay {
		n.flush(ctx)
	}
}

func (n *naiveSink) flush(ctx context.Context) {
	n.lastFlush = time.Now()
	var id proto.ColUInt64
	for _, e := range n.buf {
		id.Append(e.ID)
	}
	for attempt := 0; attempt < 3; attempt++ {
		c, err := ch.Dial(ctx, ch.Options{Address: n.addr, Database: n.db, DialTimeout: 200 * time.Millisecond})
		if err == nil {
			err = c.Do(ctx, ch.Query{Body: "INSERT INTO naive_events (id) VALUES", Input: proto.Input{{Name: "id", Data: &id}}})
			_ = c.Close()
		}
		if err == nil {
			n.buf = n.buf[:0]
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	// "Retries exhausted: log and drop the batch."
	n.dropped += len(n.buf)
	n.buf = n.buf[:0]
}

func TestNaiveSinkLosesRowsRealSinkDoesNot(t *testing.T) {
	env := setup(t, eventsDDL, `CREATE TABLE %s.naive_events (id UInt64) ENGINE = MergeTree ORDER BY id`)
	ctx := context.Background()
	px := newProxy(t, env.addr)

	naive := &naiveSink{addr: px.Addr(), db: env.db, batch: 50, delay: time.Hour, lastFlush: time.Now()}
	store := checkpoint.NewMemoryStorage()
	real := env.newSinkAt(t, px.Addr(), store, chsink.Options{MaxRows: 50, MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})

	naiveFeed := func(from, to int64) {
		for o := from; o < to; o++ {
			for _, r := range rowsOf(o) {
				naive.Add(ctx, r)
			}
		}
	}

	// Records [0, 100), then a checkpoint that completes.
	naiveFeed(0, 100)
	require.NoError(t, feed(ctx, t, real, 0, 100))
	state1, err := real.Snapshot(ctx, 1)
	require.NoError(t, err)

	// ClickHouse becomes unreachable for records [100, 200).
	px.refuse.Store(true)
	px.closeAll()
	naiveFeed(100, 200) // the naive sink drops a batch; nothing stops its checkpoint
	errReal := feed(ctx, t, real, 100, 200)
	if errReal == nil { // the failed inserts may still be retrying
		_, errReal = real.Snapshot(ctx, 2)
	}
	require.Error(t, errReal) // the real sink fails: its checkpoint cannot complete
	px.refuse.Store(false)

	// The naive pipeline's checkpoint moved past 200; a quiet stream then
	// leaves records [200, 210) in its buffer when the process dies.
	naiveFeed(200, 210)

	// The real pipeline restarts from checkpoint 1 and replays.
	real2 := env.newSinkAt(t, px.Addr(), store, chsink.Options{MaxRows: 50})
	require.NoError(t, real2.Restore(ctx, state1))
	require.NoError(t, feed(ctx, t, real2, 100, 210))
	_, err = real2.Snapshot(ctx, 2)
	require.NoError(t, err)

	want := uint64(expectedRows(0, 210))
	gotNaive := env.count(t, "SELECT count() FROM "+env.db+".naive_events")
	t.Logf("naive sink: %d of %d rows (%d dropped after retries, %d stuck in its buffer)", gotNaive, want, naive.dropped, len(naive.buf))
	assert.Less(t, gotNaive, want, "the naive sink loses rows")
	assert.Positive(t, naive.dropped)
	assert.NotEmpty(t, naive.buf)
	env.assertExact(t, 210, false)
}
