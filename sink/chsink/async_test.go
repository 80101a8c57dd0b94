package chsink_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// asyncChain is one incarnation of a chain holding one sink behind a proxy,
// checkpointed by a real Coordinator over storage (journal and checkpoints
// alike).
type asyncChain struct {
	sink  *chsink.Sink[event]
	coord *checkpoint.Coordinator
	task  *checkpoint.Task
	next  int64
}

func newAsyncChain(t *testing.T, env chEnv, addr string, storage checkpoint.Storage) *asyncChain {
	t.Helper()
	ctx := context.Background()
	s := env.newSinkAt(t, addr, storage, chsink.Options{MaxDelay: time.Hour, MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	task, err := coord.Attach(ctx, checkpoint.TopicPartition{Topic: "events", Partition: 0}, map[string]checkpoint.Participant{"sink": s})
	require.NoError(t, err)
	c := &asyncChain{sink: s, coord: coord, task: task}
	if r := task.Restored(); r != nil {
		c.next = r.NextOffset
	}
	return c
}

// feed processes records [c.next, to); errors are the sink's (a failed
// insert in the background breaks it).
func (c *asyncChain) feed(t *testing.T, to int64) error {
	err := feed(context.Background(), t, c.sink, c.next, to)
	if err == nil {
		c.next = to
	}
	return err
}

func (c *asyncChain) stop() {
	c.task.Detach()
	_ = c.sink.Close()
	_ = c.coord.Close()
}

// TestAsyncInsertFailureAbortsCheckpoint: ClickHouse goes away while the
// barrier's insert runs in the background, after the chain went on. The
// checkpoint is aborted (no file, the chain hears of it on Failures) and
// the restarted chain, restored from the checkpoint before, replays the
// batch: every row once.
func TestAsyncInsertFailureAbortsCheckpoint(t *testing.T) {
	env := setup(t, eventsDDL)
	px := newProxy(t, env.addr)
	storage := checkpoint.NewMemoryStorage()
	ctx := context.Background()

	c := newAsyncChain(t, env, px.Addr(), storage)
	require.NoError(t, c.feed(t, 100))
	require.NoError(t, c.task.Checkpoint(ctx, nil, c.next, checkpoint.Meta{}, nil))
	require.NoError(t, c.feed(t, 200))
	// ClickHouse is down from the moment the barrier's insert is sent.
	c.sink.SetHooks(nil, func() { px.refuse.Store(true); px.closeAll() })
	require.NoError(t, c.task.Begin(ctx, nil, c.next, checkpoint.Meta{}, nil), "the barrier's part does not wait for ClickHouse")
	_ = c.feed(t, 250) // the chain goes on; the sink breaks once the insert failed
	var ce *checkpoint.Error
	require.ErrorAs(t, <-c.task.Failures(), &ce)
	assert.Equal(t, "snapshot", ce.Op)
	assert.Equal(t, "sink", ce.Participant)
	assert.Error(t, c.task.Wait(ctx))
	cp, err := c.coord.Store().Latest(ctx, checkpoint.TopicPartition{Topic: "events", Partition: 0})
	require.NoError(t, err)
	assert.Equal(t, checkpoint.ID(1), cp.ID, "the aborted checkpoint wrote nothing")
	assert.Equal(t, int64(100), cp.NextOffset)
	c.stop()

	px.refuse.Store(false)
	c = newAsyncChain(t, env, px.Addr(), storage)
	require.Equal(t, int64(100), c.next, "restored from the last completed checkpoint")
	require.NoError(t, c.feed(t, 300))
	require.NoError(t, c.task.Checkpoint(ctx, nil, c.next, checkpoint.Meta{}, nil))
	c.stop()
	env.assertExact(t, 300, false)
}

// TestRevokedWhilePending: the partition is revoked (the chain's context
// ends) while its barrier's insert is still running. The pending
// checkpoint writes no file; the next owner restores the one before and
// replays: every row once, the batch that may have landed deduplicated by
// its token.
func TestRevokedWhilePending(t *testing.T) {
	env := setup(t, eventsDDL)
	storage := checkpoint.NewMemoryStorage()
	ctx := context.Background()

	c := newAsyncChain(t, env, env.addr, storage)
	require.NoError(t, c.feed(t, 100))
	require.NoError(t, c.task.Checkpoint(ctx, nil, c.next, checkpoint.Meta{}, nil))
	require.NoError(t, c.feed(t, 200))
	inserting, release := make(chan struct{}), make(chan struct{})
	c.sink.SetHooks(nil, func() { close(inserting); <-release })
	owned, revoke := context.WithCancel(ctx)
	committed := false
	require.NoError(t, c.task.Begin(owned, nil, c.next, checkpoint.Meta{}, func(context.Context, int64) error { committed = true; return nil }))
	<-inserting
	require.NoError(t, c.feed(t, 230)) // records after the barrier
	revoke()
	err := c.task.Wait(ctx)
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
	close(release) // the insert lands after the revocation
	c.stop()
	assert.False(t, committed, "offset committed after the revocation")
	cp, err := c.coord.Store().Latest(ctx, checkpoint.TopicPartition{Topic: "events", Partition: 0})
	require.NoError(t, err)
	assert.Equal(t, checkpoint.ID(1), cp.ID)

	c = newAsyncChain(t, env, env.addr, storage)
	require.Equal(t, int64(100), c.next)
	require.NoError(t, c.feed(t, 300))
	require.NoError(t, c.task.Checkpoint(ctx, nil, c.next, checkpoint.Meta{}, nil))
	c.stop()
	env.assertExact(t, 300, false)
}

// TestRowsAfterTheBarrierNotInPendingCheckpoint: the checkpoint whose
// insert was pending while the chain added more rows names the barrier's
// position, not a later one, and a restore from it replays exactly the
// rows after it.
func TestRowsAfterTheBarrierNotInPendingCheckpoint(t *testing.T) {
	env := setup(t, eventsDDL)
	storage := checkpoint.NewMemoryStorage()
	ctx := context.Background()

	c := newAsyncChain(t, env, env.addr, storage)
	require.NoError(t, c.feed(t, 100))
	inserting, release := make(chan struct{}), make(chan struct{})
	c.sink.SetHooks(nil, func() {
		select {
		case <-inserting:
		default:
			close(inserting)
			<-release
		}
	})
	require.NoError(t, c.task.Begin(ctx, nil, c.next, checkpoint.Meta{}, nil))
	<-inserting
	require.NoError(t, c.feed(t, 160)) // after the barrier, while its insert is held
	close(release)
	require.NoError(t, c.task.Wait(ctx))
	cp, err := c.coord.Store().Latest(ctx, checkpoint.TopicPartition{Topic: "events", Partition: 0})
	require.NoError(t, err)
	assert.Equal(t, int64(100), cp.NextOffset)
	assert.Contains(t, string(cp.States["sink"]), `"covered":{"o":98,"i":1}`, "the sink's state ends at the barrier's last row")
	// The process dies with rows 100..159 buffered, never inserted.
	c.task.Detach()
	_ = c.sink.Close()
	_ = c.coord.Close()

	c = newAsyncChain(t, env, env.addr, storage)
	require.Equal(t, int64(100), c.next)
	require.NoError(t, c.feed(t, 200))
	require.NoError(t, c.task.Checkpoint(ctx, nil, c.next, checkpoint.Meta{}, nil))
	c.stop()
	env.assertExact(t, 200, false)
}

// TestBarrierWaitsForNoInsert: with every insert held, full batches fill
// the queue (one inserting, one queued) and the chain adds more rows; the
// barrier still cuts its batch and returns without waiting for any of
// them, and its checkpoint completes, naming the barrier's position, once
// the inserts are let go. Every row lands once.
func TestBarrierWaitsForNoInsert(t *testing.T) {
	env := setup(t, eventsDDL)
	storage := checkpoint.NewMemoryStorage()
	ctx := context.Background()
	s := env.newSinkAt(t, env.addr, storage, chsink.Options{MaxDelay: time.Hour, MaxRows: 30})
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	defer coord.Close()
	p := checkpoint.TopicPartition{Topic: "events", Partition: 0}
	task, err := coord.Attach(ctx, p, map[string]checkpoint.Participant{"sink": s})
	require.NoError(t, err)
	defer task.Detach()
	inserting, release := make(chan struct{}, 16), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	defer let() // a failed test still lets the held inserts go
	s.SetHooks(nil, func() { inserting <- struct{}{}; <-release })
	require.NoError(t, feed(ctx, t, s, 0, 40)) // 39 rows: one full batch, inserting
	<-inserting
	require.NoError(t, feed(ctx, t, s, 40, 70)) // 30 more: another full batch, queued
	begun := make(chan error, 1)
	go func() { begun <- task.Begin(ctx, nil, 70, checkpoint.Meta{}, nil) }()
	select {
	case err := <-begun:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the barrier waited for an insert")
	}
	let()
	require.NoError(t, task.Wait(ctx))
	cp, err := store.Latest(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, int64(70), cp.NextOffset)
	require.NoError(t, s.Close())
	env.assertExact(t, 70, false)
}
