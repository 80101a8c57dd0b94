package webhookkit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// maxAnswerBytes bounds the body Send keeps of an answer.
const maxAnswerBytes = 1 << 20

// Answer is a gateway's whole answer to a delivery.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte // at most 1 MiB
}

// Replayed reports whether the answer is a replay of an earlier one: the
// delivery was a retry of one already done, answered without a second
// effect (idempotency.HeaderReplayed).
func (a Answer) Replayed() bool { return a.Header.Get(idempotency.HeaderReplayed) == "true" }

// Send delivers d to url, as the provider would, and returns the whole
// answer. It only returns errors, so call it from any goroutine: a sender
// of its own while the test kills the service, or many at once.
func Send(ctx context.Context, url string, d Delivery) (Answer, error) {
	req, err := d.Request(ctx, url)
	if err != nil {
		return Answer{}, fmt.Errorf("webhookkit: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("webhookkit: deliver %s to %s: %w", d.ID, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return Answer{}, fmt.Errorf("webhookkit: read the answer to %s from %s: %w", d.ID, url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // past the limit: keep the connection reusable
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// Post sends d to url, as the provider would, and returns the status code
// the gateway answered. A transport error fails the test, so call it from
// the test's goroutine; Send returns the whole answer and works from any.
func Post(t testing.TB, url string, d Delivery) int {
	t.Helper()
	a, err := Send(t.Context(), url, d)
	if err != nil {
		t.Fatal(err)
	}
	return a.Status
}
