package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// BenchmarkHandler serves signed GitHub deliveries in process (no network)
// to a Handler with the memory store and a side effect that does nothing:
// the Handler's own cost per new delivery (parse, verify, claim, complete),
// for a small payload and for GitHub's own pull_request example (28 KB,
// from @octokit/webhooks-examples: real deliveries are 1 to 30 KB).
//
//	go test -run XXX -bench Handler -benchtime 20000x ./idempotency/
func BenchmarkHandler(b *testing.B) {
	b.Run("small", func(b *testing.B) { benchHandler(b, prOpened) })
	b.Run("pull_request", func(b *testing.B) { benchHandler(b, string(pullRequestExample(b))) })
}

// BenchmarkGitHubPartition finds the partition of GitHub's pull_request
// example (28 KB) with GitHubPartition (one pass, internal/jsonscan) and,
// beside it, with the json.Unmarshal of the whole payload it replaced.
func BenchmarkGitHubPartition(b *testing.B) {
	body := pullRequestExample(b)
	for _, bc := range []struct {
		name string
		fn   func(string, []byte) (string, error)
	}{{"jsonscan", idempotency.GitHubPartition}, {"json.Unmarshal", idempotency.ReferenceGitHubPartition}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.fn("pull_request", body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func pullRequestExample(b *testing.B) []byte {
	for _, ex := range webhookkit.GitHubExamples(b) {
		if ex.Event == "pull_request" {
			return ex.Body
		}
	}
	b.Fatal("no pull_request example")
	return nil
}

func benchHandler(b *testing.B, body string) {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{MaxKeys: 1 << 22})
	if err != nil {
		b.Fatal(err)
	}
	h, err := idempotency.NewHandler(store, func(context.Context, idempotency.Delivery) error { return nil },
		idempotency.Options{Provider: idempotency.GitHub(), Secret: secret})
	if err != nil {
		b.Fatal(err)
	}
	sig := idempotency.SignGitHub(secret, []byte(body))
	b.SetBytes(int64(len(body)))
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
