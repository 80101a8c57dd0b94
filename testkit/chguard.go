package testkit

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// chGuard is a TCP proxy in the test process in front of the shared
// ClickHouse, so that a client that dies never resets a connection of the
// server's.
//
// clickhouse-local 26.7 aborts now and then when a client dies abruptly,
// most often during an LZ4-compressed insert: a client killed with
// SIGKILL while answers it has not read wait in its socket makes its
// kernel reset the connection, and the reset escapes clickhouse-local's
// TCP handler ("Terminate called for uncaught exception: Code: 210 ...
// Connection reset by peer", then signal 6): every test on the server
// loses it. Behind the guard the server sees a reset never: when the
// client's side ends, however it ends, the guard half-closes the server's
// side (the server reads an end of stream, as from a client that closed
// its socket), reads and discards what the server still answers until the
// server closes, and only then closes its own end, with nothing unread in
// it (a close with unread bytes would be a reset again). The server logs
// an unexpected end of stream and goes on. docs/testing.md has the
// measurement.
//
// When the server does not answer (it crashed), the guard calls revive
// before it gives up on a connection, so a Func child, which cannot start
// the test's servers, still finds the server again.
type chGuard struct {
	ln      net.Listener
	backend string
	revive  func(ctx context.Context) // may be nil
	wg      sync.WaitGroup
	proxyConns
}

// guardDrain bounds how long the guard waits for the server to close a
// connection whose client died: a query still running finishes first.
const guardDrain = 2 * time.Minute

// startCHGuard listens on a loopback port for connections to backend.
func startCHGuard(backend string, revive func(ctx context.Context)) (*chGuard, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &chGuard{ln: ln, backend: backend, revive: revive}
	g.wg.Go(g.accept)
	return g, nil
}

// Addr is where clients connect.
func (g *chGuard) Addr() string { return g.ln.Addr().String() }

// Close closes the listener and every connection, and waits for the
// guard's goroutines.
func (g *chGuard) Close() {
	g.closeAll(g.ln)
	g.wg.Wait()
}

func (g *chGuard) accept() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		if !g.track(c) {
			_ = c.Close()
			return
		}
		g.wg.Go(func() { g.serve(c.(*net.TCPConn)) })
	}
}

// dial connects to the server, reviving it once if it refuses.
func (g *chGuard) dial() (*net.TCPConn, error) {
	b, err := net.DialTimeout("tcp", g.backend, 10*time.Second)
	if err != nil && g.revive != nil && errors.Is(err, syscall.ECONNREFUSED) {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		g.revive(ctx)
		cancel()
		b, err = net.DialTimeout("tcp", g.backend, 10*time.Second)
	}
	if err != nil {
		return nil, err
	}
	return b.(*net.TCPConn), nil
}

func (g *chGuard) serve(c *net.TCPConn) {
	defer g.untrack(c)
	defer c.Close()
	b, err := g.dial()
	if err != nil {
		return // the client reads an end of stream and dials again
	}
	if !g.track(b) {
		_ = b.Close()
		return
	}
	defer g.untrack(b)
	defer b.Close()

	// Server to client: when the client is gone, keep reading the
	// server's answers (discarded) until it closes, so that nothing is
	// left unread on the server's connection when it is closed.
	down := make(chan struct{})
	go func() {
		defer close(down)
		if _, err := io.Copy(c, b); err == nil {
			_ = c.CloseWrite() // the server closed: pass the end on
			return
		}
		_ = b.SetReadDeadline(time.Now().Add(guardDrain))
		_, _ = io.Copy(io.Discard, b)
	}()
	// Client to server: however the client's side ends (a close, or a
	// reset by a killed process), the server gets an end of stream.
	_, _ = io.Copy(b, c)
	_ = b.CloseWrite()
	// The client may be gone while the server still answers: make the
	// copy above fail fast rather than block on a dead client.
	_ = c.SetWriteDeadline(time.Now().Add(guardDrain))
	<-down
}
