package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// BenchmarkHandler serves signed GitHub deliveries in process (no network)
// to a Handler with the memory store and a side effect that does nothing:
// the Handler's own cost per new delivery (parse, verify, claim, complete).
//
//	go test -run XXX -bench Handler -benchtime 20000x ./idempotency/
func BenchmarkHandler(b *testing.B) {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{MaxKeys: 1 << 22})
	if err != nil {
		b.Fatal(err)
	}
	h, err := idempotency.NewHandler(store, func(context.Context, idempotency.Delivery) error { return nil },
		idempotency.Options{Provider: idempotency.GitHub(), Secret: secret})
	if err != nil {
		b.Fatal(err)
	}
	body := prOpened
	sig := idempotency.SignGitHub(secret, []byte(body))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(body))
		r.Header.Set(idempotency.HeaderGitHubDelivery, "d-"+strconv.Itoa(i))
		r.Header.Set(idempotency.HeaderGitHubEvent, "pull_request")
		r.Header.Set(idempotency.HeaderGitHubSignature, sig)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusAccepted {
			b.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	}
}
