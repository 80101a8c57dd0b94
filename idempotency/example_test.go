package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// A webhook endpoint whose side effect fails once: the first delivery is
// answered 503 and released, the provider's retry is published, and a later
// duplicate replays the stored answer without publishing again.
func ExampleHandler() {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	if err != nil {
		panic(err)
	}
	attempts := 0
	publish := func(ctx context.Context, d idempotency.Delivery) error {
		attempts++
		if attempts == 1 {
			return errors.New("kafka: leader not available")
		}
		fmt.Printf("published %s from %s\n", d.Key, d.Source)
		return nil
	}
	secret := []byte("webhook secret")
	h, err := idempotency.NewHandler(store, publish, idempotency.Options{
		Provider: idempotency.GitHub(),
		Secret:   secret,
	})
	if err != nil {
		panic(err)
	}

	body := `{"action":"opened","organization":{"login":"octo-org"}}`
	for range 3 {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idempotency.HeaderGitHubDelivery, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		r.Header.Set(idempotency.HeaderGitHubEvent, "pull_request")
		r.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub(secret, []byte(body)))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d retry-after=%q replayed=%q\n", w.Code, w.Header().Get("Retry-After"), w.Header().Get(idempotency.HeaderReplayed))
	}
	// Output:
	// 503 retry-after="5" replayed=""
	// published 72d3162e-cc78-11e3-81ab-4c9367dc0958 from github
	// 202 retry-after="" replayed=""
	// 202 retry-after="" replayed="true"
}

// The two states of a key, driven by hand.
func ExampleMemoryStore() {
	ctx := context.Background()
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	if err != nil {
		panic(err)
	}
	c, err := store.Claim(ctx, "delivery-1", "fp", idempotency.DefaultPendingTTL)
	fmt.Println("claim:", err)

	_, err = store.Claim(ctx, "delivery-1", "fp", idempotency.DefaultPendingTTL)
	fmt.Println("while pending:", err)

	// ... the side effect succeeded ...
	resp := idempotency.Response{Status: 202, ContentType: "text/plain", Body: []byte("accepted")}
	fmt.Println("complete:", store.Complete(ctx, c, resp, idempotency.DefaultDoneTTL))

	_, err = store.Claim(ctx, "delivery-1", "fp", idempotency.DefaultPendingTTL)
	var done *idempotency.DoneError
	if errors.As(err, &done) {
		fmt.Printf("once done: replay %d %s\n", done.Record.Response.Status, done.Record.Response.Body)
	}

	_, err = store.Claim(ctx, "delivery-1", "another payload", idempotency.DefaultPendingTTL)
	fmt.Println("other payload:", err)
	// Output:
	// claim: <nil>
	// while pending: idempotency: key is pending
	// complete: <nil>
	// once done: replay 202 accepted
	// other payload: idempotency: key reused with a different request
}

// Do is the protocol without HTTP, for a Kafka or gRPC consumer: the side
// effect runs once per key, a failure releases the key for the next try,
// and a done key returns its stored response without running again.
func ExampleDo() {
	ctx := context.Background()
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	if err != nil {
		panic(err)
	}
	attempts := 0
	charge := func(context.Context) (idempotency.Response, error) {
		attempts++
		if attempts == 1 {
			return idempotency.Response{}, errors.New("payment service unavailable")
		}
		return idempotency.Response{Status: 200, Body: []byte("charge ch_42")}, nil
	}
	for range 3 {
		out, err := idempotency.Do(ctx, store, "order-7", "fingerprint", charge, idempotency.DoOptions{})
		fmt.Printf("err=%v replayed=%v body=%q\n", err, out.Replayed, out.Response.Body)
	}
	fmt.Println("attempts:", attempts)
	// Output:
	// err=idempotency: side effect failed: payment service unavailable replayed=false body=""
	// err=<nil> replayed=false body="charge ch_42"
	// err=<nil> replayed=true body="charge ch_42"
	// attempts: 2
}
