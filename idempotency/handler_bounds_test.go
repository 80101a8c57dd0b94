package idempotency_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// post sends a signed delivery to srv over loopback and returns the answer.
func post(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderGitHubDelivery, key)
	req.Header.Set(idempotency.HeaderGitHubEvent, "pull_request")
	req.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub(secret, []byte(body)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// A client that sends its body slower than ReadTimeout allows is answered
// 408 and its connection closed at the deadline; nothing is claimed or
// published. On main the body was read for as long as the client kept
// sending.
func TestSlowBodyCutAtReadTimeout(t *testing.T) {
	pub := &published{}
	h, _ := newMemHandler(t, pub, idempotency.Options{ReadTimeout: 300 * time.Millisecond, AnswerTimeout: 2 * time.Second})
	srv := httptest.NewServer(h)
	defer srv.Close()

	body := `{"action":"opened"}`
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s: k1\r\n%s: pull_request\r\n%s: %s\r\n\r\n%s",
		len(body), idempotency.HeaderGitHubDelivery, idempotency.HeaderGitHubEvent,
		idempotency.HeaderGitHubSignature, idempotency.SignGitHub(secret, []byte(body)), body[:3])
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	waited := time.Since(start)
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	assert.True(t, resp.Close, "the connection is closed after a body cut short")
	assert.Less(t, waited, 5*time.Second, "cut at the deadline (300 ms), not held")
	assert.Empty(t, pub.Keys())

	// The same delivery sent whole is accepted: nothing was claimed.
	r, _ := post(t, srv.URL, "k1", body)
	assert.Equal(t, http.StatusAccepted, r.StatusCode)
}

// A side effect that outlives AnswerTimeout is answered 503 at the deadline
// while it goes on; when it succeeds the key is completed, so the retry
// replays the 202 and publishes nothing. On main the answer waited for the
// side effect (an idempotent producer: 32 s, after GitHub gave up).
func TestAnswerWithinAnswerTimeout(t *testing.T) {
	release := make(chan struct{})
	pub := &published{hook: func(d idempotency.Delivery) { <-release }}
	h, store := newMemHandler(t, pub, idempotency.Options{ReadTimeout: 100 * time.Millisecond, AnswerTimeout: 300 * time.Millisecond})
	srv := httptest.NewServer(h)
	defer srv.Close()

	start := time.Now()
	r, body := post(t, srv.URL, "k1", `{"a":1}`)
	assert.Equal(t, http.StatusServiceUnavailable, r.StatusCode, body)
	assert.Equal(t, "5", r.Header.Get("Retry-After"))
	assert.Less(t, time.Since(start), 5*time.Second)
	close(release)
	require.Eventually(t, func() bool {
		fp := idempotency.BodyFingerprint(idempotency.Delivery{Body: []byte(`{"a":1}`)})
		_, err := store.Claim(context.Background(), "k1", fp, time.Minute)
		return errors.Is(err, idempotency.ErrDone)
	}, 5*time.Second, 10*time.Millisecond)
	r, _ = post(t, srv.URL, "k1", `{"a":1}`)
	assert.Equal(t, http.StatusAccepted, r.StatusCode)
	assert.Equal(t, "true", r.Header.Get(idempotency.HeaderReplayed))
	assert.Equal(t, []string{"k1"}, pub.Keys())
}

// Beyond MaxInFlight deliveries a new one is answered 503 at once and
// claims nothing; once a slot frees it is accepted.
func TestMaxInFlight(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	pub := &published{hook: func(d idempotency.Delivery) {
		if d.Key != "free" {
			entered <- struct{}{}
			<-release
		}
	}}
	h, _ := newMemHandler(t, pub, idempotency.Options{MaxInFlight: 2})
	srv := httptest.NewServer(h)
	defer srv.Close()
	var wg sync.WaitGroup
	for _, k := range []string{"a", "b"} {
		wg.Go(func() {
			r, _ := post(t, srv.URL, k, `{"a":1}`)
			assert.Equal(t, http.StatusAccepted, r.StatusCode)
		})
	}
	<-entered
	<-entered
	r, body := post(t, srv.URL, "c", `{"a":1}`)
	assert.Equal(t, http.StatusServiceUnavailable, r.StatusCode)
	assert.Contains(t, body, "busy")
	close(release)
	wg.Wait()
	r, _ = post(t, srv.URL, "c", `{"a":1}`)
	assert.Equal(t, http.StatusAccepted, r.StatusCode, "c claimed nothing the first time")
}

// A side effect's *RejectError is a permanent answer: its status and
// reason, never 503, and the key released.
func TestSideEffectRejects(t *testing.T) {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	calls := 0
	h, err := idempotency.NewHandler(store, func(context.Context, idempotency.Delivery) error {
		calls++
		return fmt.Errorf("publish: %w", idempotency.Reject(http.StatusRequestEntityTooLarge, "payload too large for the topic"))
	}, idempotency.Options{Provider: testProvider(), Secret: secret})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	for range 2 {
		r, body := post(t, srv.URL, "big", `{"a":1}`)
		assert.Equal(t, http.StatusRequestEntityTooLarge, r.StatusCode)
		assert.Equal(t, "payload too large for the topic\n", body)
	}
	assert.Equal(t, 2, calls, "released: the redelivery is tried again")
}

// A *RejectError built by hand with a status that is no 4xx is answered 422,
// as Reject would have made it: a 200 would tell the provider the event was
// taken, a 0 would panic in net/http.
func TestSideEffectRejectLiteral(t *testing.T) {
	for _, status := range []int{0, http.StatusOK, http.StatusServiceUnavailable} {
		store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
		require.NoError(t, err)
		h, err := idempotency.NewHandler(store, func(context.Context, idempotency.Delivery) error {
			return &idempotency.RejectError{Status: status, Reason: "refused"}
		}, idempotency.Options{Provider: testProvider(), Secret: secret})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		r, body := post(t, srv.URL, "k", `{"a":1}`)
		srv.Close()
		assert.Equal(t, http.StatusUnprocessableEntity, r.StatusCode, "status %d", status)
		assert.Equal(t, "refused\n", body)
	}
}
