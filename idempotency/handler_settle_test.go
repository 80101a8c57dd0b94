package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// heldStore holds every Complete until release is closed, so that a test
// can look between the Handler's answer and its "done".
type heldStore struct {
	*idempotency.MemoryStore
	completing chan struct{} // one value per Complete that started
	release    chan struct{}
}

func (s *heldStore) Complete(ctx context.Context, c idempotency.Claim, resp idempotency.Response, ttl time.Duration) error {
	s.completing <- struct{}{}
	<-s.release
	return s.MemoryStore.Complete(ctx, c, resp, ttl)
}

func newHeldStore(t *testing.T) *heldStore {
	t.Helper()
	mem, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	return &heldStore{MemoryStore: mem, completing: make(chan struct{}, 16), release: make(chan struct{})}
}

// Over net/http's server the Handler answers 202 and returns while "done" is
// still being written. Meanwhile the key is pending in the store: the same
// Handler replays a duplicate (and refuses another payload with 422), and
// another instance on the same store answers 503. Close returns once the
// key is done; then every instance replays it. One publish in all.
func TestHandlerSettlesAfterReturning(t *testing.T) {
	store := newHeldStore(t)
	pub := &published{}
	opts := idempotency.Options{Provider: testProvider(), Verify: idempotency.GitHubSignature(secret)}
	h, err := idempotency.NewHandler(store, pub.publish, opts)
	require.NoError(t, err)
	other, err := idempotency.NewHandler(store, pub.publish, opts)
	require.NoError(t, err)
	srv, otherSrv := httptest.NewServer(h), httptest.NewServer(other)
	defer srv.Close()
	defer otherSrv.Close()

	r, _ := post(t, srv.URL, "k1", `{"a":1}`)
	require.Equal(t, http.StatusAccepted, r.StatusCode)
	<-store.completing // ServeHTTP returned or not, the done waits on the gate

	fp := idempotency.BodyFingerprint(idempotency.Delivery{Body: []byte(`{"a":1}`)})
	_, err = store.Claim(context.Background(), "k1", fp, time.Minute)
	assert.ErrorIs(t, err, idempotency.ErrPending, "not done yet in the store")

	r, body := post(t, srv.URL, "k1", `{"a":1}`)
	assert.Equal(t, http.StatusAccepted, r.StatusCode, body)
	assert.Equal(t, "true", r.Header.Get(idempotency.HeaderReplayed), "the answering Handler replays")
	r, _ = post(t, srv.URL, "k1", `{"a":2}`)
	assert.Equal(t, http.StatusUnprocessableEntity, r.StatusCode, "another payload under the key")
	r, _ = post(t, otherSrv.URL, "k1", `{"a":1}`)
	assert.Equal(t, http.StatusServiceUnavailable, r.StatusCode, "another instance sees the key pending")
	assert.NotEmpty(t, r.Header.Get("Retry-After"))

	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned before the done was written")
	default:
	}
	close(store.release)
	require.NoError(t, <-closed)
	_, err = store.Claim(context.Background(), "k1", fp, time.Minute)
	var done *idempotency.DoneError
	require.True(t, errors.As(err, &done), "done once Close returned: %v", err)
	assert.Equal(t, http.StatusAccepted, done.Record.Response.Status)

	r, _ = post(t, otherSrv.URL, "k1", `{"a":1}`)
	assert.Equal(t, http.StatusAccepted, r.StatusCode)
	assert.Equal(t, "true", r.Header.Get(idempotency.HeaderReplayed))
	assert.Equal(t, []string{"k1"}, pub.Keys())
	require.NoError(t, other.Close())
}

// A delivery keeps its MaxInFlight slot until its key is done: with one
// slot and a done held, the next delivery is answered 503 (busy) and
// publishes nothing; once the done is written it is accepted.
func TestHandlerSettlingHoldsItsSlot(t *testing.T) {
	store := newHeldStore(t)
	pub := &published{}
	h, err := idempotency.NewHandler(store, pub.publish, idempotency.Options{
		Provider: testProvider(), Verify: idempotency.GitHubSignature(secret), MaxInFlight: 1,
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	r, _ := post(t, srv.URL, "k1", `{"a":1}`)
	require.Equal(t, http.StatusAccepted, r.StatusCode)
	<-store.completing
	r, _ = post(t, srv.URL, "k2", `{"a":2}`)
	assert.Equal(t, http.StatusServiceUnavailable, r.StatusCode, "the only slot is settling k1")
	close(store.release)
	require.NoError(t, h.Close())
	r, _ = post(t, srv.URL, "k2", `{"a":2}`)
	assert.Equal(t, http.StatusAccepted, r.StatusCode)
	assert.Equal(t, []string{"k1", "k2"}, pub.Keys())
}
