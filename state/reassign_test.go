package state_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/state"
)

// prEvent is a record of the pull-request service: a pull request opened
// or reviewed at a time.
type prEvent struct {
	pr     string
	review bool
	at     time.Time
}

func prEvents(n int) []prEvent {
	evs := make([]prEvent, 0, n)
	for i := range n {
		evs = append(evs, prEvent{pr: fmt.Sprintf("pr-%d", i/3), review: i%3 != 0, at: t0.Add(time.Duration(i) * time.Minute)})
	}
	return evs
}

// firstReviews is the service's chain: it remembers when each pull request
// was opened and reports the time to its first review once.
type firstReviews struct {
	opened *state.Value[string, time.Time]
	out    []time.Duration
}

func (f *firstReviews) process(t *testing.T, e prEvent) {
	if !e.review {
		require.NoError(t, f.opened.Put(e.pr, e.at, e.at))
		return
	}
	if at, ok := f.opened.Get(e.pr, e.at); ok {
		f.opened.Delete(e.pr, e.at)
		f.out = append(f.out, e.at.Sub(at))
	}
}

// TestRestoreOnReassignment: a partition's state moves with its checkpoint
// to the instance the partition is assigned to next. Instance A processes
// records, checkpoints, processes more and dies; instance B (a new
// coordinator over the same storage) restores the state of the checkpoint,
// not the records after it, and after replaying those records from the
// checkpoint's offset it holds what an uninterrupted run holds and reports
// every first review exactly once.
func TestRestoreOnReassignment(t *testing.T) {
	ctx := context.Background()
	tp := checkpoint.TopicPartition{Topic: "pull_requests", Partition: 3}
	storage := checkpoint.NewMemoryStorage()
	events := prEvents(300)
	const barrier = 200 // the offset of the first record after the checkpoint

	attach := func(t *testing.T) (*firstReviews, *checkpoint.Task, func()) {
		store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
		require.NoError(t, err)
		coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
		require.NoError(t, err)
		v, err := state.NewValue[string, time.Time](state.String{}, state.Time{}, state.Options{TTL: 30 * 24 * time.Hour})
		require.NoError(t, err)
		task, err := coord.Attach(ctx, tp, map[string]checkpoint.Participant{"opened": v})
		require.NoError(t, err)
		return &firstReviews{opened: v}, task, func() { task.Detach(); _ = v.Close(); _ = coord.Close() }
	}

	// Instance A: the first 200 records, a checkpoint, 50 more, a crash.
	a, task, closeA := attach(t)
	require.Nil(t, task.Restored(), "a fresh start")
	for _, e := range events[:barrier] {
		a.process(t, e)
	}
	require.NoError(t, task.Checkpoint(ctx, nil, barrier, checkpoint.Meta{}, nil))
	atBarrier := snapshot(t, a.opened)
	for _, e := range events[barrier:250] {
		a.process(t, e)
	}
	closeA()

	// Instance B takes the partition over.
	b, task, closeB := attach(t)
	defer closeB()
	require.NotNil(t, task.Restored())
	assert.Equal(t, int64(barrier), task.Restored().NextOffset)
	assert.Equal(t, atBarrier, snapshot(t, b.opened), "B restored another state than A's at the barrier")
	for _, e := range events[task.Restored().NextOffset:] {
		b.process(t, e)
	}

	// An uninterrupted run.
	want := &firstReviews{opened: newValue2(t)}
	for _, e := range events {
		want.process(t, e)
	}
	assert.Equal(t, snapshot(t, want.opened), snapshot(t, b.opened))
	assert.Equal(t, want.out, append(a.out[:len(want.out)-len(b.out)], b.out...),
		"first reviews before the barrier from A, after it from B")
	assert.Len(t, want.out, 100)
}

func newValue2(t *testing.T) *state.Value[string, time.Time] {
	v, err := state.NewValue[string, time.Time](state.String{}, state.Time{}, state.Options{TTL: 30 * 24 * time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = v.Close() })
	return v
}
