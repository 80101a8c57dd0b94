package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// provider simulates GitHub and Jira: it delivers each event until it gets a
// 2xx, honouring Retry-After (scaled down so the demo runs in a minute), and
// sometimes delivers an event twice at once, as a provider does when its
// first attempt timed out on its side.
type provider struct {
	client  *http.Client
	baseURL string
	dupRate float64

	requests, retries, duplicates, replayed atomic.Int64
}

// deliver sends ev until it is accepted. It returns an error only for an
// answer that tells the provider to give up (4xx): that would be a lost event.
func (p *provider) deliver(ctx context.Context, ev Event, dup bool) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if dup {
		p.duplicates.Add(1)
		var wg sync.WaitGroup
		var errs [2]error
		for i := range errs {
			wg.Go(func() { errs[i] = p.deliverOne(ctx, ev, body) })
		}
		wg.Wait()
		if errs[0] != nil {
			return errs[0]
		}
		return errs[1]
	}
	return p.deliverOne(ctx, ev, body)
}

func (p *provider) deliverOne(ctx context.Context, ev Event, body []byte) error {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			p.retries.Add(1)
		}
		status, retryAfter, replayed, err := p.post(ctx, ev, body)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err == nil && status/100 == 2:
			if replayed {
				p.replayed.Add(1)
			}
			return nil
		case err == nil && status/100 == 4 && status != http.StatusTooManyRequests:
			return fmt.Errorf("delivery %s refused with %d: the provider gives up, the event is lost", ev.EventID, status)
		case attempt >= 200:
			return fmt.Errorf("delivery %s: still failing after %d attempts (last status %d, err %v)", ev.EventID, attempt, status, err)
		}
		// Providers wait Retry-After; the demo waits a fiftieth of it.
		wait := max(retryAfter/50, 10*time.Millisecond) + time.Duration(rand.Int64N(int64(10*time.Millisecond)))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *provider) post(ctx context.Context, ev Event, body []byte) (status int, retryAfter time.Duration, replayed bool, err error) {
	p.requests.Add(1)
	path := "/webhooks/github"
	if ev.Source == "jira" {
		path = "/webhooks/jira"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return 0, 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	sig := idempotency.SignGitHub(webhookSecret, body)
	if ev.Source == "jira" {
		req.Header.Set(idempotency.HeaderJiraWebhookID, ev.EventID)
		req.Header.Set("X-Hub-Signature", sig)
	} else {
		req.Header.Set(idempotency.HeaderGitHubDelivery, ev.EventID)
		req.Header.Set(idempotency.HeaderGitHubSignature, sig)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, 0, false, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		retryAfter = time.Duration(s) * time.Second
	}
	return resp.StatusCode, retryAfter, resp.Header.Get(idempotency.HeaderReplayed) == "true", nil
}
