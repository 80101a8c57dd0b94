package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// recorder keeps every delivery its side effect saw.
type recorder struct {
	mu sync.Mutex
	ds []idempotency.Delivery
}

func (r *recorder) publish(_ context.Context, d idempotency.Delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	d.Body = append([]byte(nil), d.Body...)
	d.Header = nil
	r.ds = append(r.ds, d)
	return nil
}

func (r *recorder) all() []idempotency.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]idempotency.Delivery(nil), r.ds...)
}

func presetHandler(t *testing.T, rec *recorder, opts idempotency.Options) http.Handler {
	t.Helper()
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	opts.Secret = secret
	h, err := idempotency.NewHandler(store, rec.publish, opts)
	require.NoError(t, err)
	return h
}

const prOpened = `{"action":"opened","number":1,"organization":{"login":"Octo-Org"},"repository":{"owner":{"login":"Octo-Org"}},"sender":{"login":"octocat"}}`

func gitHubDelivery(key, event, contentType, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	r.Header.Set(idempotency.HeaderGitHubDelivery, key)
	r.Header.Set(idempotency.HeaderGitHubEvent, event)
	r.Header.Set(idempotency.HeaderGitHubHookID, "42")
	r.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub(secret, []byte(body)))
	return r
}

func TestGitHubPresetMetadataAndPartition(t *testing.T) {
	rec := &recorder{}
	h := presetHandler(t, rec, idempotency.Options{Provider: idempotency.GitHub()})
	w := serve(h, gitHubDelivery("d-1", "pull_request", "application/json", prOpened))
	require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	assert.Equal(t, []idempotency.Delivery{{
		Key: "d-1", Source: "github", Event: "pull_request", HookID: "42",
		Partition: "github/octo-org", Body: []byte(prOpened),
	}}, rec.all())
}

// GitHub's "form" content type: the signature covers the form body as sent,
// and the JSON inside it is what is published and fingerprinted.
func TestGitHubFormEncoded(t *testing.T) {
	rec := &recorder{}
	h := presetHandler(t, rec, idempotency.Options{Provider: idempotency.GitHub()})
	form := "payload=" + url.QueryEscape(prOpened)
	w := serve(h, gitHubDelivery("d-1", "pull_request", "application/x-www-form-urlencoded", form))
	require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	require.Len(t, rec.all(), 1)
	assert.JSONEq(t, prOpened, string(rec.all()[0].Body))

	// The same delivery sent as JSON has the same payload: replayed, not
	// a fingerprint mismatch.
	w = serve(h, gitHubDelivery("d-1", "pull_request", "application/json", prOpened))
	assert.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	assert.Equal(t, "true", w.Header().Get(idempotency.HeaderReplayed))

	// A signature over the decoded JSON instead of the form body is wrong.
	r := gitHubDelivery("d-2", "pull_request", "application/x-www-form-urlencoded", form)
	r.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub(secret, []byte(prOpened)))
	assert.Equal(t, http.StatusUnauthorized, serve(h, r).Code)

	for _, bad := range []string{"nopayload=1", "payload=%7B&payload=%7B", "payload=" + url.QueryEscape("[1]"), "%zz"} {
		w := serve(h, gitHubDelivery("d-3", "pull_request", "application/x-www-form-urlencoded", bad))
		assert.Equal(t, http.StatusBadRequest, w.Code, bad)
	}
	assert.Len(t, rec.all(), 1)
}

func TestIgnoredEvents(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	rec := &recorder{}
	h := presetHandler(t, rec, idempotency.Options{
		Provider:      idempotency.GitHub(),
		Ignore:        []string{"star"},
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	ping := `{"zen":"Keep it logically awesome.","hook_id":42,"sender":{"login":"octocat"}}`
	for _, tt := range []struct{ event, body string }{{"ping", ping}, {"star", prOpened}} {
		w := serve(h, gitHubDelivery("d-"+tt.event, tt.event, "application/json", tt.body))
		assert.Equal(t, http.StatusOK, w.Code, tt.event)
	}
	// A ping with a bad signature is still refused.
	r := gitHubDelivery("d-x", "ping", "application/json", ping)
	r.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub([]byte("wrong"), []byte(ping)))
	assert.Equal(t, http.StatusUnauthorized, serve(h, r).Code)
	assert.Empty(t, rec.all())
	assert.Equal(t, int64(2), counterSum(t, reader, "exactlyonce.idempotency.ignored"))
}

func TestCheckHook(t *testing.T) {
	transient := errors.New("lookup service down")
	var mu sync.Mutex
	fixed := false
	check := func(_ context.Context, d idempotency.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		switch d.Key {
		case "reject":
			if fixed {
				return nil
			}
			return idempotency.Reject(http.StatusUnprocessableEntity, "pull request has no merge time")
		case "reject-5xx":
			return idempotency.Reject(http.StatusInternalServerError, "not a 4xx")
		case "literal-2xx": // built by hand, not by Reject: a 200 would tell GitHub it was taken
			return &idempotency.RejectError{Status: http.StatusOK, Reason: "not a 4xx either"}
		case "literal-zero": // net/http panics on WriteHeader(0)
			return &idempotency.RejectError{Reason: "no status"}
		case "ignore":
			return errors.Join(idempotency.ErrIgnored, errors.New("bot sender"))
		case "transient":
			return transient
		}
		return nil
	}
	rec := &recorder{}
	h := presetHandler(t, rec, idempotency.Options{Provider: idempotency.GitHub(), Check: check})
	tests := []struct {
		key      string
		want     int
		wantBody string
	}{
		{"reject", http.StatusUnprocessableEntity, "pull request has no merge time\n"},
		{"reject-5xx", http.StatusUnprocessableEntity, "not a 4xx\n"},
		{"literal-2xx", http.StatusUnprocessableEntity, "not a 4xx either\n"},
		{"literal-zero", http.StatusUnprocessableEntity, "no status\n"},
		{"ignore", http.StatusOK, ""},
		{"transient", http.StatusServiceUnavailable, ""},
		{"ok", http.StatusAccepted, ""},
	}
	for _, tt := range tests {
		w := serve(h, gitHubDelivery(tt.key, "pull_request", "application/json", prOpened))
		assert.Equal(t, tt.want, w.Code, tt.key)
		if tt.wantBody != "" {
			assert.Equal(t, tt.wantBody, w.Body.String())
		}
	}
	require.Len(t, rec.all(), 1, "only the accepted delivery is published")
	assert.Equal(t, "ok", rec.all()[0].Key)

	// A rejected key was never claimed: once the hook accepts it (the
	// application was fixed), a redelivery of the same id is published.
	mu.Lock()
	fixed = true
	mu.Unlock()
	w := serve(h, gitHubDelivery("reject", "pull_request", "application/json", prOpened))
	assert.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	assert.Len(t, rec.all(), 2)
}

func TestMissingEventOrPartition(t *testing.T) {
	rec := &recorder{}
	h := presetHandler(t, rec, idempotency.Options{Provider: idempotency.GitHub()})
	r := gitHubDelivery("d-1", "", "application/json", prOpened)
	r.Header.Del(idempotency.HeaderGitHubEvent)
	assert.Equal(t, http.StatusBadRequest, serve(h, r).Code)
	w := serve(h, gitHubDelivery("d-2", "pull_request", "application/json", `{"sender":[1]}`))
	assert.Equal(t, http.StatusUnprocessableEntity, w.Code)
	assert.Contains(t, w.Body.String(), "partition")
	assert.Empty(t, rec.all())
}

func TestGitHubPartition(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"organization", `{"organization":{"login":"Acme"},"repository":{"owner":{"login":"other"}},"sender":{"login":"u"}}`, "github/acme"},
		{"repository owner", `{"repository":{"owner":{"login":"Alice"}},"sender":{"login":"bob"}}`, "github/alice"},
		{"installation account", `{"installation":{"id":5,"account":{"login":"Acme"}},"sender":{"login":"u"}}`, "github/acme"},
		{"installation id", `{"installation":{"id":5},"sender":{"login":"u"}}`, "github/installation/5"},
		{"sender", `{"sender":{"login":"Bob"}}`, "github/bob"},
	}
	for _, tt := range tests {
		got, err := idempotency.GitHubPartition("push", []byte(tt.give))
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, got, tt.name)
	}
	got, err := idempotency.GitHubPartition("security_advisory", []byte(`{"action":"published","security_advisory":{}}`))
	require.NoError(t, err)
	assert.Equal(t, "github", got, "an event of no account")
	_, err = idempotency.GitHubPartition("push", []byte(`{"sender":"not an object"}`))
	assert.ErrorIs(t, err, idempotency.ErrNoPartition)
}

func TestJiraPreset(t *testing.T) {
	rec := &recorder{}
	h := presetHandler(t, rec, idempotency.Options{Provider: idempotency.JiraCloud()})
	body := `{"timestamp":1700000000000,"webhookEvent":"jira:issue_created","issue_event_type_name":"issue_created",` +
		`"issue":{"id":"10001","self":"https://Acme.atlassian.net/rest/api/2/10001","key":"ENG-12","fields":{"project":{"key":"ENG"}}}}`
	send := func(key, retry, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/jira", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idempotency.HeaderJiraWebhookID, key)
		if retry != "" {
			r.Header.Set(idempotency.HeaderJiraRetry, retry)
		}
		r.Header.Set(idempotency.HeaderJiraSignature, idempotency.SignGitHub(secret, []byte(body)))
		return serve(h, r)
	}
	w := send("j-1", "2", body)
	require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	assert.Equal(t, []idempotency.Delivery{{
		Key: "j-1", Source: "jira", Event: "jira:issue_created", Retry: 2,
		Partition: "jira/acme.atlassian.net/ENG", Body: []byte(body),
	}}, rec.all())

	// GitHub's headers mean nothing on a Jira endpoint.
	r := gitHubDelivery("g-1", "pull_request", "application/json", prOpened)
	assert.Equal(t, http.StatusUnauthorized, serve(h, r).Code)
	assert.Equal(t, http.StatusBadRequest, send("j-2", "", `{"issue":{}}`).Code, "no webhookEvent")
	assert.Equal(t, http.StatusBadRequest, send("j-3", "x", body).Code, "retry not a number")
	assert.Len(t, rec.all(), 1)
}

func TestJiraPartition(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"issue with project", `{"issue":{"self":"https://acme.atlassian.net/rest/api/2/issue/1","key":"ENG-1","fields":{"project":{"key":"OPS"}}}}`, "jira/acme.atlassian.net/OPS"},
		{"issue key prefix", `{"issue":{"self":"https://acme.atlassian.net/rest/api/2/issue/1","key":"ENG-1"}}`, "jira/acme.atlassian.net/ENG"},
		{"comment", `{"comment":{"self":"https://acme.atlassian.net/rest/api/2/issue/1/comment/2"},"issue":{"key":"ENG-1"}}`, "jira/acme.atlassian.net/ENG"},
		{"project event", `{"project":{"key":"ENG","self":"https://acme.atlassian.net/rest/api/2/project/1"}}`, "jira/acme.atlassian.net/ENG"},
		{"user event", `{"user":{"self":"https://acme.atlassian.net/rest/api/2/user?accountId=1"}}`, "jira/acme.atlassian.net"},
	}
	for _, tt := range tests {
		got, err := idempotency.JiraPartition("", []byte(tt.give))
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, got, tt.name)
	}
	_, err := idempotency.JiraPartition("", []byte(`{"issue":{"key":"ENG-1"}}`))
	assert.ErrorIs(t, err, idempotency.ErrNoPartition)
}

func counterSum(t *testing.T, reader *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				n += dp.Value
			}
		}
	}
	return n
}

// Jira Cloud payloads built to Atlassian's documented shapes (testdata/jira),
// delivered with Jira's headers and a retry: accepted once, replayed on the
// retry, with the event type from the body and the site and project as the
// partition key.
func TestJiraDocumentedPayloads(t *testing.T) {
	rec := &recorder{}
	h := presetHandler(t, rec, idempotency.Options{Provider: idempotency.JiraCloud()})
	tests := []struct {
		file, event string
	}{
		{"issue_created.json", "jira:issue_created"},
		{"issue_updated.json", "jira:issue_updated"},
		{"comment_created.json", "comment_created"},
	}
	for i, tt := range tests {
		body, err := os.ReadFile(filepath.Join("testdata", "jira", tt.file))
		require.NoError(t, err)
		id := fmt.Sprintf("a7f1bb43-%04d", i)
		for retry := range 2 {
			r := httptest.NewRequest(http.MethodPost, "/webhooks/jira", bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json; charset=utf-8")
			r.Header.Set(idempotency.HeaderJiraWebhookID, id)
			r.Header.Set("X-Atlassian-Webhook-Flow", "Primary")
			if retry > 0 {
				r.Header.Set(idempotency.HeaderJiraRetry, strconv.Itoa(retry))
			}
			r.Header.Set(idempotency.HeaderJiraSignature, idempotency.SignGitHub(secret, body))
			w := serve(h, r)
			require.Equal(t, http.StatusAccepted, w.Code, "%s: %s", tt.file, w.Body.String())
			assert.Equal(t, retry > 0, w.Header().Get(idempotency.HeaderReplayed) == "true")
		}
		got := rec.all()
		require.Len(t, got, i+1, "a retry publishes nothing")
		assert.Equal(t, idempotency.Delivery{
			Key: id, Source: "jira", Event: tt.event, Partition: "jira/acme.atlassian.net/OPS", Body: body,
		}, got[i], tt.file)
	}
}
