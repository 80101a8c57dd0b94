package webhookkit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// Deliveries built for each preset pass a real idempotency.Handler with
// that preset and secret: signed, keyed and typed as the provider does;
// a retry of one is answered without a second effect, and a wrong secret
// is refused.
func TestDeliveriesPassTheHandler(t *testing.T) {
	secret := []byte("s3cret")
	tests := []struct {
		name string
		d    webhookkit.Delivery
	}{
		{"github", webhookkit.Delivery{Provider: idempotency.GitHub(), ID: "d-1", Event: "push", Secret: secret,
			Body: []byte(`{"organization":{"login":"acme"}}`)}},
		{"jira", webhookkit.Delivery{Provider: idempotency.JiraCloud(), ID: "j-1", Secret: secret,
			Body: webhookkit.JiraIssueBody(t, "jira:issue_updated", "Bug", false, nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
			require.NoError(t, err)
			var mu sync.Mutex
			var got []idempotency.Delivery
			h, err := idempotency.NewHandler(store, func(_ context.Context, d idempotency.Delivery) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, d)
				return nil
			}, idempotency.Options{Provider: tt.d.Provider, Secret: secret})
			require.NoError(t, err)
			srv := httptest.NewServer(h)
			defer srv.Close()

			assert.Equal(t, 2, webhookkit.Post(t, srv.URL, tt.d)/100, "accepted")
			retry := tt.d
			retry.Retry = 1
			assert.Equal(t, 2, webhookkit.Post(t, srv.URL, retry)/100, "the retry is answered as done")
			forged := tt.d
			forged.Secret = []byte("wrong")
			assert.Equal(t, http.StatusUnauthorized, webhookkit.Post(t, srv.URL, forged))
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, got, 1, "one effect for a delivery and its retry")
			assert.Equal(t, tt.d.ID, got[0].Key)
		})
	}
}
