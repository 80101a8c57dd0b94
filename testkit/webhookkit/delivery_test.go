package webhookkit_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
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
	for _, tt := range presetDeliveries(t, secret) {
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

// presetDeliveries returns a delivery of every preset of package
// idempotency, named by the function that returns the preset.
func presetDeliveries(t *testing.T, secret []byte) []struct {
	name string
	d    webhookkit.Delivery
} {
	return []struct {
		name string
		d    webhookkit.Delivery
	}{
		{"GitHub", webhookkit.Delivery{Provider: idempotency.GitHub(), ID: "d-1", Event: "push", Secret: secret,
			Body: []byte(`{"organization":{"login":"acme"}}`)}},
		{"JiraCloud", webhookkit.Delivery{Provider: idempotency.JiraCloud(), ID: "j-1", Secret: secret,
			Body: webhookkit.JiraIssueBody(t, "jira:issue_updated", "Bug", false, nil)}},
	}
}

// TestEveryPresetIsDelivered proves every preset package idempotency
// exports (a func returning a Provider) has a delivery in
// TestDeliveriesPassTheHandler: a new preset whose headers or signature
// Delivery does not build fails there, not in a user's test.
func TestEveryPresetIsDelivered(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "..", "idempotency", "*.go"))
	require.NoError(t, err)
	var presets []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "Provider" {
				presets = append(presets, fn.Name.Name)
			}
		}
	}
	require.NotEmpty(t, presets)
	var delivered []string
	for _, tt := range presetDeliveries(t, []byte("s")) {
		delivered = append(delivered, tt.name)
	}
	assert.ElementsMatch(t, presets, delivered, "idempotency's presets and the deliveries tested here")
}
