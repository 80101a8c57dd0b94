package githubredeliver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/githubredeliver"
)

// The gateway answers 503 while its Kafka is down, and GitHub never retries:
// without the redeliverer those events are lost. With it, every GUID that
// failed is redelivered through the REST API once the gateway is back, and
// each event is published exactly once.
func TestRedeliveredToTheGateway(t *testing.T) {
	secret := []byte("s3cret")
	var down atomic.Bool
	var mu sync.Mutex
	published := map[string]int{}
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	gw, err := idempotency.NewHandler(store, func(_ context.Context, d idempotency.Delivery) error {
		if down.Load() {
			return errors.New("kafka: leader not available")
		}
		mu.Lock()
		defer mu.Unlock()
		published[d.Key]++
		return nil
	}, idempotency.Options{Provider: idempotency.GitHub(), Secret: secret})
	require.NoError(t, err)
	send := func(guid string) int {
		body := fmt.Sprintf(`{"action":"opened","number":1,"organization":{"login":"octo-org"},"sender":{"login":"octocat"},"n":%q}`, guid)
		r := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idempotency.HeaderGitHubDelivery, guid)
		r.Header.Set(idempotency.HeaderGitHubEvent, "pull_request")
		r.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub(secret, []byte(body)))
		w := httptest.NewRecorder()
		gw.ServeHTTP(w, r)
		return w.Code
	}

	clk := &clock{t: time.Now()}
	f, srv := newFake(t, "/repos/octo-org/app/hooks/42", clk.Now)
	f.deliver = send
	for i := range 6 {
		guid := fmt.Sprintf("guid-%d", i)
		down.Store(i >= 2 && i < 5) // Kafka is down for three deliveries
		f.add(guid, clk.Now(), send(guid), false)
	}
	mu.Lock()
	require.Len(t, published, 3, "three deliveries answered 503")
	mu.Unlock()

	down.Store(false)
	r := newRedeliverer(t, srv, githubredeliver.RepoHook("octo-org", "app", 42), clk, githubredeliver.Options{})
	res, err := r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"guid-2", "guid-3", "guid-4"}, res.Redelivered)
	res, err = r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"guid-2", "guid-3", "guid-4"}, res.Succeeded)
	assert.Empty(t, res.Redelivered)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{"guid-0": 1, "guid-1": 1, "guid-2": 1, "guid-3": 1, "guid-4": 1, "guid-5": 1}, published)
}
