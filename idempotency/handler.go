package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Handler is the webhook endpoint: an http.Handler that runs a side effect at
// most once per idempotency key while the store remembers the key, and
// answers 2xx only after the side effect is durable.
//
// For each POST it:
//  1. reads the body within Options.ReadTimeout (408 after it, the
//     connection closed), limits it (413), verifies the signature over the
//     body as sent (401), checks the content type (415), reads the key,
//     decodes a form-encoded payload, checks the payload is a JSON object
//     in valid UTF-8 and reads the event type (400).
//     A rejected request claims nothing and publishes nothing.
//  2. answers 200 without publishing an event type it ignores (GitHub's
//     "ping", Options.Ignore), finds the partition key (422 without one),
//     answers 503 at once when Options.MaxInFlight deliveries are in
//     flight already, and runs Options.Check: a Reject answers its 4xx,
//     ErrIgnored 200, any other error 503. None of these claims or
//     publishes anything.
//  3. claims the key ([Do]). A done key replays its stored 2xx with the
//     header Idempotent-Replayed: true; a pending key is answered 503 with
//     Retry-After; a key reused with another payload, 422; a store error,
//     503 with Retry-After.
//  4. runs the side effect. On success it answers 202 and then completes
//     the key with that response; on failure it answers 503 with
//     Retry-After (or, for a *RejectError, that permanent 4xx with its
//     reason) and then releases the key, unless the failure wraps
//     ErrOutcomeUnknown: the side effect may have happened, and the key
//     stays pending until its PendingTTL.
//
// Every answer comes within Options.AnswerTimeout of the start: a side
// effect still running then is answered 503 with Connection: close while
// it goes on in ServeHTTP's goroutine (the client's next request comes on
// a new connection rather than wait behind it), its claim is extended
// every third of PendingTTL while it runs (when the store is an
// [Extender]), and its key is completed or released when it ends, so a
// redelivery after a late success replays the 202 and one after a late
// failure runs it once.
//
// Writing "done" after the answer costs nothing in safety: a 2xx is sent
// only once the side effect is durable, and a complete that is lost (the
// process dies, the store fails) leaves the key pending until its TTL; a
// redelivery then runs the side effect again, a duplicate that downstream
// deduplication drops.
//
// Served by net/http's server, ServeHTTP returns once the answer is sent
// and writes "done" in a goroutine of its own, so that the keep-alive
// connection carries the client's next request at once instead of after
// one more store round trip; the delivery keeps its MaxInFlight slot until
// the key is done. Until then a duplicate reaching this Handler replays the
// answer, and one reaching another instance finds the key pending (503,
// Retry-After) and replays on its retry. [Handler.Close] waits for those
// goroutines: call it after http.Server.Shutdown. Called in process
// (without net/http's server), ServeHTTP settles the key before it
// returns. A failed side effect's key is released before ServeHTTP
// returns, so that a retry can claim it at once.
//
// Only transient failures answer 5xx. Jira Cloud retries them (and 408,
// 409, 425, 429) for about 30 minutes; GitHub never retries on its own, so a
// GitHub delivery answered 503 stays failed until it is redelivered (package
// githubredeliver does that through the REST API, within GitHub's 3 days).
//
// A duplicate of a pending key gets 503 rather than 409 because the first
// delivery may still fail and be released: the duplicate must then be
// retried, and 5xx with Retry-After is the one answer every sender reads as
// "try again later".
//
// A Handler is safe for concurrent use.
type Handler struct {
	store  Store
	effect Func
	opts   Options
	ignore map[string]bool
	parser parser
	slots  chan struct{} // one per delivery in flight, MaxInFlight
	m      handlerMetrics

	settler settler
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that claims keys in store and runs effect.
// It fails with ErrInvalidOptions without store, effect, or Options.Provider (or
// Options.Key).
func NewHandler(store Store, effect Func, opts Options) (*Handler, error) {
	if store == nil || effect == nil {
		return nil, fmt.Errorf("%w: store and effect are required", ErrInvalidOptions)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newHandlerMetrics(opts.MeterProvider)
	if err != nil {
		return nil, err
	}
	ignore := make(map[string]bool)
	for _, e := range append(append([]string(nil), opts.Provider.Ignore...), opts.Ignore...) {
		ignore[e] = true
	}
	return &Handler{
		store:  store,
		effect: effect,
		opts:   opts,
		ignore: ignore,
		parser: parser{maxBody: opts.MaxBodyBytes, key: opts.Key, verify: opts.Verify, source: opts.Source, provider: opts.Provider},
		slots:  make(chan struct{}, opts.MaxInFlight),
		m:      m,
	}, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.opts.Now()
	a := &answer{w: w, now: h.opts.Now}
	h.serve(a, r, time.Now())
	if a.status == 0 { // every path answers; this keeps the promise if one did not
		h.retryLater(r.Context(), a, "unanswered", "", nil, "delivery not answered, retry later")
	}
	h.m.duration.Record(r.Context(), a.at.Sub(start).Seconds(), h.m.statusOpt(a.status).rec...)
}

func (h *Handler) serve(a *answer, r *http.Request, start time.Time) {
	if r.Method != http.MethodPost {
		h.m.reject(r.Context(), "method")
		a.text(http.StatusMethodNotAllowed, "method not allowed", "Allow", http.MethodPost)
		return
	}
	body := r.Body
	if body == nil { // a client-style request handed to ServeHTTP in process
		body = http.NoBody
	}
	rc := http.NewResponseController(a.w)
	deadlines := rc.SetReadDeadline(start.Add(h.opts.ReadTimeout)) == nil
	d, err := h.parser.parse(r.Header, http.MaxBytesReader(a.w, body, h.opts.MaxBodyBytes), r.ContentLength)
	if deadlines && err == nil {
		// The body is read: lift the deadline, or the server's check for
		// a client that hangs up would fail on it while the side effect
		// runs. After an error it stays: net/http reads what is left of
		// the body before closing, and a slow client must not hold that.
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		status, reason := rejectStatus(err)
		h.m.reject(r.Context(), reason)
		if status == http.StatusRequestTimeout {
			a.text(status, fmt.Sprintf("body not received within %v", h.opts.ReadTimeout), "Connection", "close")
			return
		}
		a.text(status, err.Error())
		return
	}
	if h.ignore[d.Event] {
		h.m.ignored.Add(r.Context(), 1, h.m.opt("reason", "event").add...)
		a.text(http.StatusOK, "event "+d.Event+" ignored")
		return
	}
	if p := h.opts.Provider.Partition; p != nil {
		if d.Partition, err = p(d.Event, d.Body); err != nil {
			h.m.reject(r.Context(), "partition")
			a.text(http.StatusUnprocessableEntity, err.Error())
			return
		}
	}
	select {
	case h.slots <- struct{}{}:
	default:
		h.m.reject(r.Context(), "busy")
		h.retryLater(r.Context(), a, "busy", d.Key, nil, "gateway busy, retry later")
		return
	}
	held := true
	defer func() {
		if held {
			<-h.slots
		}
	}()

	// Store calls and the side effect outlive a client that hangs up: a
	// claim must be completed or released, never left to its TTL. So ctx
	// is the request's without its cancellation, and each step's context
	// is bounded by the answer's deadline as well as its own timeout
	// (within): one timer a step, not a context of the answer's deadline
	// for them all to descend from. Settling the key comes after the answer
	// and has StoreTimeout of its own ([Do]).
	ctx := context.WithoutCancel(r.Context())
	deadline := start.Add(h.opts.AnswerTimeout)
	if h.opts.Check != nil {
		chctx, cancel := context.WithDeadline(ctx, deadline)
		err := h.opts.Check(chctx, d)
		cancel()
		if err != nil {
			var rej *RejectError
			switch {
			case errors.As(err, &rej):
				h.m.reject(ctx, "check")
				a.text(clampReject(rej.Status), rej.Reason)
			case errors.Is(err, ErrIgnored):
				h.m.ignored.Add(ctx, 1, h.m.opt("reason", "check").add...)
				a.text(http.StatusOK, err.Error())
			default:
				h.m.reject(ctx, "check_transient")
				h.retryLater(ctx, a, "check", d.Key, err, "check failed, retry later")
			}
			return
		}
	}

	fp := h.opts.Fingerprint(d)
	if h.replaySettling(ctx, a, d.Key, fp) {
		return
	}
	cctx, cancel := context.WithDeadline(ctx, within(deadline, h.opts.StoreTimeout))
	claim, err := h.store.Claim(cctx, d.Key, fp, h.opts.PendingTTL)
	cancel()
	var done *DoneError
	if err != nil {
		done = asDone(err)
	}
	switch {
	case err == nil:
	case done != nil:
		h.m.claim(ctx, "done")
		resp := done.Record.Response
		if resp.Status < 100 || resp.Status > 999 {
			// A damaged record (net/http panics on such a status).
			// The key is done, so the side effect is durable: answer
			// what Complete would have stored.
			h.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: done key has no valid stored response; replaying the default",
				slog.String("key", d.Key), slog.Int("status", resp.Status))
			resp = acceptedResponse(d.Key)
		}
		a.send(resp, HeaderReplayed, "true")
		return
	case errors.Is(err, ErrFingerprintMismatch):
		h.m.claim(ctx, "mismatch")
		a.text(http.StatusUnprocessableEntity, "idempotency key reused with a different payload")
		return
	case errors.Is(err, ErrPending):
		// Pending in the store may be this Handler writing "done" for a
		// delivery it answered after the check above.
		if h.replaySettling(ctx, a, d.Key, fp) {
			return
		}
		h.m.claim(ctx, "pending")
		h.retryLater(ctx, a, "pending", d.Key, nil, "delivery in progress")
		return
	case !time.Now().Before(deadline):
		// The answer's deadline passed before or during the claim (a
		// body read slowly, a store that did not answer in time).
		h.m.claim(ctx, "error")
		h.m.timeouts.Add(ctx, 1)
		h.retryLater(ctx, a, "claim_deadline", d.Key, err, "delivery timed out, retry later")
		return
	default:
		h.m.claim(ctx, "error")
		h.retryLater(ctx, a, "claim", d.Key, err, "idempotency store unavailable")
		return
	}

	// Claimed: the protocol of [Do], with "done" written after the answer
	// and off this goroutine (settle).
	h.m.claim(ctx, "claimed")
	fctx, cancel := context.WithDeadline(ctx, within(deadline, h.opts.SideEffectTimeout))
	resp, e, err := h.runAndAnswer(fctx, a, d, fp, claim)
	cancel()
	if errors.Is(err, ErrOutcomeUnknown) {
		// The side effect may have happened: a retry must not run it
		// again. The key stays pending until its TTL; retries until then
		// are answered 503.
		h.m.releases.Add(ctx, 1, h.m.opt("result", "held").add...)
		h.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: side effect's outcome unknown; key held until its pending TTL",
			slog.String("key", d.Key), slog.Duration("pending_ttl", h.opts.PendingTTL), slog.Any("error", err))
		return
	}
	if err != nil {
		// runAndAnswer logged the failure with its answer. Released
		// before returning, so that a retry can claim the key at once.
		sctx, cancel := context.WithTimeout(ctx, h.opts.StoreTimeout)
		rerr := h.store.Release(sctx, claim)
		cancel()
		h.released(ctx, d.Key, rerr)
		return
	}
	held = false // settle frees the slot once the key is done
	h.settle(ctx, claim, resp, e)
}

// within is the deadline of a step that takes at most d from now and ends
// by the answer's deadline at the latest.
func within(deadline time.Time, d time.Duration) time.Time {
	if t := time.Now().Add(d); t.Before(deadline) {
		return t
	}
	return deadline
}

// runAndAnswer runs the side effect and answers the request as soon as its
// outcome is known, or at ctx's deadline (the answer's, or the side
// effect's timeout) if it is still running then; it returns the side
// effect's outcome for the key to be completed or released, and on success
// the settler's entry of the key, made before the answer. ctx must end by
// its deadline only (serve cancels it after runAndAnswer returns).
func (h *Handler) runAndAnswer(ctx context.Context, a *answer, d Delivery, fingerprint string, c Claim) (Response, *settling, error) {
	// The deadline's answer is a callback beside the side effect, not a
	// wait on it: a Func may overrun its ctx (an idempotent producer waits
	// for a batch in flight), and the answer must not wait for it. The side
	// effect runs in this goroutine, which spares each delivery a goroutine
	// and a hop through the scheduler. The callback is a timer at ctx's
	// deadline, which is when ctx ends: cheaper than context.AfterFunc,
	// which registers with ctx and allocates thrice as much.
	fired := make(chan struct{})
	at, _ := ctx.Deadline()
	var k *keeper // set by the callback
	timer := time.AfterFunc(time.Until(at), func() {
		defer close(fired)
		// The connection closes after this answer: the side effect goes
		// on in ServeHTTP's goroutine, and a keep-alive client's next
		// request must not wait behind it; it comes on a new connection.
		if h.retryLater(ctx, a, "answer_deadline", d.Key, nil, "delivery timed out, retry later", "Connection", "close") {
			h.m.timeouts.Add(ctx, 1)
		}
		// The side effect may run on until its outcome is known: keep
		// the key pending meanwhile.
		k = h.keep(context.WithoutCancel(ctx), c)
	})
	err := h.run(ctx, d)
	if !timer.Stop() {
		<-fired // the callback is ours: let it finish before the key is settled
	}
	k.stop()
	var rej *RejectError
	if err != nil {
		rej = asReject(err)
	}
	switch {
	case err == nil:
		resp := acceptedResponse(d.Key)
		e := h.settler.remember(d.Key, fingerprint, resp)
		a.send(resp)
		return resp, e, nil
	case rej != nil:
		// Permanent: the side effect can never take this delivery (too
		// large for the topic, say). Released, so a fixed pipeline can
		// take a redelivery.
		reason := "effect"
		if clampReject(rej.Status) == http.StatusRequestEntityTooLarge {
			reason = "too_large"
		}
		h.m.reject(ctx, reason)
		a.text(clampReject(rej.Status), rej.Reason)
	default:
		if !h.retryLater(ctx, a, "effect", d.Key, err, "delivery failed, retry later") {
			// Answered 503 at the deadline already; the failure that
			// followed is worth its own line.
			h.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: side effect failed after the answer deadline; releasing",
				slog.String("key", d.Key), slog.Any("error", err))
		}
	}
	return Response{}, nil, err
}

// asDone and asReject are errors.As for one type each. The variable whose
// address errors.As takes lives on the heap; declared in the caller, it
// would be allocated for every request, errors or not.
func asDone(err error) *DoneError {
	var done *DoneError
	if errors.As(err, &done) {
		return done
	}
	return nil
}

func asReject(err error) *RejectError {
	var rej *RejectError
	if errors.As(err, &rej) {
		return rej
	}
	return nil
}

func (h *Handler) run(ctx context.Context, d Delivery) error {
	start := h.opts.Now()
	err := h.effect(ctx, d)
	result := "ok"
	if err != nil {
		result = "error"
	}
	h.m.effect.Record(ctx, h.opts.Now().Sub(start).Seconds(), h.m.opt("result", result).rec...)
	return err
}

func (h *Handler) released(ctx context.Context, key string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrClaimLost):
		result = "lost"
		h.m.lost(ctx, "release")
	default:
		// The key stays pending until PendingTTL: retries get 503 until
		// then, and the one after it runs the side effect.
		result = "error"
		h.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: release failed; key stays pending until its TTL",
			slog.String("key", key), slog.Any("error", err))
	}
	h.m.releases.Add(ctx, 1, h.m.opt("result", result).add...)
}

// retryLater answers 503 with Retry-After, unless the request was answered
// already, and logs why: every 503 has a line naming its reason (one of
// unanswered, busy, check, pending, claim_deadline, claim, answer_deadline,
// effect) and the key, so an operator can tell an overloaded gateway from a
// failing store or broker. A duplicate of a pending key is the protocol at
// work and logs at Info; every other reason at Warn. It reports whether it
// answered.
func (h *Handler) retryLater(ctx context.Context, a *answer, reason, key string, err error, msg string, header ...string) bool {
	if !a.text(http.StatusServiceUnavailable, msg, append([]string{"Retry-After", h.retryAfterSecs()}, header...)...) {
		return false
	}
	level := slog.LevelWarn
	if reason == "pending" {
		level = slog.LevelInfo
	}
	attrs := []slog.Attr{slog.String("reason", reason), slog.String("key", key)}
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	h.opts.Logger.LogAttrs(ctx, level, "idempotency: answered 503, retry later", attrs...)
	return true
}

func (h *Handler) retryAfterSecs() string {
	return strconv.Itoa(int((h.opts.RetryAfter + time.Second - 1) / time.Second))
}
