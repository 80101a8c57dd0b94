package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

var secret = []byte("it's a secret")

// published records the deliveries a side effect made durable.
type published struct {
	mu   sync.Mutex
	keys []string
	fail int // fail the next fail calls
	hook func(d idempotency.Delivery)
}

func (p *published) publish(_ context.Context, d idempotency.Delivery) error {
	if p.hook != nil {
		p.hook(d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail > 0 {
		p.fail--
		return errors.New("broker unavailable")
	}
	p.keys = append(p.keys, d.Key)
	return nil
}

func (p *published) Keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.keys...)
}

func newMemHandler(t *testing.T, pub *published, opts idempotency.Options) (*idempotency.Handler, *idempotency.MemoryStore) {
	t.Helper()
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	if opts.Verify == nil {
		opts.Verify = idempotency.GitHubSignature(secret)
	}
	if opts.Key == nil && opts.Provider.KeyHeader == "" {
		opts.Provider = testProvider()
	}
	h, err := idempotency.NewHandler(store, pub.publish, opts)
	require.NoError(t, err)
	return h, store
}

// testProvider is GitHub's preset without the partition key, for tests
// whose payloads are not full GitHub events.
func testProvider() idempotency.Provider {
	p := idempotency.GitHub()
	p.Partition = nil
	return p
}

func githubRequest(key, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idempotency.HeaderGitHubDelivery, key)
	r.Header.Set(idempotency.HeaderGitHubEvent, "pull_request")
	r.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub(secret, []byte(body)))
	return r
}

// withType sets r's Content-Type, or removes it for "".
func withType(r *http.Request, ct string) *http.Request {
	if ct == "" {
		r.Header.Del("Content-Type")
	} else {
		r.Header.Set("Content-Type", ct)
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHandlerRejectsBeforeClaiming(t *testing.T) {
	const body = `{"action":"opened"}`
	tests := []struct {
		name string
		give func() *http.Request
		want int
	}{
		{"wrong method", func() *http.Request {
			r := githubRequest("k", body)
			r.Method = http.MethodGet
			return r
		}, http.StatusMethodNotAllowed},
		{"bad signature", func() *http.Request {
			r := githubRequest("k", body)
			r.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub([]byte("wrong"), []byte(body)))
			return r
		}, http.StatusUnauthorized},
		{"missing signature", func() *http.Request {
			r := githubRequest("k", body)
			r.Header.Del(idempotency.HeaderGitHubSignature)
			return r
		}, http.StatusUnauthorized},
		{"sha1 signature", func() *http.Request {
			r := githubRequest("k", body)
			r.Header.Set(idempotency.HeaderGitHubSignature, "sha1=0123")
			return r
		}, http.StatusUnauthorized},
		{"oversized body", func() *http.Request {
			return githubRequest("k", `{"pad":"`+strings.Repeat("x", 2048)+`"}`)
		}, http.StatusRequestEntityTooLarge},
		{"malformed JSON", func() *http.Request { return githubRequest("k", `{"action":`) }, http.StatusBadRequest},
		{"JSON array", func() *http.Request { return githubRequest("k", `[1,2]`) }, http.StatusBadRequest},
		{"empty body", func() *http.Request { return githubRequest("k", ``) }, http.StatusBadRequest},
		{"nil body", func() *http.Request {
			r := githubRequest("k", ``)
			r.Body = nil // as http.NewRequest leaves it, handed to ServeHTTP in process
			return r
		}, http.StatusBadRequest},
		{"missing key", func() *http.Request { return githubRequest("", body) }, http.StatusBadRequest},
		{"key too long", func() *http.Request {
			return githubRequest(strings.Repeat("k", idempotency.MaxKeyBytes+1), body)
		}, http.StatusBadRequest},
		{"not UTF-8", func() *http.Request { return githubRequest("k", "{\"a\":\"caf\xe9\"}") }, http.StatusBadRequest},
		{"form payload not UTF-8", func() *http.Request {
			return withType(githubRequest("k", "payload=%7B%22a%22%3A%22caf%E9%22%7D"), "application/x-www-form-urlencoded")
		}, http.StatusBadRequest},
		{"text/plain", func() *http.Request { return withType(githubRequest("k", body), "text/plain") }, http.StatusUnsupportedMediaType},
		{"no content type", func() *http.Request { return withType(githubRequest("k", body), "") }, http.StatusUnsupportedMediaType},
		{"multipart", func() *http.Request {
			return withType(githubRequest("k", body), "multipart/form-data; boundary=x")
		}, http.StatusUnsupportedMediaType},
		{"latin-1 JSON", func() *http.Request {
			return withType(githubRequest("k", body), "application/json; charset=iso-8859-1")
		}, http.StatusUnsupportedMediaType},
	}
	reasons := map[int]string{http.StatusUnsupportedMediaType: "content type", http.StatusBadRequest: ""}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub := &published{}
			h, store := newMemHandler(t, pub, idempotency.Options{MaxBodyBytes: 1024})
			w := serve(h, tt.give())
			assert.Equal(t, tt.want, w.Code, w.Body.String())
			assert.Contains(t, w.Body.String(), reasons[tt.want], "the reason")
			if strings.Contains(tt.name, "UTF-8") {
				assert.Contains(t, w.Body.String(), "not valid UTF-8")
			}
			assert.Equal(t, 0, store.Len(), "nothing claimed")
			assert.Empty(t, pub.Keys(), "nothing published")
		})
	}
}

func TestHandlerPublishesOnceAndReplays(t *testing.T) {
	pub := &published{}
	h, _ := newMemHandler(t, pub, idempotency.Options{})
	const body = `{"action":"opened","organization":{"id":7}}`

	first := serve(h, githubRequest("delivery-1", body))
	require.Equal(t, http.StatusAccepted, first.Code)
	assert.JSONEq(t, `{"status":"accepted","delivery":"delivery-1"}`, first.Body.String())
	assert.Empty(t, first.Header().Get(idempotency.HeaderReplayed))

	again := serve(h, githubRequest("delivery-1", body))
	assert.Equal(t, http.StatusAccepted, again.Code)
	assert.Equal(t, first.Body.String(), again.Body.String())
	assert.Equal(t, first.Header().Get("Content-Type"), again.Header().Get("Content-Type"))
	assert.Equal(t, "true", again.Header().Get(idempotency.HeaderReplayed))

	assert.Equal(t, []string{"delivery-1"}, pub.Keys())
}

func TestHandlerReleasesOnFailure(t *testing.T) {
	pub := &published{fail: 1}
	h, store := newMemHandler(t, pub, idempotency.Options{RetryAfter: 1500 * time.Millisecond})
	const body = `{"action":"opened"}`

	w := serve(h, githubRequest("delivery-1", body))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "2", w.Header().Get("Retry-After"), "rounded up to whole seconds")
	assert.Equal(t, 0, store.Len(), "the key was released")
	assert.Empty(t, pub.Keys())

	w = serve(h, githubRequest("delivery-1", body))
	assert.Equal(t, http.StatusAccepted, w.Code, "the provider's retry is published")
	assert.Equal(t, []string{"delivery-1"}, pub.Keys())
}

func TestHandlerFingerprintMismatch(t *testing.T) {
	pub := &published{}
	h, _ := newMemHandler(t, pub, idempotency.Options{})
	require.Equal(t, http.StatusAccepted, serve(h, githubRequest("delivery-1", `{"n":1}`)).Code)

	w := serve(h, githubRequest("delivery-1", `{"n":2}`))
	assert.Equal(t, http.StatusUnprocessableEntity, w.Code)
	assert.Equal(t, []string{"delivery-1"}, pub.Keys())
}

func TestHandlerPendingDuplicate(t *testing.T) {
	inside, proceed := make(chan struct{}), make(chan struct{})
	pub := &published{hook: func(idempotency.Delivery) {
		close(inside)
		<-proceed
	}}
	h, _ := newMemHandler(t, pub, idempotency.Options{})
	const body = `{"n":1}`

	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- serve(h, githubRequest("delivery-1", body)) }()
	<-inside
	dup := serve(h, githubRequest("delivery-1", body))
	assert.Equal(t, http.StatusServiceUnavailable, dup.Code)
	assert.Equal(t, "5", dup.Header().Get("Retry-After"))
	close(proceed)
	assert.Equal(t, http.StatusAccepted, (<-first).Code)
	assert.Equal(t, []string{"delivery-1"}, pub.Keys())
}

func TestHandlerSideEffectOutlivesClient(t *testing.T) {
	var gotErr error
	pub := &published{}
	pub.hook = func(idempotency.Delivery) {}
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	h, err := idempotency.NewHandler(store, func(ctx context.Context, d idempotency.Delivery) error {
		gotErr = ctx.Err()
		_, hasDeadline := ctx.Deadline()
		assert.True(t, hasDeadline, "bounded by SideEffectTimeout")
		return pub.publish(ctx, d)
	}, idempotency.Options{Provider: testProvider()})
	require.NoError(t, err)

	r := githubRequest("delivery-1", `{}`)
	r.Header.Del(idempotency.HeaderGitHubSignature)
	ctx, cancel := context.WithCancel(r.Context())
	cancel() // the client hung up
	w := serve(h, r.WithContext(ctx))
	assert.Equal(t, http.StatusAccepted, w.Code)
	assert.NoError(t, gotErr)
	assert.Equal(t, []string{"delivery-1"}, pub.Keys())
}

func TestHandlerCompleteAfterLostClaim(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{Now: clock.Now})
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	pub := &published{hook: func(idempotency.Delivery) {
		clock.Add(time.Hour) // the side effect outlived its claim
	}}
	h, err := idempotency.NewHandler(store, pub.publish, idempotency.Options{
		Provider:      testProvider(),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	require.NoError(t, err)

	w := serve(h, githubRequest("delivery-1", `{}`))
	assert.Equal(t, http.StatusAccepted, w.Code, "the event is durable: 2xx whatever the store says")
	assert.Equal(t, 0, store.Len(), "nothing marked done by a lost claim")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	assert.Equal(t, map[string]int64{
		"exactlyonce.idempotency.claims/outcome=claimed":    1,
		"exactlyonce.idempotency.claims.lost/step=complete": 1,
	}, counters(rm))
}

func TestHandlerMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	pub := &published{fail: 1}
	h, _ := newMemHandler(t, pub, idempotency.Options{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	serve(h, githubRequest("d1", `{}`)) // fails, released
	serve(h, githubRequest("d1", `{}`)) // published
	serve(h, githubRequest("d1", `{}`)) // replayed
	serve(h, githubRequest("d1", `{"x":1}`))
	serve(h, githubRequest("d2", `{`))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	assert.Equal(t, map[string]int64{
		"exactlyonce.idempotency.claims/outcome=claimed":    2,
		"exactlyonce.idempotency.claims/outcome=done":       1,
		"exactlyonce.idempotency.claims/outcome=mismatch":   1,
		"exactlyonce.idempotency.releases/result=ok":        1,
		"exactlyonce.idempotency.rejected/reason=malformed": 1,
	}, counters(rm))
	assert.Equal(t, uint64(5), histogramCount(rm, "exactlyonce.idempotency.request.duration"))
	assert.Equal(t, uint64(2), histogramCount(rm, "exactlyonce.idempotency.side_effect.duration"))
}

// counters flattens the int64 sums of rm to "name/key=value" → value.
func counters(rm metricdata.ResourceMetrics) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				name := m.Name
				for _, kv := range dp.Attributes.ToSlice() {
					name += "/" + string(kv.Key) + "=" + kv.Value.String()
				}
				out[name] += dp.Value
			}
		}
	}
	return out
}

func histogramCount(rm metricdata.ResourceMetrics, name string) uint64 {
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	return n
}

func TestNewHandlerValidates(t *testing.T) {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	pub := &published{}
	tests := []struct {
		name string
		give idempotency.Options
	}{
		{"negative TTL", idempotency.Options{Provider: idempotency.GitHub(), PendingTTL: -time.Second}},
		{"negative body limit", idempotency.Options{Provider: idempotency.GitHub(), MaxBodyBytes: -1}},
		{"pending TTL shorter than the side effect", idempotency.Options{Provider: idempotency.GitHub(), PendingTTL: 3 * time.Second, SideEffectTimeout: 5 * time.Second}},
		{"done TTL shorter than pending", idempotency.Options{Provider: idempotency.GitHub(), DoneTTL: time.Second}},
	}
	for _, tt := range tests {
		_, err := idempotency.NewHandler(store, pub.publish, tt.give)
		assert.ErrorIs(t, err, idempotency.ErrInvalidOptions, tt.name)
	}
	_, err = idempotency.NewHandler(nil, pub.publish, idempotency.Options{})
	assert.ErrorIs(t, err, idempotency.ErrInvalidOptions)
	_, err = idempotency.NewHandler(store, nil, idempotency.Options{})
	assert.ErrorIs(t, err, idempotency.ErrInvalidOptions)
	_, err = idempotency.NewHandler(store, pub.publish, idempotency.Options{})
	assert.ErrorIs(t, err, idempotency.ErrInvalidOptions, "the zero Options name no provider")
	_, err = idempotency.NewHandler(store, pub.publish, idempotency.Options{Provider: idempotency.JiraCloud()})
	assert.NoError(t, err)
	_, err = idempotency.NewHandler(store, pub.publish, idempotency.Options{Secret: secret, Key: idempotency.HeaderKey("X-Id")})
	assert.ErrorIs(t, err, idempotency.ErrInvalidOptions, "a secret without a provider's signature header")
}

func TestHMACSHA256(t *testing.T) {
	body := []byte(`{"zen":"Design for failure."}`)
	verify := idempotency.HMACSHA256("X-Hub-Signature", secret)
	tests := []struct {
		name string
		give string
		ok   bool
	}{
		{"valid", idempotency.SignGitHub(secret, body), true},
		{"other secret", idempotency.SignGitHub([]byte("x"), body), false},
		{"missing", "", false},
		{"no prefix", strings.TrimPrefix(idempotency.SignGitHub(secret, body), "sha256="), false},
		{"not hex", "sha256=zz", false},
		{"truncated", idempotency.SignGitHub(secret, body)[:20], false},
		{"upper-case hex", "sha256=" + strings.ToUpper(strings.TrimPrefix(idempotency.SignGitHub(secret, body), "sha256=")), true},
		{"one digit more", idempotency.SignGitHub(secret, body) + "0", false},
		{"not hex at the end", idempotency.SignGitHub(secret, body)[:70] + "g", false},
		{"valid after failures", idempotency.SignGitHub(secret, body), true}, // the MAC's state is reused
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.give != "" {
			h.Set("X-Hub-Signature", tt.give)
		}
		err := verify(h, body)
		if tt.ok {
			assert.NoError(t, err, tt.name)
		} else {
			assert.ErrorIs(t, err, idempotency.ErrSignature, tt.name)
		}
	}
}

func TestJiraKey(t *testing.T) {
	pub := &published{}
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	h, err := idempotency.NewHandler(store, pub.publish, idempotency.Options{
		Key:    idempotency.HeaderKey(idempotency.HeaderJiraWebhookID),
		Source: "jira",
	})
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodPost, "/jira", bytes.NewReader([]byte(`{"webhookEvent":"jira:issue_created"}`)))
	r.Header.Set(idempotency.HeaderJiraWebhookID, "42")
	var source string
	pub.hook = func(d idempotency.Delivery) { source = d.Source }
	assert.Equal(t, http.StatusAccepted, serve(h, r).Code)
	assert.Equal(t, "jira", source)
	assert.Equal(t, []string{"42"}, pub.Keys())
}

func TestHandlerCustomFingerprint(t *testing.T) {
	pub := &published{}
	h, _ := newMemHandler(t, pub, idempotency.Options{
		// The retry differs in a field the provider updates on every attempt.
		Fingerprint: func(d idempotency.Delivery) string {
			var v struct {
				Action string `json:"action"`
			}
			_ = json.Unmarshal(d.Body, &v)
			return v.Action
		},
	})
	require.Equal(t, http.StatusAccepted, serve(h, githubRequest("d1", `{"action":"opened","attempt":1}`)).Code)
	w := serve(h, githubRequest("d1", `{"action":"opened","attempt":2}`))
	assert.Equal(t, http.StatusAccepted, w.Code)
	assert.Equal(t, "true", w.Header().Get(idempotency.HeaderReplayed))
	assert.Equal(t, http.StatusUnprocessableEntity, serve(h, githubRequest("d1", `{"action":"closed"}`)).Code)
	assert.Equal(t, []string{"d1"}, pub.Keys())
}

// corruptStore is a MemoryStore whose done records lost their response, as a
// Redis hash edited by hand would.
type corruptStore struct{ *idempotency.MemoryStore }

func (s corruptStore) Claim(ctx context.Context, key, fp string, ttl time.Duration) (idempotency.Claim, error) {
	c, err := s.MemoryStore.Claim(ctx, key, fp, ttl)
	var done *idempotency.DoneError
	if errors.As(err, &done) {
		done.Record.Response = idempotency.Response{}
	}
	return c, err
}

func TestHandlerReplaysCorruptRecord(t *testing.T) {
	mem, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	pub := &published{}
	h, err := idempotency.NewHandler(corruptStore{mem}, pub.publish, idempotency.Options{Provider: testProvider()})
	require.NoError(t, err)
	first := serve(h, githubRequest("delivery-1", `{}`))
	require.Equal(t, http.StatusAccepted, first.Code)

	var again *httptest.ResponseRecorder
	require.NotPanics(t, func() { again = serve(h, githubRequest("delivery-1", `{}`)) })
	assert.Equal(t, http.StatusAccepted, again.Code, "the key is done: the side effect is durable")
	assert.Equal(t, first.Body.String(), again.Body.String())
	assert.Equal(t, "true", again.Header().Get(idempotency.HeaderReplayed))
	assert.Equal(t, []string{"delivery-1"}, pub.Keys())
}

// The key may come from a function over the request; custom key functions
// and verifiers that fail reject the request before anything is claimed,
// whatever error they return.
func TestHandlerCustomKeyAndVerifier(t *testing.T) {
	bodyKey := func(_ http.Header, body []byte) (string, error) {
		var v struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			return "", err // not wrapping ErrNoKey
		}
		return v.ID, nil
	}
	tokenVerifier := func(h http.Header, _ []byte) error {
		if h.Get("X-Token") != "ok" {
			return errors.New("bad token") // not wrapping ErrSignature
		}
		return nil
	}
	tests := []struct {
		name  string
		body  string
		token string
		want  int
	}{
		{"accepted", `{"id":"evt-1"}`, "ok", http.StatusAccepted},
		{"verifier error", `{"id":"evt-2"}`, "no", http.StatusUnauthorized},
		{"key function error", `{"id":`, "ok", http.StatusBadRequest},
		{"empty key", `{"id":""}`, "ok", http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub := &published{}
			store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
			require.NoError(t, err)
			h, err := idempotency.NewHandler(store, pub.publish, idempotency.Options{Key: bodyKey, Verify: tokenVerifier})
			require.NoError(t, err)
			r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(tt.body))
			r.Header.Set("X-Token", tt.token)

			w := serve(h, r)
			assert.Equal(t, tt.want, w.Code, w.Body.String())
			if tt.want == http.StatusAccepted {
				assert.Equal(t, []string{"evt-1"}, pub.Keys())
				return
			}
			assert.Equal(t, 0, store.Len(), "nothing claimed")
			assert.Empty(t, pub.Keys(), "nothing published")
		})
	}
}

func TestHandlerReleaseLost(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{Now: clock.Now})
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	pub := &published{fail: 1, hook: func(idempotency.Delivery) {
		clock.Add(time.Hour) // the failing side effect outlived its claim
	}}
	h, err := idempotency.NewHandler(store, pub.publish, idempotency.Options{
		Provider:      testProvider(),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	require.NoError(t, err)

	w := serve(h, githubRequest("delivery-1", `{}`))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	assert.Equal(t, map[string]int64{
		"exactlyonce.idempotency.claims/outcome=claimed":   1,
		"exactlyonce.idempotency.claims.lost/step=release": 1,
		"exactlyonce.idempotency.releases/result=lost":     1,
	}, counters(rm))
}
