package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// Provider simulates GitHub and Jira Cloud sending webhooks: real-shaped
// payloads with each provider's headers and signature, GitHub's form
// content type for some hooks, and sometimes a delivery sent twice at once,
// as a provider does when its first attempt timed out on its side.
//
// Jira Cloud retries a delivery answered 408, 409, 425, 429 or 5xx, or not
// answered, for up to about 30 minutes (compressed here: the demo waits a
// fiftieth of Retry-After), with X-Atlassian-Webhook-Retry counting the
// retries. Every other answer is final.
//
// GitHub never retries: github (the demo's fake GitHub) sends each delivery
// once and records it; one answered 503, or not answered, stays failed
// until a githubredeliver.Redeliverer asks the fake's REST API to redeliver
// it.
type Provider struct {
	Client  *http.Client
	DupRate float64
	github  *fakeGitHub
	// jiraWindow is how long Jira keeps retrying a delivery here.
	// Default jiraRetryWindow.
	JiraWindow time.Duration
	// Trace, when set, is called before each request to the gateway
	// (GitHub's redeliveries included) and the function it returns with
	// the answer: the status, 0 with err when none came. The chaos run
	// records its history with it. It must be safe for concurrent use.
	Trace func(d Delivery) (answered func(status int, err error))

	mu      sync.Mutex
	BaseURL string // the gateway; it changes when the gateway restarts

	Requests, Retries, Duplicates, Replayed atomic.Int64
	Ignored, Rejected, GitHubFailed         atomic.Int64
}

func (p *Provider) jiraRetryWindow() time.Duration {
	if p.JiraWindow > 0 {
		return p.JiraWindow
	}
	return jiraRetryWindow
}

func (p *Provider) SetBaseURL(u string) {
	p.mu.Lock()
	p.BaseURL = u
	p.mu.Unlock()
}

func (p *Provider) gatewayURL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.BaseURL
}

// jiraRetryWindow is how long Jira Cloud keeps retrying a delivery: about
// 30 minutes, compressed like Retry-After (a fiftieth).
const jiraRetryWindow = 30 * time.Minute / 50

// Deliver sends d until it gets a final answer. It returns an error for an
// answer other than the one the pipeline owes d: a 4xx for a valid
// delivery would be an event lost for good.
func (p *Provider) Deliver(ctx context.Context, d Delivery, dup bool) error {
	if dup {
		p.Duplicates.Add(1)
		var wg sync.WaitGroup
		var errs [2]error
		for i := range errs {
			wg.Go(func() { errs[i] = p.deliverOne(ctx, d, i == 1) })
		}
		wg.Wait()
		if errs[0] != nil {
			return errs[0]
		}
		return errs[1]
	}
	return p.deliverOne(ctx, d, false)
}

// retried reports whether Jira Cloud retries an answer.
func retried(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return status >= 500
}

func (p *Provider) deliverOne(ctx context.Context, d Delivery, redelivery bool) error {
	if d.Provider == "github" && p.github != nil {
		status := p.github.deliver(ctx, d, redelivery)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if retried(status) || status == 0 {
			p.GitHubFailed.Add(1) // failed for good, unless redelivered
			return nil
		}
		return p.final(d, status, false)
	}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			p.Retries.Add(1)
		}
		status, retryAfter, replayed, err := p.post(ctx, d, attempt)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err == nil && !retried(status):
			return p.final(d, status, replayed)
		case time.Since(start) > p.jiraRetryWindow():
			return fmt.Errorf("delivery %s: Jira gave up after its retry window (30 minutes, %v here) of %d attempts (last status %d, err %v): the event is lost",
				d.ID, p.jiraRetryWindow(), attempt+1, status, err)
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

// final checks the final answer to d against what the pipeline owes it.
func (p *Provider) final(d Delivery, status int, replayed bool) error {
	switch {
	case d.Reject:
		if status/100 != 4 {
			return fmt.Errorf("delivery %s (%s %s) cannot be normalized but was answered %d, not 4xx", d.ID, d.Provider, d.EventType, status)
		}
		p.Rejected.Add(1)
	case d.Want == nil:
		if status != http.StatusOK {
			return fmt.Errorf("delivery %s (%s %s) counts nothing and should be answered 200 unpublished, got %d", d.ID, d.Provider, d.EventType, status)
		}
		p.Ignored.Add(1)
	case status/100 != 2:
		return fmt.Errorf("delivery %s (%s %s) refused with %d: the provider gives up, the event is lost", d.ID, d.Provider, d.EventType, status)
	case replayed:
		p.Replayed.Add(1)
	}
	return nil
}

func (p *Provider) post(ctx context.Context, d Delivery, attempt int) (status int, retryAfter time.Duration, replayed bool, err error) {
	p.Requests.Add(1)
	if p.Trace != nil {
		answered := p.Trace(d)
		defer func() { answered(status, err) }()
	}
	body, contentType := d.Body, "application/json"
	if d.Form {
		body, contentType = []byte("payload="+url.QueryEscape(string(d.Body))), "application/x-www-form-urlencoded"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.gatewayURL()+"/webhooks/"+d.Provider, bytes.NewReader(body))
	if err != nil {
		return 0, 0, false, err
	}
	req.Header.Set("Content-Type", contentType)
	sig := idempotency.SignGitHub([]byte(WebhookSecret), body) // "sha256=<hex HMAC>", the form both providers use
	if d.Provider == "jira" {
		req.Header.Set("User-Agent", "Atlassian Webhook HTTP Client")
		req.Header.Set(idempotency.HeaderJiraWebhookID, d.ID)
		req.Header.Set(idempotency.HeaderJiraSignature, sig)
		if attempt > 0 {
			req.Header.Set(idempotency.HeaderJiraRetry, strconv.Itoa(attempt))
		}
	} else {
		req.Header.Set("User-Agent", "GitHub-Hookshot/7b0b1f3")
		req.Header.Set(idempotency.HeaderGitHubEvent, d.EventType)
		req.Header.Set(idempotency.HeaderGitHubDelivery, d.ID)
		req.Header.Set(idempotency.HeaderGitHubHookID, strconv.Itoa(ghHookID))
		req.Header.Set(idempotency.HeaderGitHubSignature, sig)
	}
	resp, err := p.Client.Do(req)
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
