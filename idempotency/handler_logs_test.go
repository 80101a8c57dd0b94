package idempotency_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// records is a slog.Handler that keeps every record, for tests that check
// what was logged.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// reasons returns the reason attribute of every record with that message.
func (r *records) reasons(msg string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Message != msg {
			continue
		}
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				out = append(out, a.Value.String())
			}
			return true
		})
	}
	return out
}

// storeFunc is a MemoryStore whose Claim is replaced.
type storeFunc struct {
	*idempotency.MemoryStore
	claim func(ctx context.Context) error
}

func (s storeFunc) Claim(ctx context.Context, key, fp string, ttl time.Duration) (idempotency.Claim, error) {
	if err := s.claim(ctx); err != nil {
		return idempotency.Claim{}, err
	}
	return s.MemoryStore.Claim(ctx, key, fp, ttl)
}

// held holds a delivery keyed "held" in its side effect until released.
type held struct{ entered, release chan struct{} }

// during answers a delivery with key while one keyed "held" is in its side
// effect, and returns the status of that answer.
func (hd held) during(t *testing.T, h http.Handler, key string) int {
	first := make(chan int, 1)
	go func() { first <- serve(h, githubRequest("held", `{}`)).Code }()
	<-hd.entered
	code := serve(h, githubRequest(key, `{}`)).Code
	close(hd.release)
	assert.Equal(t, http.StatusAccepted, <-first)
	return code
}

// Every path that answers 503 logs one line naming its reason and the key.
// TestBinaries saw a 503 with nothing in the gateway's log: on main the
// in-flight cap, a pending duplicate and the answer deadline logged nothing.
func TestEvery503IsLogged(t *testing.T) {
	const msg = "idempotency: answered 503, retry later"
	storeDown := errors.New("store down")
	tests := []struct {
		name  string
		opts  idempotency.Options
		claim func(ctx context.Context) error // replaces the store's Claim when set
		key   string                          // of the delivery answered 503
		held  bool                            // answered while "held" is in its side effect
		want  string
	}{
		{name: "busy", opts: idempotency.Options{MaxInFlight: 1}, key: "b", held: true, want: "busy"},
		{name: "pending", key: "held", held: true, want: "pending"},
		{name: "check", key: "k", want: "check",
			opts: idempotency.Options{Check: func(context.Context, idempotency.Delivery) error { return storeDown }}},
		{name: "claim", key: "k", want: "claim", claim: func(context.Context) error { return storeDown }},
		{name: "claim deadline", key: "k", want: "claim_deadline", opts: idempotency.Options{ReadTimeout: 20 * time.Millisecond, AnswerTimeout: 50 * time.Millisecond},
			claim: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{name: "effect", key: "fail", want: "effect"},
		{name: "answer deadline", key: "slow", want: "answer_deadline", opts: idempotency.Options{ReadTimeout: 20 * time.Millisecond, AnswerTimeout: 50 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &records{}
			mem, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
			require.NoError(t, err)
			var store idempotency.Store = mem
			if tt.claim != nil {
				store = storeFunc{mem, tt.claim}
			}
			hd := held{make(chan struct{}), make(chan struct{})}
			effect := func(ctx context.Context, d idempotency.Delivery) error {
				switch d.Key {
				case "held":
					hd.entered <- struct{}{}
					<-hd.release
				case "slow":
					time.Sleep(200 * time.Millisecond)
				case "fail":
					return errors.New("broker unavailable")
				}
				return nil
			}
			opts := tt.opts
			opts.Provider, opts.Verify = testProvider(), idempotency.GitHubSignature(secret)
			opts.Logger = slog.New(logs)
			h, err := idempotency.NewHandler(store, effect, opts)
			require.NoError(t, err)

			if tt.held {
				assert.Equal(t, http.StatusServiceUnavailable, hd.during(t, h, tt.key))
			} else {
				assert.Equal(t, http.StatusServiceUnavailable, serve(h, githubRequest(tt.key, `{}`)).Code)
			}
			assert.Equal(t, []string{tt.want}, logs.reasons(msg))
		})
	}
}
