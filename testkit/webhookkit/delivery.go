package webhookkit

import (
	"bytes"
	"context"
	"net/http"
	"strconv"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// Delivery is one webhook delivery as a provider sends it: the headers of
// its preset (delivery id, event type, signature, retry count) around a
// body.
type Delivery struct {
	Provider idempotency.Provider // idempotency.GitHub() or idempotency.JiraCloud()
	ID       string               // the delivery id (Provider.KeyHeader); the same on every retry
	Event    string               // the event type, for providers with an EventHeader (GitHub)
	Body     []byte
	Secret   []byte // signs the body in Provider.SignatureHeader when set
	Retry    int    // the provider's retry count (Provider.RetryHeader) when above 0
}

// Request returns the POST request that delivers d to url.
func (d Delivery) Request(ctx context.Context, url string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return nil, err
	}
	p := d.Provider
	req.Header.Set("Content-Type", "application/json")
	if p.KeyHeader != "" {
		req.Header.Set(p.KeyHeader, d.ID)
	}
	if p.EventHeader != "" && d.Event != "" {
		req.Header.Set(p.EventHeader, d.Event)
	}
	if p.SignatureHeader != "" && d.Secret != nil {
		req.Header.Set(p.SignatureHeader, p.Sign(d.Secret, d.Body))
	}
	if p.RetryHeader != "" && d.Retry > 0 {
		req.Header.Set(p.RetryHeader, strconv.Itoa(d.Retry))
	}
	return req, nil
}
