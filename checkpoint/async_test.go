package checkpoint_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// asyncCounter is an AsyncParticipant whose state is a number: the
// synchronous part takes the number at the barrier, the pending part waits
// for release (or its context) before it returns it.
type asyncCounter struct {
	counter
	release chan error // what the next pending part returns

	mu        sync.Mutex
	notified  []checkpoint.ID
	notifyErr error // what CheckpointCompleted returns
	cancelled int   // pending parts that saw their context end
}

var _ checkpoint.AsyncParticipant = (*asyncCounter)(nil)

func newAsyncCounter() *asyncCounter { return &asyncCounter{release: make(chan error, 1)} }

func (c *asyncCounter) SnapshotAsync(_ context.Context, _ checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	if c.snapErr != nil {
		return nil, c.snapErr
	}
	at := c.n
	return func(ctx context.Context) ([]byte, error) {
		select {
		case err := <-c.release:
			if err != nil {
				return nil, err
			}
			return binary.BigEndian.AppendUint64(nil, at), nil
		case <-ctx.Done():
			c.mu.Lock()
			c.cancelled++
			c.mu.Unlock()
			return nil, ctx.Err()
		}
	}, nil
}

func (c *asyncCounter) CheckpointCompleted(_ context.Context, id checkpoint.ID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notified = append(c.notified, id)
	return c.notifyErr
}

func (c *asyncCounter) notifications() []checkpoint.ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]checkpoint.ID(nil), c.notified...)
}

// TestBeginDoesNotWaitForThePendingPart: the chain goes on while the
// pending part runs; nothing is written and no offset moves until it
// returned, and the state is the one at the barrier, not counting the
// records processed after it.
func TestBeginDoesNotWaitForThePendingPart(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	a, s := newAsyncCounter(), &counter{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": a, "s": s})
	require.NoError(t, err)
	defer task.Detach()
	a.n, s.n = 10, 20
	commits := make(chan int64, 1)
	commit := func(_ context.Context, next int64) error { commits <- next; return nil }
	require.NoError(t, task.Begin(ctx, nil, 10, checkpoint.Meta{}, commit))
	a.n, s.n = 15, 25 // records after the barrier

	_, err = coord.Store().Latest(ctx, p0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound, "written before the pending part returned")
	assert.Empty(t, commits, "offset committed before the checkpoint was written")

	a.release <- nil
	require.NoError(t, task.Wait(ctx))
	assert.Equal(t, int64(10), <-commits)
	cp, err := coord.Store().Latest(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, binary.BigEndian.AppendUint64(nil, 10), cp.States["a"], "the pending part's state")
	assert.Equal(t, binary.BigEndian.AppendUint64(nil, 20), cp.States["s"], "the synchronous participant's state")
	assert.Equal(t, []checkpoint.ID{1}, a.notifications(), "async participant notified by the task")
	assert.Empty(t, s.completed, "a synchronous participant is notified in its chain's goroutine, at the next barrier")

	a.release <- nil
	require.NoError(t, task.Checkpoint(ctx, nil, 15, checkpoint.Meta{}, nil))
	assert.Equal(t, []checkpoint.ID{1, 2}, s.completed)
	cp, err = coord.Store().Latest(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, binary.BigEndian.AppendUint64(nil, 15), cp.States["a"])
}

// TestOffsetCommittedAfterNotification: the group offset moves only after
// the asynchronous participants were told the checkpoint completed (a
// kafkasink committed its transaction), so it never passes output that can
// still abort; when the notification fails, the file stays written and
// the offset stays where it was.
func TestOffsetCommittedAfterNotification(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	a := newAsyncCounter()
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": a})
	require.NoError(t, err)
	defer task.Detach()

	var seen []checkpoint.ID
	commit := func(_ context.Context, next int64) error { seen = a.notifications(); return nil }
	a.release <- nil
	require.NoError(t, task.Checkpoint(ctx, nil, 5, checkpoint.Meta{}, commit))
	assert.Equal(t, []checkpoint.ID{1}, seen, "offset committed before the participant was notified")

	a.notifyErr = errors.New("transaction commit failed")
	committed := false
	a.release <- nil
	require.NoError(t, task.Begin(ctx, nil, 9, checkpoint.Meta{}, func(context.Context, int64) error { committed = true; return nil }))
	var cerr *checkpoint.Error
	require.ErrorAs(t, task.Wait(ctx), &cerr)
	assert.Equal(t, "notify", cerr.Op)
	assert.False(t, committed, "offset committed although the participant's commit failed")
	cp, err := coord.Store().Latest(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, int64(9), cp.NextOffset, "the checkpoint is written before the notification")
}

// TestPendingPartFailureAborts: a pending part's error writes nothing,
// moves no offset, notifies no one, and reaches the chain on Failures, from
// Wait, from the barrier and from the next Begin.
func TestPendingPartFailureAborts(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	a := newAsyncCounter()
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": a})
	require.NoError(t, err)
	defer task.Detach()
	a.release <- nil
	require.NoError(t, task.Checkpoint(ctx, nil, 5, checkpoint.Meta{}, nil))

	errc := make(chan error, 1)
	go func() { errc <- coord.Trigger(ctx) }()
	b := <-task.Barriers()
	committed := false
	require.NoError(t, task.Begin(ctx, b, 9, checkpoint.Meta{}, func(context.Context, int64) error { committed = true; return nil }))
	boom := errors.New("ClickHouse is down")
	a.release <- boom

	var ce *checkpoint.Error
	require.ErrorAs(t, <-task.Failures(), &ce)
	assert.Equal(t, "snapshot", ce.Op)
	assert.Equal(t, "a", ce.Participant)
	assert.ErrorIs(t, task.Wait(ctx), boom)
	assert.ErrorIs(t, <-errc, boom, "the Trigger caller")
	assert.False(t, committed, "offset committed for an aborted checkpoint")
	assert.Equal(t, []checkpoint.ID{1}, a.notifications())
	cp, err := coord.Store().Latest(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, checkpoint.ID(1), cp.ID, "the previous checkpoint stays the newest")
	assert.ErrorIs(t, task.Begin(ctx, nil, 10, checkpoint.Meta{}, nil), boom, "the next barrier reports it too")
}

// TestSyncPartFailureReleasesPendingParts: when a participant's synchronous
// part fails after another's pending part was taken, the pending part is
// called with a cancelled context and nothing is written.
func TestSyncPartFailureReleasesPendingParts(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	a, s := newAsyncCounter(), &counter{snapErr: errors.New("x")}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": a, "b": s})
	require.NoError(t, err)
	defer task.Detach()
	require.Error(t, task.Begin(ctx, nil, 3, checkpoint.Meta{}, nil))
	assert.Equal(t, 1, a.cancelled)
	_, err = coord.Store().Latest(ctx, p0)
	assert.ErrorIs(t, err, checkpoint.ErrNotFound)
}

// TestIntervalBarriersSkippedWhilePending: one checkpoint of a chain is
// pending at a time; Run does not send a barrier meanwhile (so the chain
// never waits at one) and counts what it skipped.
func TestIntervalBarriersSkippedWhilePending(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{Interval: 5 * time.Millisecond, MeterProvider: mp})
	a := newAsyncCounter()
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": a})
	require.NoError(t, err)
	defer task.Detach()
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = coord.Run(ctx) }()
	defer func() { cancel(); <-runDone }()

	skips := func() int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "exactlyonce.checkpoint.skips" {
					return d.DataPoints[0].Value
				}
			}
		}
		return 0
	}
	b := <-task.Barriers()
	require.NoError(t, task.Begin(ctx, b, 1, checkpoint.Meta{}, nil))
	require.Eventually(t, func() bool { return skips() >= 3 }, time.Minute, time.Millisecond, "skipped interval barriers")
	select {
	case <-task.Barriers():
		t.Fatal("a barrier was sent while the previous checkpoint was pending")
	default:
	}
	a.release <- nil
	require.NoError(t, task.Wait(ctx))
	b = <-task.Barriers() // the next interval's, now that none is pending
	a.release <- nil
	require.NoError(t, task.Checkpoint(ctx, b, 2, checkpoint.Meta{}, nil))
}

// TestDetachAbortsPending: a chain that stops (its partition revoked) with a
// checkpoint pending writes nothing and leaves no goroutine behind.
func TestDetachAbortsPending(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	a := newAsyncCounter()
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": a})
	require.NoError(t, err)
	committed := false
	require.NoError(t, task.Begin(ctx, nil, 7, checkpoint.Meta{}, func(context.Context, int64) error { committed = true; return nil }))
	task.Detach()
	assert.Equal(t, 1, a.cancelled, "the pending part saw its context end")
	assert.ErrorIs(t, task.Wait(ctx), context.Canceled)
	assert.False(t, committed)
	_, err = coord.Store().Latest(ctx, p0)
	assert.ErrorIs(t, err, checkpoint.ErrNotFound)
	task.Detach()
}

// TestSynchronousOption: with Options.Synchronous, Begin returns once the
// checkpoint completed, and an AsyncParticipant is snapshotted with its
// Snapshot, as before asynchronous checkpoints.
func TestSynchronousOption(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{Synchronous: true})
	a := newAsyncCounter() // its pending part would block: release is empty
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": a})
	require.NoError(t, err)
	defer task.Detach()
	a.n = 4
	committed := int64(-1)
	require.NoError(t, task.Begin(ctx, nil, 4, checkpoint.Meta{}, func(_ context.Context, next int64) error { committed = next; return nil }))
	assert.Equal(t, int64(4), committed, "committed before Begin returned")
	cp, err := coord.Store().Latest(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, binary.BigEndian.AppendUint64(nil, 4), cp.States["a"])
	assert.Equal(t, []checkpoint.ID{1}, a.notifications(), "notified before Begin returned")
}
