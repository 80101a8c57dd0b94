// GitHub's REST API as the redeliverer uses it: listing a hook's deliveries
// page by page, requesting a redelivery, and waiting out rate limits.

package githubredeliver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/backoff"
)

// backoff is the wait after the requests-th redelivery request of a GUID:
// exponential, without jitter (the passes themselves are spaced by
// Interval).
func (r *Redeliverer) backoff(requests int) time.Duration {
	p := backoff.Policy{Initial: min(r.opts.InitialBackoff, r.opts.MaxBackoff), Max: r.opts.MaxBackoff, Multiplier: 2}
	return p.Delay(requests, nil)
}

// list returns the deliveries with an id above through that were delivered
// after cutoff, following the Link header's next cursor.
func (r *Redeliverer) list(ctx context.Context, through int64, cutoff time.Time) ([]delivery, error) {
	next := r.base.JoinPath(r.hook.path, "deliveries")
	next.RawQuery = url.Values{"per_page": {strconv.Itoa(r.opts.PerPage)}}.Encode()
	var out []delivery
	for next != nil {
		resp, body, err := r.do(ctx, http.MethodGet, next)
		if err != nil {
			return nil, err
		}
		var page []delivery
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("githubredeliver: GET %s: decode: %w", next.Redacted(), err)
		}
		stop := len(page) == 0
		for _, d := range page {
			// Newest first: everything past this one is older.
			if d.ID <= through || d.DeliveredAt.Before(cutoff) {
				stop = true
				break
			}
			out = append(out, d)
		}
		if stop {
			break
		}
		if next, err = r.nextLink(resp.Header.Get("Link")); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// nextLink returns the rel="next" URL of a Link header, or nil. It refuses
// a URL on another host than BaseURL's: the token must not leave it.
func (r *Redeliverer) nextLink(link string) (*url.URL, error) {
	for part := range strings.SplitSeq(link, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		if !ok || !strings.Contains(params, `rel="next"`) {
			continue
		}
		u, err := url.Parse(strings.Trim(strings.TrimSpace(target), "<>"))
		if err != nil {
			return nil, fmt.Errorf("githubredeliver: Link header %q: %w", link, err)
		}
		u = r.base.ResolveReference(u)
		if u.Host != r.base.Host || u.Scheme != r.base.Scheme {
			return nil, fmt.Errorf("githubredeliver: Link header points to %s, not %s; refusing to send the token there", u.Host, r.base.Host)
		}
		return u, nil
	}
	return nil, nil
}

func (r *Redeliverer) redeliver(ctx context.Context, id int64) error {
	u := r.base.JoinPath(r.hook.path, "deliveries", strconv.FormatInt(id, 10), "attempts")
	_, _, err := r.do(ctx, http.MethodPost, u)
	return err
}

// do sends one request, waiting out rate limits up to MaxWait, and returns
// a 2xx response with its body.
func (r *Redeliverer) do(ctx context.Context, method string, u *url.URL) (*http.Response, []byte, error) {
	for {
		if now := r.opts.Now(); now.Before(r.exhausted) {
			if err := r.wait(ctx, now, r.exhausted); err != nil {
				return nil, nil, err
			}
		}
		token := r.opts.Token
		if r.opts.TokenFunc != nil {
			t, err := r.opts.TokenFunc(ctx)
			if err != nil {
				return nil, nil, fmt.Errorf("githubredeliver: token: %w", err)
			}
			token = t
		}
		req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
		if err != nil {
			return nil, nil, fmt.Errorf("githubredeliver: %w", err)
		}
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
		resp, err := r.opts.HTTPClient.Do(req)
		if err != nil {
			return nil, nil, fmt.Errorf("githubredeliver: %s %s: %w", method, u.Redacted(), err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("githubredeliver: %s %s: read: %w", method, u.Redacted(), err)
		}
		now := r.opts.Now()
		limited := resp.StatusCode == http.StatusTooManyRequests ||
			resp.StatusCode == http.StatusForbidden && isRateLimit(resp.Header, body)
		if resp.StatusCode/100 == 2 {
			// Out of requests: the next one would be refused, so it
			// waits for the reset; this answer is good.
			if resp.Header.Get("X-RateLimit-Remaining") == "0" {
				if until, ok := resetTime(resp.Header); ok && until.After(now) {
					r.exhausted = until
				}
			}
			return resp, body, nil
		}
		if !limited {
			var msg struct {
				Message string `json:"message"`
			}
			_ = json.Unmarshal(body, &msg)
			return nil, nil, &APIError{Method: method, URL: u.Redacted(), Status: resp.StatusCode, Message: msg.Message}
		}
		until := now.Add(secondaryWait)
		if s := resp.Header.Get("Retry-After"); s != "" {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 {
				until = now.Add(time.Duration(n) * time.Second)
			}
		} else if t, ok := resetTime(resp.Header); ok && resp.Header.Get("X-RateLimit-Remaining") == "0" {
			until = t
		}
		if err := r.wait(ctx, now, until); err != nil {
			return nil, nil, err
		}
	}
}

// wait sleeps until until, or fails with a *RateLimitError when that is
// more than MaxWait away.
func (r *Redeliverer) wait(ctx context.Context, now, until time.Time) error {
	d := until.Sub(now)
	if d > r.opts.MaxWait {
		return &RateLimitError{Until: until}
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// isRateLimit tells a 403 that is a rate limit from one that is a
// permission error: a rate limit has no requests remaining, a Retry-After,
// or says so in its message.
func isRateLimit(h http.Header, body []byte) bool {
	if h.Get("X-RateLimit-Remaining") == "0" || h.Get("Retry-After") != "" {
		return true
	}
	return strings.Contains(strings.ToLower(string(body)), "rate limit")
}

func resetTime(h http.Header) (time.Time, bool) {
	n, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
