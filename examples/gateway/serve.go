package main

import (
	"context"
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

// cutWaiting cuts the connections that have sent no byte of a request
// yet: Shutdown closes only idle ones and would wait for these. A request
// already on its way is left to finish within its own deadlines
// (ReadHeaderTimeout for the headers, -read-timeout for the body, after
// which the Handler answers 408): a delivery whose body is being sent at
// SIGTERM is answered as usual, and a slow reader is cut at its deadline,
// well inside -shutdown-timeout.
func (t *connTracker) cutWaiting() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for c, s := range t.conns {
		if s == http.StateNew {
			_ = c.SetReadDeadline(now)
		}
	}
}
