package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Readiness probing: how often, and how long one probe may take.
const (
	probeInterval = time.Second
	probeTimeout  = time.Second
)

// probe checks that one dependency answers.
type probe struct {
	name  string
	check func(ctx context.Context) error
}

// readiness is what /readyz answers: ready while every probe passed its
// last run, and not ready from the first failure (a broker killed or
// stopped, Redis unreachable) until the probes pass again, or for good once
// shutting down.
type readiness struct {
	probes   []probe
	log      *slog.Logger
	stopping atomic.Bool
	failing  atomic.Pointer[string] // nil: ready; else what failed
}

func newReadiness(probes []probe, log *slog.Logger) *readiness {
	r := &readiness{probes: probes, log: log}
	starting := "starting"
	r.failing.Store(&starting)
	return r
}

// run probes until ctx ends.
func (r *readiness) run(ctx context.Context) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		r.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *readiness) probe(ctx context.Context) {
	var failed []string
	for _, p := range r.probes {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := p.check(pctx)
		cancel()
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", p.name, err))
		}
	}
	was := r.failing.Load()
	if len(failed) == 0 {
		if was != nil {
			r.log.Info("ready: Kafka and the store answer")
		}
		r.failing.Store(nil)
		return
	}
	msg := strings.Join(failed, "; ")
	if was == nil || *was != msg {
		r.log.Warn("not ready: cannot publish", "reason", msg)
	}
	r.failing.Store(&msg)
}

func (r *readiness) stop() { r.stopping.Store(true) }

func (r *readiness) serve(w http.ResponseWriter, _ *http.Request) {
	switch f := r.failing.Load(); {
	case r.stopping.Load():
		http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
	case f != nil:
		http.Error(w, "not ready: "+*f, http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ready")
	}
}

// connTracker knows the server's open connections, so a shutdown can cut
// the ones still sending their request.
type connTracker struct {
	mu    sync.Mutex
	conns map[net.Conn]http.ConnState
}

func newConnTracker() *connTracker { return &connTracker{conns: map[net.Conn]http.ConnState{}} }

// track is http.Server.ConnState.
func (t *connTracker) track(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, c)
	default:
		t.conns[c] = s
	}
}

// newConnGrace is how long a connection the server has not read from yet
// may still take to send its request's headers once the gateway is
// shutting down. A provider sends them at once; what it sent before the
// SIGTERM is in the socket already and is read at once.
const newConnGrace = 500 * time.Millisecond

// readWaiting gives the connections the server has read no request from
// yet newConnGrace to send one, and returns once each has (it is then
// active, and Shutdown waits for its answer) or has been cut at that
// deadline. It must come before Shutdown: net/http drops, unanswered, a
// request it finishes reading after Shutdown began. They are not cut at
// once either: one whose request is already in its socket, unread, would
// be reset with its delivery (a read under a deadline in the past fails
// even with data waiting). A request already on its way is left to finish
// within its own deadlines (-read-timeout for the body, after which the
// Handler answers 408): a delivery whose body is being sent at SIGTERM is
// answered as usual, and a slow reader is cut at its deadline, well
// inside -shutdown-timeout.
func (t *connTracker) readWaiting() {
	at := time.Now().Add(newConnGrace)
	t.mu.Lock()
	for c, s := range t.conns {
		if s == http.StateNew {
			_ = c.SetReadDeadline(at)
		}
	}
	t.mu.Unlock()
	// net/http's ConnState reports no event to wait on but the states:
	// look every few milliseconds, at most until the deadline (and the
	// closes it causes) passed.
	for end := at.Add(100 * time.Millisecond); time.Now().Before(end) && t.waiting(); {
		time.Sleep(5 * time.Millisecond)
	}
}

// waiting reports whether a connection is still in StateNew.
func (t *connTracker) waiting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.conns {
		if s == http.StateNew {
			return true
		}
	}
	return false
}

// drainWindow is how long a shutting-down gateway goes on accepting the
// connections the kernel has queued for it.
const drainWindow = 100 * time.Millisecond

// errDrained ends Serve once drainListener has taken every connection the
// kernel had queued.
var errDrained = errors.New("listener drained")

// drainListener is the gateway's listener. Closing a listener resets the
// connections still queued in the kernel's backlog, whose clients may
// have sent their whole delivery: at SIGTERM, drain makes Accept take
// what is queued (and what arrives within drainWindow) before Serve ends,
// so that the server answers those too.
type drainListener struct {
	*net.TCPListener
	draining atomic.Bool
}

// Accept implements net.Listener.
func (l *drainListener) Accept() (net.Conn, error) {
	c, err := l.TCPListener.Accept()
	var ne net.Error
	if err != nil && l.draining.Load() && errors.As(err, &ne) && ne.Timeout() {
		return nil, errDrained // not a timeout: Serve returns it
	}
	return c, err
}

// drain accepts for drainWindow more, then ends Serve with errDrained.
func (l *drainListener) drain() {
	l.draining.Store(true)
	_ = l.SetDeadline(time.Now().Add(drainWindow))
}
