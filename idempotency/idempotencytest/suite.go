package idempotencytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

const (
	longTTL  = time.Minute
	shortTTL = 150 * time.Millisecond
	// past waits until a shortTTL has certainly run out.
	past = 400 * time.Millisecond
)

// Run checks that the stores made by newStore keep the idempotency.Store
// contract. newStore is called once per subtest; it registers its own cleanup
// with t.
func Run(t *testing.T, newStore func(t *testing.T) idempotency.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s idempotency.Store, key string)
	}{
		{"ClaimAbsent", testClaimAbsent},
		{"ClaimPending", testClaimPending},
		{"CompleteThenReplay", testCompleteThenReplay},
		{"FingerprintMismatch", testFingerprintMismatch},
		{"ReleaseThenReclaim", testReleaseThenReclaim},
		{"ForeignToken", testForeignToken},
		{"ClaimUsedUp", testClaimUsedUp},
		{"PendingExpiry", testPendingExpiry},
		{"Extend", testExtend},
		{"DoneExpiry", testDoneExpiry},
		{"ConcurrentClaims", testConcurrentClaims},
		{"KeysIndependent", testKeysIndependent},
		{"InvalidArguments", testInvalidArguments},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			tt.fn(t, s, fmt.Sprintf("%s/%d", tt.name, time.Now().UnixNano()))
		})
	}
}

func testClaimAbsent(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	c, err := s.Claim(ctx, key, "fp", longTTL)
	require.NoError(t, err)
	assert.Equal(t, key, c.Key)
	assert.Equal(t, "fp", c.Fingerprint)
	assert.NotEmpty(t, c.Token)
}

func testClaimPending(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	_, err := s.Claim(ctx, key, "fp", longTTL)
	require.NoError(t, err)
	_, err = s.Claim(ctx, key, "fp", longTTL)
	assert.ErrorIs(t, err, idempotency.ErrPending)
	assert.False(t, idempotency.IsOutcomeUnknown(err))
}

func testCompleteThenReplay(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	tests := []struct {
		name string
		give idempotency.Response
	}{
		{"json", idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte(`{"ok":true}`)}},
		{"empty", idempotency.Response{Status: 204}},
		{"binary", idempotency.Response{Status: 200, ContentType: "application/octet-stream", Body: []byte{0, 1, 0xff, '\n'}}},
	}
	for _, tt := range tests {
		k := key + "/" + tt.name
		c, err := s.Claim(ctx, k, "fp", longTTL)
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, c, tt.give, longTTL))

		_, err = s.Claim(ctx, k, "fp", longTTL)
		var done *idempotency.DoneError
		require.ErrorAs(t, err, &done, tt.name)
		assert.ErrorIs(t, err, idempotency.ErrDone)
		assert.False(t, idempotency.IsOutcomeUnknown(err))
		want := idempotency.Record{Key: k, Fingerprint: "fp", Response: tt.give}
		if len(want.Response.Body) == 0 {
			want.Response.Body = nil
			done.Record.Response.Body = nil
		}
		assert.Equal(t, want, done.Record, tt.name)
	}
}

func testFingerprintMismatch(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	c, err := s.Claim(ctx, key, "fp-a", longTTL)
	require.NoError(t, err)

	_, err = s.Claim(ctx, key, "fp-b", longTTL)
	assert.ErrorIs(t, err, idempotency.ErrFingerprintMismatch, "pending key")

	require.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, longTTL))
	_, err = s.Claim(ctx, key, "fp-b", longTTL)
	assert.ErrorIs(t, err, idempotency.ErrFingerprintMismatch, "done key")
	assert.NotErrorIs(t, err, idempotency.ErrDone)

	_, err = s.Claim(ctx, key, "fp-a", longTTL)
	assert.ErrorIs(t, err, idempotency.ErrDone, "the mismatch changed nothing")
}

func testReleaseThenReclaim(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	c1, err := s.Claim(ctx, key, "fp", longTTL)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, c1))

	c2, err := s.Claim(ctx, key, "fp-other", longTTL)
	require.NoError(t, err, "a released key is absent, whatever its old fingerprint")
	assert.NotEqual(t, c1.Token, c2.Token)
}

func testForeignToken(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	c, err := s.Claim(ctx, key, "fp", longTTL)
	require.NoError(t, err)
	foreign := c
	foreign.Token = "not-" + c.Token

	assert.ErrorIs(t, s.Complete(ctx, foreign, idempotency.Response{Status: 202}, longTTL), idempotency.ErrClaimLost)
	assert.ErrorIs(t, s.Release(ctx, foreign), idempotency.ErrClaimLost)
	empty := c
	empty.Token = ""
	assert.ErrorIs(t, s.Release(ctx, empty), idempotency.ErrClaimLost)

	_, err = s.Claim(ctx, key, "fp", longTTL)
	assert.ErrorIs(t, err, idempotency.ErrPending, "the owner's claim is untouched")
	assert.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, longTTL))
}

func testClaimUsedUp(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	c, err := s.Claim(ctx, key, "fp", longTTL)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, longTTL))

	assert.ErrorIs(t, s.Complete(ctx, c, idempotency.Response{Status: 500}, longTTL), idempotency.ErrClaimLost, "complete twice")
	assert.ErrorIs(t, s.Release(ctx, c), idempotency.ErrClaimLost, "release after complete")
	_, err = s.Claim(ctx, key, "fp", longTTL)
	var done *idempotency.DoneError
	require.ErrorAs(t, err, &done)
	assert.Equal(t, 202, done.Record.Response.Status)

	r, err := s.Claim(ctx, key+"/released", "fp", longTTL)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, r))
	assert.ErrorIs(t, s.Release(ctx, r), idempotency.ErrClaimLost, "release twice")
	assert.ErrorIs(t, s.Complete(ctx, r, idempotency.Response{Status: 202}, longTTL), idempotency.ErrClaimLost, "complete after release")
}

func testPendingExpiry(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	old, err := s.Claim(ctx, key, "fp", shortTTL)
	require.NoError(t, err)
	time.Sleep(past)

	// The owner of old died; a retry after the TTL succeeds.
	cur, err := s.Claim(ctx, key, "fp", longTTL)
	require.NoError(t, err, "an expired pending key is absent")

	// The old owner wakes up: it must not overwrite or delete the new claim.
	assert.ErrorIs(t, s.Complete(ctx, old, idempotency.Response{Status: 500}, longTTL), idempotency.ErrClaimLost)
	assert.ErrorIs(t, s.Release(ctx, old), idempotency.ErrClaimLost)
	_, err = s.Claim(ctx, key, "fp", longTTL)
	require.ErrorIs(t, err, idempotency.ErrPending)

	require.NoError(t, s.Complete(ctx, cur, idempotency.Response{Status: 202}, longTTL))

	// An expired claim that nobody took over is lost too.
	lone, err := s.Claim(ctx, key+"/lone", "fp", shortTTL)
	require.NoError(t, err)
	time.Sleep(past)
	assert.ErrorIs(t, s.Complete(ctx, lone, idempotency.Response{Status: 202}, longTTL), idempotency.ErrClaimLost)
	_, err = s.Claim(ctx, key+"/lone", "fp", longTTL)
	assert.NoError(t, err, "a lost Complete left nothing behind")
}

func testDoneExpiry(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	c, err := s.Claim(ctx, key, "fp", longTTL)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, shortTTL))
	_, err = s.Claim(ctx, key, "fp", longTTL)
	require.ErrorIs(t, err, idempotency.ErrDone)
	time.Sleep(past)
	_, err = s.Claim(ctx, key, "fp-other", longTTL)
	assert.NoError(t, err, "an expired done key is absent")
}

func testConcurrentClaims(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	const n = 50
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		claims  []idempotency.Claim
		pending int
		others  []error
	)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			c, err := s.Claim(ctx, key, "fp", longTTL)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				claims = append(claims, c)
			case errors.Is(err, idempotency.ErrPending):
				pending++
			default:
				others = append(others, err)
			}
		})
	}
	close(start)
	wg.Wait()
	assert.Len(t, claims, 1)
	assert.Equal(t, n-1, pending)
	assert.Empty(t, others)
}

func testKeysIndependent(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	a, err := s.Claim(ctx, key+"/a", "fp", longTTL)
	require.NoError(t, err)
	b, err := s.Claim(ctx, key+"/b", "fp", longTTL)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, a))
	require.NoError(t, s.Complete(ctx, b, idempotency.Response{Status: 202}, longTTL))
	_, err = s.Claim(ctx, key+"/a", "fp", longTTL)
	assert.NoError(t, err)
	_, err = s.Claim(ctx, key+"/b", "fp", longTTL)
	assert.ErrorIs(t, err, idempotency.ErrDone)
}

func testInvalidArguments(t *testing.T, s idempotency.Store, key string) {
	ctx := context.Background()
	tests := []struct {
		name string
		key  string
		ttl  time.Duration
	}{
		{"empty key", "", longTTL},
		{"zero ttl", key, 0},
		{"negative ttl", key, -time.Second},
	}
	for _, tt := range tests {
		_, err := s.Claim(ctx, tt.key, "fp", tt.ttl)
		assert.ErrorIs(t, err, idempotency.ErrInvalidArgument, tt.name)
	}
	c, err := s.Claim(ctx, key, "fp", longTTL)
	require.NoError(t, err, "rejected claims took nothing")
	assert.ErrorIs(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, 0), idempotency.ErrInvalidArgument)
	_, err = s.Claim(ctx, key, "fp", longTTL)
	assert.ErrorIs(t, err, idempotency.ErrPending, "a rejected Complete changed nothing")
}

// testExtend checks an idempotency.Extender: an extended claim outlives
// its first TTL and is still the owner's; Extend of a claim the key no
// longer holds changes nothing. Stores without Extend skip it.
func testExtend(t *testing.T, s idempotency.Store, key string) {
	ext, ok := s.(idempotency.Extender)
	if !ok {
		t.Skip("the store does not implement idempotency.Extender")
	}
	ctx := context.Background()
	c, err := s.Claim(ctx, key, "fp", shortTTL)
	require.NoError(t, err)
	require.NoError(t, ext.Extend(ctx, c, longTTL))
	time.Sleep(past)
	_, err = s.Claim(ctx, key, "fp", longTTL)
	require.ErrorIs(t, err, idempotency.ErrPending, "extended past its first TTL")

	foreign := c
	foreign.Token = "not-" + c.Token
	assert.ErrorIs(t, ext.Extend(ctx, foreign, longTTL), idempotency.ErrClaimLost)
	require.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, longTTL))
	assert.ErrorIs(t, ext.Extend(ctx, c, longTTL), idempotency.ErrClaimLost, "done")
	var done *idempotency.DoneError
	_, err = s.Claim(ctx, key, "fp", longTTL)
	require.ErrorAs(t, err, &done, "Extend of a done key left it done")

	// An extension shortens too, and one after expiry finds nothing.
	lone, err := s.Claim(ctx, key+"/lone", "fp", longTTL)
	require.NoError(t, err)
	require.NoError(t, ext.Extend(ctx, lone, shortTTL))
	time.Sleep(past)
	assert.ErrorIs(t, ext.Extend(ctx, lone, longTTL), idempotency.ErrClaimLost)
	_, err = s.Claim(ctx, key+"/lone", "fp", longTTL)
	assert.NoError(t, err, "a lost Extend left nothing behind")

	assert.ErrorIs(t, ext.Extend(ctx, idempotency.Claim{Token: "t"}, longTTL), idempotency.ErrInvalidArgument)
}
