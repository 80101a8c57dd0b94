package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// A Kafka consumer's use of Do: the side effect runs once per key, a failed
// one runs again, a done key replays its response.
func TestDo(t *testing.T) {
	ctx := context.Background()
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	runs := 0
	fail := true
	fn := func(context.Context) (idempotency.Response, error) {
		runs++
		if fail {
			return idempotency.Response{}, errors.New("downstream unavailable")
		}
		return idempotency.Response{Status: 200, Body: []byte("row 7")}, nil
	}

	_, err = idempotency.Do(ctx, store, "evt-1", "fp", fn, idempotency.DoOptions{})
	var ee *idempotency.EffectError
	require.ErrorAs(t, err, &ee)
	assert.NoError(t, ee.ReleaseErr)
	assert.EqualError(t, errors.Unwrap(err), "downstream unavailable")

	fail = false
	out, err := idempotency.Do(ctx, store, "evt-1", "fp", fn, idempotency.DoOptions{})
	require.NoError(t, err, "the failed attempt released the key")
	assert.Equal(t, idempotency.Outcome{Response: idempotency.Response{Status: 200, Body: []byte("row 7")}}, out)

	out, err = idempotency.Do(ctx, store, "evt-1", "fp", fn, idempotency.DoOptions{})
	require.NoError(t, err)
	assert.True(t, out.Replayed)
	assert.Equal(t, []byte("row 7"), out.Response.Body)
	assert.Equal(t, 2, runs, "not run for a done key")

	_, err = idempotency.Do(ctx, store, "evt-1", "other", fn, idempotency.DoOptions{})
	assert.ErrorIs(t, err, idempotency.ErrFingerprintMismatch)
	assert.Equal(t, 2, runs)
}

func TestDoPendingAndCancelledCaller(t *testing.T) {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	inside := make(chan struct{})
	proceed := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := idempotency.Do(ctx, store, "k", "fp", func(context.Context) (idempotency.Response, error) {
			close(inside)
			<-proceed
			return idempotency.Response{Status: 202}, nil
		}, idempotency.DoOptions{})
		done <- err
	}()
	<-inside
	_, err = idempotency.Do(context.Background(), store, "k", "fp", func(context.Context) (idempotency.Response, error) {
		t.Error("ran while another claim held the key")
		return idempotency.Response{}, nil
	}, idempotency.DoOptions{})
	assert.ErrorIs(t, err, idempotency.ErrPending)

	// The caller gives up after the side effect: the key is still
	// completed, not left pending until its TTL.
	cancel()
	close(proceed)
	require.NoError(t, <-done)
	out, err := idempotency.Do(context.Background(), store, "k", "fp", nil, idempotency.DoOptions{})
	assert.ErrorIs(t, err, idempotency.ErrInvalidOptions, "fn is required")
	out, err = idempotency.Do(context.Background(), store, "k", "fp", func(context.Context) (idempotency.Response, error) {
		t.Error("ran a done key")
		return idempotency.Response{}, nil
	}, idempotency.DoOptions{})
	require.NoError(t, err)
	assert.True(t, out.Replayed)
}

func TestDoOptionsValidated(t *testing.T) {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	fn := func(context.Context) (idempotency.Response, error) { return idempotency.Response{}, nil }
	for _, o := range []idempotency.DoOptions{
		{PendingTTL: -time.Second},
		{PendingTTL: time.Second, SideEffectTimeout: 2 * time.Second},
		{DoneTTL: time.Second},
	} {
		_, err := idempotency.Do(context.Background(), store, "k", "fp", fn, o)
		assert.ErrorIs(t, err, idempotency.ErrInvalidOptions)
	}
}
