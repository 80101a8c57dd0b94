package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
)

// settler writes "done" for the keys whose side effect succeeded, after
// their answer and off the request's goroutine, so that the connection is
// free for its next request while Complete makes its round trip to the
// store: over HTTP/1.1 keep-alive, a handler that waited for it would hold
// the client's next request behind it.
//
// Until Complete returns, the settler remembers the key's response: a
// duplicate that reaches this Handler in that window replays it instead of
// finding the key pending in the store. Another gateway instance finds it
// pending and answers 503 with Retry-After; its retry replays once the key
// is done.
type settler struct {
	mu     sync.Mutex
	keys   map[string]*settling
	closed bool           // after Close: settle in the request's goroutine
	wg     sync.WaitGroup // the goroutines writing "done"
}

// settling is a key answered 2xx whose "done" is being written.
type settling struct {
	fingerprint string
	resp        Response
}

// remember records that key's side effect is durable, before its answer is
// sent, and returns the entry to forget once the key is settled.
func (s *settler) remember(key, fingerprint string, resp Response) *settling {
	e := &settling{fingerprint: fingerprint, resp: resp}
	s.mu.Lock()
	if s.keys == nil {
		s.keys = make(map[string]*settling)
	}
	s.keys[key] = e
	s.mu.Unlock()
	return e
}

// forget drops e, unless a later claim of the same key replaced it.
func (s *settler) forget(key string, e *settling) {
	s.mu.Lock()
	if s.keys[key] == e {
		delete(s.keys, key)
	}
	s.mu.Unlock()
}

// lookup returns the entry of a key being settled, if any.
func (s *settler) lookup(key string) (*settling, bool) {
	s.mu.Lock()
	e, ok := s.keys[key]
	s.mu.Unlock()
	return e, ok
}

// replaySettling answers a duplicate of a key this Handler answered 2xx and
// is still marking done: the replay of its response, or 422 for another
// payload, as the store would answer once the key is done. It reports
// whether it answered.
func (h *Handler) replaySettling(ctx context.Context, a *answer, key, fingerprint string) bool {
	e, ok := h.settler.lookup(key)
	if !ok {
		return false
	}
	if e.fingerprint != fingerprint {
		h.m.claim(ctx, "mismatch")
		a.text(http.StatusUnprocessableEntity, "idempotency key reused with a different payload")
		return true
	}
	h.m.claim(ctx, "done")
	a.send(e.resp, HeaderReplayed, "true")
	return true
}

// settle completes c with resp and then frees the delivery's MaxInFlight
// slot, which it owns from now on. Complete is bounded by StoreTimeout; ctx
// has no cancellation (serve's: the request's without it).
//
// It runs in a goroutine of its own when net/http's server serves the
// request (ctx carries http.ServerContextKey), as there a connection waits
// for ServeHTTP to return, and Close waits for those goroutines. Called in
// process, or after Close, it completes the key before it returns: nothing
// waits behind ServeHTTP there, and its caller may look at the store next.
func (h *Handler) settle(ctx context.Context, c Claim, resp Response, e *settling) {
	s := &h.settler
	s.mu.Lock()
	async := !s.closed && ctx.Value(http.ServerContextKey) != nil
	if async {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if !async {
		h.complete(ctx, c, resp, e)
		return
	}
	go func() {
		defer s.wg.Done()
		h.complete(ctx, c, resp, e)
	}()
}

// complete is settle's work: Complete, forget the settler's entry, free
// the slot.
func (h *Handler) complete(ctx context.Context, c Claim, resp Response, e *settling) {
	defer func() { <-h.slots }()
	cctx, cancel := context.WithTimeout(ctx, h.opts.StoreTimeout)
	err := h.store.Complete(cctx, c, resp, h.opts.DoneTTL)
	cancel()
	if e != nil {
		h.settler.forget(c.Key, e)
	}
	if err != nil {
		// The side effect is durable and was answered 2xx (or 503 at
		// the deadline) already. The key stays pending until its TTL;
		// a duplicate after it runs the side effect again, which
		// downstream deduplication absorbs. Nothing is lost.
		if errors.Is(err, ErrClaimLost) {
			h.m.lost(ctx, "complete")
		}
		h.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: complete failed after the side effect; a retry may duplicate",
			slog.String("key", c.Key), slog.Any("error", err))
	}
}

// Close waits until every key answered 2xx is marked done in the store (or
// its Complete failed, within StoreTimeout), so that a gateway shutting
// down does not leave keys pending that a redelivery would publish again.
// Call it after the server stopped handing requests to the Handler
// (http.Server.Shutdown returned). A request served after Close settles its
// key before ServeHTTP returns. Close always returns nil.
func (h *Handler) Close() error {
	s := &h.settler
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
