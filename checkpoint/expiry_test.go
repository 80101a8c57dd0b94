package checkpoint_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// expiring is a counter that is also an Expirer and a Resolver: expired
// says whether the next save comes too late, and lost lists the counter
// values whose checkpoint's output is gone.
type expiring struct {
	counter
	expired  bool
	lost     map[uint64]bool
	resolved []uint64
}

var (
	_ checkpoint.Expirer  = (*expiring)(nil)
	_ checkpoint.Resolver = (*expiring)(nil)
)

func (e *expiring) Expired(context.Context, checkpoint.ID) error {
	if e.expired {
		return errors.New("too late")
	}
	return nil
}

func (e *expiring) Resolve(_ context.Context, state []byte) error {
	n := binary.BigEndian.Uint64(state)
	e.resolved = append(e.resolved, n)
	if e.lost[n] {
		return fmt.Errorf("output of %d: %w", n, checkpoint.ErrOutputLost)
	}
	return nil
}

// TestExpiredNotSaved: an Expirer that says its snapshot would expire
// aborts the checkpoint before the save: no file, no offset commit, an
// error wrapping ErrExpired; the next checkpoint saves as usual.
func TestExpiredNotSaved(t *testing.T) {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	coord := newCoord(t, storage, checkpoint.Options{})
	e := &expiring{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e, "async": newAsyncCounterReleased()})
	require.NoError(t, err)
	defer task.Detach()
	commits := 0
	commit := func(context.Context, int64) error { commits++; return nil }

	e.expired = true
	err = task.Checkpoint(ctx, nil, 10, checkpoint.Meta{}, commit)
	require.ErrorIs(t, err, checkpoint.ErrExpired)
	var cerr *checkpoint.Error
	require.ErrorAs(t, err, &cerr)
	assert.Equal(t, "save", cerr.Op)
	assert.Equal(t, "e", cerr.Participant)
	ids, err := coord.Store().List(ctx, p0)
	require.NoError(t, err)
	assert.Empty(t, ids, "nothing saved")
	assert.Zero(t, commits, "no offset moved")
	assert.Empty(t, e.completed)
}

func newAsyncCounterReleased() *asyncCounter {
	c := newAsyncCounter()
	c.release = make(chan error, 10)
	for range 10 {
		c.release <- nil
	}
	return c
}

// TestRestoreFallsBackPastLostOutput: a checkpoint whose Resolver says its
// output is lost is passed over; every participant is restored once, from
// the newest checkpoint whose output is intact. With none left, Attach
// fails with ErrOutputLost rather than start fresh.
func TestRestoreFallsBackPastLostOutput(t *testing.T) {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	coord := newCoord(t, storage, checkpoint.Options{}) // Keep: 2
	e, c := &expiring{}, &counter{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e, "c": c})
	require.NoError(t, err)
	for i := uint64(1); i <= 3; i++ {
		e.n, c.n = i, 100+i
		require.NoError(t, task.Checkpoint(ctx, nil, int64(10*i), checkpoint.Meta{}, nil))
	}
	task.Detach()

	e2, c2 := &expiring{lost: map[uint64]bool{3: true}}, &counter{}
	task, err = coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e2, "c": c2})
	require.NoError(t, err)
	require.NotNil(t, task.Restored())
	assert.Equal(t, checkpoint.ID(2), task.Restored().ID)
	assert.Equal(t, int64(20), task.Restored().NextOffset)
	assert.Equal(t, []uint64{3, 2}, e2.resolved)
	assert.Equal(t, uint64(2), e2.n)
	assert.Equal(t, uint64(102), c2.n, "every participant restored from the same checkpoint")
	// The chain goes on: its next checkpoint takes the lost one's ID.
	c2.n = 200
	require.NoError(t, task.Checkpoint(ctx, nil, 30, checkpoint.Meta{}, nil))
	task.Detach()
	ids, err := coord.Store().List(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, []checkpoint.ID{3, 2}, ids)

	// Every retained checkpoint lost, and older ones pruned: no fresh
	// start, which would skip or repeat input.
	e3 := &expiring{lost: map[uint64]bool{2: true}}
	_, err = coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e3, "c": &counter{}})
	require.ErrorIs(t, err, checkpoint.ErrOutputLost)
	assert.Equal(t, []uint64{2, 2}, e3.resolved)
}

// TestRestoreFallsBackPastLostFirstCheckpoint: the partition's first
// checkpoint lost its output: the chain starts fresh, as before it.
func TestRestoreFallsBackPastLostFirstCheckpoint(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	e := &expiring{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e})
	require.NoError(t, err)
	e.n = 7
	require.NoError(t, task.Checkpoint(ctx, nil, 10, checkpoint.Meta{}, nil))
	task.Detach()

	e2 := &expiring{lost: map[uint64]bool{7: true}}
	task, err = coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e2})
	require.NoError(t, err)
	defer task.Detach()
	assert.Nil(t, task.Restored(), "a fresh start")
	assert.Equal(t, uint64(0), e2.n)
	require.NoError(t, task.Checkpoint(ctx, nil, 10, checkpoint.Meta{}, nil))
	ids, err := coord.Store().List(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, []checkpoint.ID{1}, ids, "the new first checkpoint replaced the lost one")
}

// TestRestoreFallsBackPastLostFirstSavedCheckpoint: the chain's first
// barrier was declined, so its first saved checkpoint is 2, and its output
// was lost. It descends from a fresh start (Parent 0): the chain starts
// fresh again rather than failing for want of an older checkpoint.
func TestRestoreFallsBackPastLostFirstSavedCheckpoint(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	e, d := &expiring{}, &counter{snapErr: fmt.Errorf("busy: %w", checkpoint.ErrDeclined)}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e, "d": d})
	require.NoError(t, err)
	e.n = 7
	require.ErrorIs(t, task.Checkpoint(ctx, nil, 5, checkpoint.Meta{}, nil), checkpoint.ErrDeclined)
	d.snapErr = nil
	require.NoError(t, task.Checkpoint(ctx, nil, 10, checkpoint.Meta{}, nil))
	task.Detach()
	cp, err := coord.Store().Latest(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, checkpoint.ID(2), cp.ID)
	assert.Equal(t, checkpoint.ID(0), cp.Parent, "descends from a fresh start")

	e2 := &expiring{lost: map[uint64]bool{7: true}}
	task, err = coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e2, "d": &counter{}})
	require.NoError(t, err)
	defer task.Detach()
	assert.Nil(t, task.Restored(), "a fresh start")
	assert.Equal(t, []uint64{7}, e2.resolved)
}

// TestRestoreLostCheckpointsParentPruned: every retained checkpoint lost
// its output and the one the oldest descends from was pruned: Attach
// fails with ErrOutputLost and names the missing parent, never starts
// fresh (that would skip or repeat input).
func TestRestoreLostCheckpointsParentPruned(t *testing.T) {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	coord := newCoord(t, storage, checkpoint.Options{}) // Keep: 2
	e := &expiring{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e})
	require.NoError(t, err)
	for i := uint64(1); i <= 3; i++ {
		e.n = i
		require.NoError(t, task.Checkpoint(ctx, nil, int64(10*i), checkpoint.Meta{}, nil))
	}
	task.Detach()
	cp, err := coord.Store().Latest(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, checkpoint.ID(2), cp.Parent, "the previous completed checkpoint")

	e2 := &expiring{lost: map[uint64]bool{2: true, 3: true}}
	_, err = coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e2})
	require.ErrorIs(t, err, checkpoint.ErrOutputLost)
	assert.ErrorContains(t, err, "checkpoint 2 descends from checkpoint 1, which is not retained")
	assert.Equal(t, []uint64{3, 2}, e2.resolved)
}

// TestRetentionKeepsLastGoodCheckpoint: one checkpoint retried under
// several generations, each retry saved and its output then lost, makes
// more files than Keep. Retention still keeps the checkpoint they descend
// from, the newest whose output is intact, so every restore falls back to
// it instead of failing.
func TestRetentionKeepsLastGoodCheckpoint(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{}) // Keep: 2
	e := &expiring{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e})
	require.NoError(t, err)
	e.n = 1
	require.NoError(t, task.Checkpoint(ctx, nil, 10, checkpoint.Meta{Generation: 1}, nil))
	task.Detach()

	for gen := int64(2); gen <= 5; gen++ {
		e := &expiring{lost: map[uint64]bool{2: true}}
		task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"e": e})
		require.NoError(t, err, "generation %d", gen)
		require.NotNil(t, task.Restored(), "generation %d", gen)
		assert.Equal(t, checkpoint.ID(1), task.Restored().ID, "generation %d", gen)
		// The retry of checkpoint 2 is saved; the broker then aborts its
		// transaction (the process paused before its commit).
		e.n = 2
		require.NoError(t, task.Checkpoint(ctx, nil, 20, checkpoint.Meta{Generation: gen}, nil))
		task.Detach()
	}
	ids, err := coord.Store().List(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, []checkpoint.ID{2, 2, 1}, ids, "the newest Keep and their parent")
}

// starter records when Start is called, relative to Restore.
type starter struct {
	counter
	calls []string
	err   error
}

var _ checkpoint.Starter = (*starter)(nil)

func (s *starter) Restore(ctx context.Context, b []byte) error {
	s.calls = append(s.calls, "restore")
	return s.counter.Restore(ctx, b)
}

func (s *starter) Start(context.Context) error {
	s.calls = append(s.calls, "start")
	return s.err
}

// TestStarterCalledFreshAndRestored: Attach calls Start on a fresh start
// too (where no Restore is called: a transactional sink fences a revoked
// owner there), after Restore when restored, and fails when Start fails.
func TestStarterCalledFreshAndRestored(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	s := &starter{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"s": s})
	require.NoError(t, err)
	assert.Nil(t, task.Restored())
	assert.Equal(t, []string{"start"}, s.calls, "a fresh start")
	s.n = 3
	require.NoError(t, task.Checkpoint(ctx, nil, 10, checkpoint.Meta{}, nil))
	task.Detach()

	s = &starter{}
	task, err = coord.Attach(ctx, p0, map[string]checkpoint.Participant{"s": s})
	require.NoError(t, err)
	task.Detach()
	assert.Equal(t, []string{"restore", "start"}, s.calls)

	s = &starter{err: errors.New("broker down")}
	_, err = coord.Attach(ctx, p0, map[string]checkpoint.Participant{"s": s})
	var cerr *checkpoint.Error
	require.ErrorAs(t, err, &cerr)
	assert.Equal(t, "start", cerr.Op)
	assert.Equal(t, "s", cerr.Participant)
}
