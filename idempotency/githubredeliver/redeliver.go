package githubredeliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/internal/meter"
)

// Defaults of Options.
const (
	// DefaultBaseURL is GitHub's REST API. GitHub Enterprise Server's is
	// https://HOST/api/v3.
	DefaultBaseURL = "https://api.github.com"
	// DefaultWindow is how far back GitHub lets deliveries be redelivered.
	DefaultWindow = 72 * time.Hour
	// DefaultInterval is Run's pause between passes.
	DefaultInterval = time.Minute
	// DefaultInitialBackoff is the wait after a redelivery request before
	// the same GUID is requested again without news; it doubles with every
	// request, up to DefaultMaxBackoff.
	DefaultInitialBackoff = time.Minute
	DefaultMaxBackoff     = time.Hour
	// DefaultMaxWait bounds a rate-limit wait inside a pass.
	DefaultMaxWait = time.Minute
	// DefaultPerPage is the page size of the deliveries list (GitHub's
	// maximum).
	DefaultPerPage = 100
	// secondaryWait is GitHub's advice after a secondary rate limit
	// without Retry-After: wait at least a minute.
	secondaryWait = time.Minute
	// windowMargin keeps a request clear of the window's edge, where
	// GitHub's clock and ours could disagree.
	windowMargin = 5 * time.Minute
)

// Errors returned by this package.
var (
	// ErrInvalidOptions reports options New refuses.
	ErrInvalidOptions = errors.New("githubredeliver: invalid options")
	// ErrCorrupt reports a saved state that cannot be read.
	ErrCorrupt = errors.New("githubredeliver: corrupt state")
	// ErrRateLimited matches a *RateLimitError.
	ErrRateLimited = errors.New("githubredeliver: rate limited")
)

// RateLimitError ends a pass that would have to wait longer than
// Options.MaxWait for GitHub's rate limit. Run waits until Until.
type RateLimitError struct {
	Until time.Time
}

// Error implements error.
func (e *RateLimitError) Error() string {
	return fmt.Sprintf("githubredeliver: rate limited until %s", e.Until.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrRateLimited.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// APIError is a GitHub answer that is neither success nor a rate limit.
type APIError struct {
	Method, URL string
	Status      int
	Message     string
}

// Error implements error.
func (e *APIError) Error() string {
	return fmt.Sprintf("githubredeliver: %s %s: %d %s", e.Method, e.URL, e.Status, e.Message)
}

// Hook names the webhook whose deliveries are watched.
type Hook struct {
	path string // e.g. /repos/o/r/hooks/42
}

// RepoHook is the webhook id of repository owner/repo.
func RepoHook(owner, repo string, id int64) Hook {
	return Hook{path: "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(repo) + "/hooks/" + strconv.FormatInt(id, 10)}
}

// OrgHook is the webhook id of organization org.
func OrgHook(org string, id int64) Hook {
	return Hook{path: "/orgs/" + url.PathEscape(org) + "/hooks/" + strconv.FormatInt(id, 10)}
}

// AppHook is the webhook of the GitHub App whose JWT Options.TokenFunc
// supplies.
func AppHook() Hook { return Hook{path: "/app/hook"} }

// String returns the hook's API path.
func (h Hook) String() string { return h.path }

// Options configures a Redeliverer. Token or TokenFunc is required; every
// other zero value is valid.
type Options struct {
	// Token is a personal access token (or an installation token) sent as
	// "Authorization: Bearer". Repository hooks need admin:repo_hook or
	// "Webhooks" read and write; organization hooks admin:org_hook.
	Token string
	// TokenFunc supplies the token for each request instead of Token: a
	// GitHub App's JWT (for AppHook), or a refreshed installation token.
	TokenFunc func(ctx context.Context) (string, error)
	// BaseURL is the REST API's root. Default DefaultBaseURL.
	BaseURL string
	// HTTPClient sends the requests. Default: a client with a 30 s timeout.
	HTTPClient *http.Client
	// State keeps the cursor and pending GUIDs. Default: a MemoryState.
	State State
	// Window is how old a failed delivery may be and still be
	// redelivered. Default DefaultWindow (GitHub's 3 days).
	Window time.Duration
	// Interval is Run's pause between passes. Default DefaultInterval.
	Interval time.Duration
	// InitialBackoff and MaxBackoff space out requests for a GUID whose
	// redeliveries keep failing: after the n-th request the next waits
	// InitialBackoff<<(n-1), at most MaxBackoff, unless a failed attempt
	// newer than the request is listed (then the next pass requests
	// again). Default: DefaultInitialBackoff and DefaultMaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// MaxWait bounds a rate-limit wait inside a pass. Default
	// DefaultMaxWait.
	MaxWait time.Duration
	// PerPage is the list's page size, 1..100. Default DefaultPerPage.
	PerPage int
	// Retryable reports whether a failed delivery's status code is worth
	// a redelivery. Default: 0 (no answer), 408, 409, 425, 429 and 5xx;
	// any other 4xx is the gateway's final answer.
	Retryable func(statusCode int) bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives each redelivery request and every expired GUID.
	// Default: discards.
	Logger *slog.Logger
	// MeterProvider receives githubredeliver.guids, GUIDs by outcome of a
	// pass: redelivered, succeeded, rejected, expired (alert on expired:
	// those events are lost). Default: no-op.
	MeterProvider metric.MeterProvider
}

// DefaultRetryable is the default Options.Retryable.
func DefaultRetryable(code int) bool {
	switch {
	case code == 0, code == 408, code == 409, code == 425, code == 429, code >= 500:
		return true
	}
	return false
}

// Result is what one pass did.
type Result struct {
	// Listed is the number of deliveries listed.
	Listed int
	// Redelivered are the GUIDs whose redelivery was requested.
	Redelivered []string
	// Waiting are GUIDs still failing whose next request waits for its
	// backoff or for a requested redelivery to show up.
	Waiting []string
	// Succeeded are GUIDs seen failing (in this pass or an earlier one)
	// and then succeeding in this pass.
	Succeeded []string
	// Rejected are GUIDs whose newest attempt failed with a status that is
	// not Retryable (the gateway rejected the payload for good).
	Rejected []string
	// Expired are GUIDs that failed and can no longer be redelivered: the
	// events are lost unless recovered another way.
	Expired []string
}

// Redeliverer redelivers one hook's failed deliveries. See the package doc.
type Redeliverer struct {
	hook  Hook
	base  *url.URL
	opts  Options
	guids metric.Int64Counter
	// exhausted is the reset time of a primary rate limit that a
	// successful response said is used up: the next request waits for it.
	exhausted time.Time
}

// New returns a Redeliverer of hook.
func New(hook Hook, opts Options) (*Redeliverer, error) {
	if hook.path == "" {
		return nil, fmt.Errorf("%w: no hook (RepoHook, OrgHook or AppHook)", ErrInvalidOptions)
	}
	if opts.Token == "" && opts.TokenFunc == nil {
		return nil, fmt.Errorf("%w: Token or TokenFunc is required", ErrInvalidOptions)
	}
	if opts.BaseURL == "" {
		opts.BaseURL = DefaultBaseURL
	}
	base, err := url.Parse(strings.TrimSuffix(opts.BaseURL, "/"))
	if err != nil || base.Host == "" || (base.Scheme != "https" && base.Scheme != "http") {
		return nil, fmt.Errorf("%w: BaseURL %q", ErrInvalidOptions, opts.BaseURL)
	}
	if opts.PerPage < 0 || opts.PerPage > 100 {
		return nil, fmt.Errorf("%w: PerPage %d not in 1..100", ErrInvalidOptions, opts.PerPage)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"Window", &opts.Window, DefaultWindow},
		{"Interval", &opts.Interval, DefaultInterval},
		{"InitialBackoff", &opts.InitialBackoff, DefaultInitialBackoff},
		{"MaxBackoff", &opts.MaxBackoff, DefaultMaxBackoff},
		{"MaxWait", &opts.MaxWait, DefaultMaxWait},
	} {
		if *d.v < 0 {
			return nil, fmt.Errorf("%w: %s %v is negative", ErrInvalidOptions, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if opts.PerPage == 0 {
		opts.PerPage = DefaultPerPage
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if opts.State == nil {
		opts.State = &MemoryState{}
	}
	if opts.Retryable == nil {
		opts.Retryable = DefaultRetryable
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := meter.New(opts.MeterProvider, "idempotency/githubredeliver")
	guids := m.Counter("exactlyonce.githubredeliver.guids", "{delivery}",
		"GUIDs by outcome of a pass: redelivered, succeeded, rejected, expired.")
	if err := m.Err(); err != nil {
		return nil, fmt.Errorf("githubredeliver: metrics: %w", err)
	}
	return &Redeliverer{hook: hook, base: base, opts: opts, guids: guids}, nil
}

// Run runs a pass every Options.Interval until ctx ends, and returns
// ctx.Err() then. A pass that fails is logged and tried again at the next
// interval; a rate limit is waited out.
func (r *Redeliverer) Run(ctx context.Context) error {
	for {
		wait := r.opts.Interval
		res, err := r.Pass(ctx)
		var rl *RateLimitError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &rl):
			wait = max(wait, rl.Until.Sub(r.opts.Now()))
			r.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "githubredeliver: rate limited", slog.Time("until", rl.Until))
		case err != nil:
			r.opts.Logger.LogAttrs(ctx, slog.LevelError, "githubredeliver: pass failed", slog.String("hook", r.hook.path), slog.Any("error", err))
		default:
			r.opts.Logger.LogAttrs(ctx, slog.LevelDebug, "githubredeliver: pass",
				slog.Int("listed", res.Listed), slog.Int("redelivered", len(res.Redelivered)), slog.Int("waiting", len(res.Waiting)))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// delivery is one item of GitHub's deliveries list.
type delivery struct {
	ID          int64     `json:"id"`
	GUID        string    `json:"guid"`
	DeliveredAt time.Time `json:"delivered_at"`
	Redelivery  bool      `json:"redelivery"`
	Status      string    `json:"status"`
	StatusCode  int       `json:"status_code"`
	Event       string    `json:"event"`
}

func (d delivery) ok() bool { return d.StatusCode >= 200 && d.StatusCode <= 299 }

// Pass lists the hook's deliveries newer than the state's cursor, requests
// the redelivery of every GUID that failed and never succeeded, and saves
// the state. A pass that fails part way saves what it did: GUIDs requested
// before the failure are not requested again before their backoff. A
// delivery GitHub answers 404 for does not stop the pass: it is asked for
// again after its backoff, the others are requested meanwhile, and the
// pass returns the 404s (*APIError) with its result.
func (r *Redeliverer) Pass(ctx context.Context) (Result, error) {
	snap, err := r.opts.State.Load(ctx)
	if err != nil {
		return Result{}, err
	}
	snap = snap.clone()
	now := r.opts.Now()
	cutoff := now.Add(-r.opts.Window)

	listed, err := r.list(ctx, snap.Through, cutoff)
	if err != nil {
		return Result{}, err
	}
	res := Result{Listed: len(listed)}

	// Oldest first, so a GUID's newest attempt is the last one folded.
	slices.SortFunc(listed, func(a, b delivery) int { return cmpInt64(a.ID, b.ID) })
	succeeded := make(map[string]bool)
	fresh := make(map[string]bool) // GUIDs with a failed attempt newer than their last request
	for _, d := range listed {
		if d.ID > snap.Through {
			snap.Through = d.ID
		}
		if d.ok() {
			succeeded[d.GUID] = true
			continue
		}
		p, known := snap.Pending[d.GUID]
		if known && d.ID <= p.DeliveryID {
			continue
		}
		p.DeliveryID, p.DeliveredAt, p.StatusCode = d.ID, d.DeliveredAt, d.StatusCode
		snap.Pending[d.GUID] = p
		if p.Requests == 0 || d.ID > p.RequestedThrough {
			fresh[d.GUID] = true
		}
	}
	for guid := range succeeded {
		if _, ok := snap.Pending[guid]; ok {
			res.Succeeded = append(res.Succeeded, guid)
		}
		delete(snap.Pending, guid)
	}
	slices.Sort(res.Succeeded)

	guids := slices.Sorted(func(yield func(string) bool) {
		for g := range snap.Pending {
			if !yield(g) {
				return
			}
		}
	})
	var passErr, notFound error
	for _, guid := range guids {
		p := snap.Pending[guid]
		switch {
		case !r.opts.Retryable(p.StatusCode):
			res.Rejected = append(res.Rejected, guid)
			delete(snap.Pending, guid)
			r.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "githubredeliver: delivery rejected by the gateway for good; not redelivered",
				slog.String("guid", guid), slog.Int("status_code", p.StatusCode))
			continue
		case p.DeliveredAt.Before(cutoff.Add(windowMargin)):
			res.Expired = append(res.Expired, guid)
			delete(snap.Pending, guid)
			r.opts.Logger.LogAttrs(ctx, slog.LevelError, "githubredeliver: failed delivery left GitHub's redelivery window; the event is lost unless recovered by hand",
				slog.String("guid", guid), slog.Int64("delivery_id", p.DeliveryID), slog.Time("delivered_at", p.DeliveredAt))
			continue
		case passErr != nil, !fresh[guid] && now.Before(p.RequestedAt.Add(r.backoff(p.Requests))):
			res.Waiting = append(res.Waiting, guid)
			continue
		}
		if err := r.redeliver(ctx, p.DeliveryID); err != nil {
			res.Waiting = append(res.Waiting, guid)
			if apiErr, ok := errors.AsType[*APIError](err); ok && apiErr.Status == http.StatusNotFound {
				// This delivery alone is missing (or hidden from the token):
				// the others can still be redelivered, so the pass goes on.
				// It is asked for again after its backoff, and expires
				// with the window if it never comes back.
				p.Requests++
				p.RequestedAt = r.opts.Now()
				snap.Pending[guid] = p
				notFound = errors.Join(notFound, err)
				r.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "githubredeliver: delivery not found; asking again after its backoff",
					slog.String("guid", guid), slog.Int64("delivery_id", p.DeliveryID))
				continue
			}
			passErr = err
			continue
		}
		p.Requests++
		p.RequestedAt = r.opts.Now()
		p.RequestedThrough = snap.Through
		snap.Pending[guid] = p
		res.Redelivered = append(res.Redelivered, guid)
		r.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "githubredeliver: redelivery requested",
			slog.String("guid", guid), slog.Int64("delivery_id", p.DeliveryID), slog.Int("status_code", p.StatusCode), slog.Int("request", p.Requests))
	}
	for _, c := range []struct {
		outcome string
		n       int
	}{{"redelivered", len(res.Redelivered)}, {"succeeded", len(res.Succeeded)}, {"rejected", len(res.Rejected)}, {"expired", len(res.Expired)}} {
		if c.n > 0 {
			r.guids.Add(ctx, int64(c.n), metric.WithAttributes(attribute.String("outcome", c.outcome)))
		}
	}
	passErr = errors.Join(passErr, notFound)
	if err := r.opts.State.Save(context.WithoutCancel(ctx), snap); err != nil {
		return res, errors.Join(passErr, err)
	}
	return res, passErr
}
