package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// A side effect whose outcome is unknown (it wraps ErrOutcomeUnknown) is
// answered 503, and its key is not released: a retry is answered 503
// (pending) and runs nothing until the claim's PendingTTL has run out. A
// definite failure releases the key at once.
func TestHandlerHoldsKeyOfUnknownOutcome(t *testing.T) {
	var calls int
	unknown := true
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	h, err := idempotency.NewHandler(store, func(context.Context, idempotency.Delivery) error {
		calls++
		if unknown {
			return fmt.Errorf("broker did not answer: %w", idempotency.ErrOutcomeUnknown)
		}
		return errors.New("refused")
	}, idempotency.Options{
		Provider: testProvider(), Verify: idempotency.GitHubSignature(secret),
		SideEffectTimeout: 100 * time.Millisecond, StoreTimeout: 100 * time.Millisecond, PendingTTL: 300 * time.Millisecond,
	})
	require.NoError(t, err)

	w := serve(h, githubRequest("k1", `{"a":1}`))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	w = serve(h, githubRequest("k1", `{"a":1}`))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code, "held: pending")
	assert.Equal(t, 1, calls, "the retry ran nothing")

	time.Sleep(500 * time.Millisecond) // past PendingTTL
	unknown = false
	w = serve(h, githubRequest("k1", `{"a":1}`))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, 2, calls, "after PendingTTL the key is free")
	w = serve(h, githubRequest("k1", `{"a":1}`))
	assert.Equal(t, 3, calls, "a definite failure released the key")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
}

// A side effect that outlives its answer (answered 503 at the deadline,
// with Connection: close) keeps its key pending however long it runs,
// past several PendingTTLs, as the Handler extends the claim: retries
// meanwhile are answered 503 and run nothing. Once it succeeds, a retry
// replays its 202; one side effect in all.
func TestHandlerExtendsClaimWhileEffectRuns(t *testing.T) {
	finish := make(chan struct{})
	started := make(chan struct{}, 10)
	pub := &published{hook: func(idempotency.Delivery) { started <- struct{}{}; <-finish }}
	h, _ := newMemHandler(t, pub, idempotency.Options{
		ReadTimeout: 100 * time.Millisecond, AnswerTimeout: 200 * time.Millisecond,
		// The claim is extended every PendingTTL/3: 1.5 s tolerates a
		// 1 s stall of the process, which a loaded make test reached
		// (with 300 ms, a second side effect ran).
		SideEffectTimeout: 150 * time.Millisecond, StoreTimeout: 100 * time.Millisecond, PendingTTL: 1500 * time.Millisecond,
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	first := make(chan *http.Response, 1)
	go func() {
		r, _ := post(t, srv.URL, "k1", `{"a":1}`)
		first <- r
	}()
	<-started
	r := <-first
	assert.Equal(t, http.StatusServiceUnavailable, r.StatusCode, "answered at the deadline")
	assert.True(t, r.Close, "the connection closes after a 503 whose side effect runs on")

	for range 4 { // 4 × 1.2 s: past PendingTTL thrice
		time.Sleep(1200 * time.Millisecond)
		r, body := post(t, srv.URL, "k1", `{"a":1}`)
		assert.Equal(t, http.StatusServiceUnavailable, r.StatusCode, body)
	}
	close(finish)
	require.Eventually(t, func() bool {
		r, _ := post(t, srv.URL, "k1", `{"a":1}`)
		return r.StatusCode == http.StatusAccepted && r.Header.Get(idempotency.HeaderReplayed) == "true"
	}, 10*time.Second, 20*time.Millisecond, "the late success is replayed")
	assert.Equal(t, []string{"k1"}, pub.Keys())
	require.NoError(t, h.Close())
}
