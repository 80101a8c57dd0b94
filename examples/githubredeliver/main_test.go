package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One pass against a hook with one failed delivery: the command requests its
// redelivery, keeps its state on disk, and a second run does not request it
// again.
func TestRunOnce(t *testing.T) {
	var mu sync.Mutex
	var posts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, "Bearer t0ken", r.Header.Get("Authorization"))
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/orgs/octo-org/hooks/7/deliveries":
			_, _ = w.Write([]byte(`[{"id":12345678,"guid":"0b989ba4-242f-11e5-81e1-c7b6966d2516","delivered_at":"2099-01-01T00:00:00Z","redelivery":false,"duration":0.27,"status":"Invalid HTTP Response: 503","status_code":503,"event":"issues","action":"opened","installation_id":null,"repository_id":null}]`))
		case r.Method == http.MethodPost:
			posts = append(posts, r.URL.Path)
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	env := func(k string) string { return map[string]string{"GITHUB_TOKEN": "t0ken"}[k] }
	state := t.TempDir()
	args := []string{"-org", "octo-org", "-hook", "7", "-api", srv.URL, "-state", state, "-once"}
	require.NoError(t, run(context.Background(), args, env))
	require.NoError(t, run(context.Background(), args, env))
	assert.Equal(t, []string{"/orgs/octo-org/hooks/7/deliveries/12345678/attempts"}, posts)

	assert.Error(t, run(context.Background(), []string{"-org", "o"}, env), "no hook id")
	assert.Error(t, run(context.Background(), []string{"-app"}, func(string) string { return "" }), "no token")
}
