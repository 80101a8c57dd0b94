package idempotency_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/idempotencytest"
)

func TestMemoryStoreConformance(t *testing.T) {
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		s, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
		require.NoError(t, err)
		return s
	})
}

// fakeClock is a settable clock for TTL tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestMemoryStoreBound(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{MaxKeys: 3, Now: clock.Now})
	require.NoError(t, err)

	// Two done keys, the first closer to expiry, and one pending key.
	for i, k := range []string{"done-1", "done-2"} {
		c, err := s.Claim(ctx, k, "fp", time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, time.Duration(i+1)*time.Hour))
	}
	_, err = s.Claim(ctx, "pending-1", "fp", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 3, s.Len())

	// Full: the done key closest to expiry makes room.
	_, err = s.Claim(ctx, "pending-2", "fp", time.Minute)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "done-2", "fp", time.Minute)
	assert.ErrorIs(t, err, idempotency.ErrDone, "done-2 was kept")
	_, err = s.Claim(ctx, "done-1", "fp", time.Minute)
	require.NoError(t, err, "done-1 was evicted; claiming it evicts done-2")
	assert.Equal(t, 3, s.Len())

	// Only pending keys left: never evicted.
	_, err = s.Claim(ctx, "pending-3", "fp", time.Minute)
	assert.ErrorIs(t, err, idempotency.ErrStoreFull)
	assert.False(t, idempotency.IsOutcomeUnknown(err))

	// Expiry frees room.
	clock.Add(time.Minute)
	assert.Equal(t, 0, s.Len())
	_, err = s.Claim(ctx, "pending-3", "fp", time.Minute)
	assert.NoError(t, err)
}

func TestMemoryStoreClockExpiry(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{Now: clock.Now})
	require.NoError(t, err)

	c, err := s.Claim(ctx, "k", "fp", 10*time.Second)
	require.NoError(t, err)
	clock.Add(9 * time.Second)
	_, err = s.Claim(ctx, "k", "fp", 10*time.Second)
	require.ErrorIs(t, err, idempotency.ErrPending)
	clock.Add(time.Second)
	assert.ErrorIs(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, time.Hour), idempotency.ErrClaimLost, "expiry is inclusive")
	assert.Equal(t, 0, s.Len())
}

func TestMemoryStoreResponseNotAliased(t *testing.T) {
	ctx := context.Background()
	s, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	body := []byte("original")
	c, err := s.Claim(ctx, "k", "fp", time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202, Body: body}, time.Hour))
	copy(body, "mutated!")

	_, err = s.Claim(ctx, "k", "fp", time.Minute)
	var done *idempotency.DoneError
	require.ErrorAs(t, err, &done)
	assert.Equal(t, "original", string(done.Record.Response.Body))
	done.Record.Response.Body[0] = 'X'
	_, err = s.Claim(ctx, "k", "fp", time.Minute)
	require.ErrorAs(t, err, &done)
	assert.Equal(t, "original", string(done.Record.Response.Body))
}

func TestNewMemoryStoreInvalid(t *testing.T) {
	_, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{MaxKeys: -1})
	assert.ErrorIs(t, err, idempotency.ErrInvalidOptions)
}
