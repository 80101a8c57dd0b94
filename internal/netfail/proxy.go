package netfail

import (
	"net"
	"sync"
	"time"
)

// ProxyOptions configures a Proxy. The zero value forwards every byte at
// once.
type ProxyOptions struct {
	// Listener is where clients connect; the Proxy closes it. Default: a
	// new port on 127.0.0.1. (A tls.Listener makes a TLS terminator.)
	Listener net.Listener
	// Dial connects to the backend, once for each client. Default: TCP to
	// the backend, with a 10 s timeout.
	Dial func() (net.Conn, error)
	// Accept is called with each client before the backend is dialled, in
	// the client's own goroutine (a TLS handshake may take its time);
	// false closes the client: a connection refused. Default: all.
	Accept func(client net.Conn) bool
	// Delay returns the one-way delay of a chunk read now, from the client
	// when toBackend. Chunks are pipelined, as on a long link: a delay,
	// not a bandwidth limit. Default: none.
	Delay func(toBackend bool) time.Duration
	// Forward sees each chunk as it is read and says whether to pass it
	// on; a chunk it refuses is lost (an answer that never arrives). It
	// may close c. Default: every chunk.
	Forward func(c *Conn, toBackend bool, b []byte) bool
}

// Proxy forwards TCP connections to a backend, with the faults a network
// has: a delay, a connection refused, an answer lost, a connection cut.
// Either side of a connection ending ends the other. Close cuts every
// connection and waits for the Proxy's goroutines.
type Proxy struct {
	ln   net.Listener
	opts ProxyOptions
	wg   sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

// Conn is one client's connection through a Proxy.
type Conn struct {
	client, backend net.Conn
}

// Close closes both sides of the connection.
func (c *Conn) Close() {
	_ = c.client.Close()
	_ = c.backend.Close()
}

// NewProxy starts a Proxy to backend (host:port; unused when opts.Dial is
// set).
func NewProxy(backend string, opts ProxyOptions) (*Proxy, error) {
	if opts.Listener == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		opts.Listener = ln
	}
	if opts.Dial == nil {
		opts.Dial = func() (net.Conn, error) { return net.DialTimeout("tcp", backend, 10*time.Second) }
	}
	p := &Proxy{ln: opts.Listener, opts: opts, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close closes the listener and every connection, and waits for the
// Proxy's goroutines. It is safe to call twice.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Cut closes every open connection, as a network partition that heals at
// once would; the Proxy goes on accepting.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// track registers c so that Close cuts it; false once the Proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.untrack(c)
	defer c.Close()
	if p.opts.Accept != nil && !p.opts.Accept(c) {
		return
	}
	b, err := p.opts.Dial()
	if err != nil {
		return // the client reads an end of stream
	}
	if !p.track(b) {
		_ = b.Close()
		return
	}
	defer p.untrack(b)
	defer b.Close()
	conn := &Conn{client: c, backend: b}
	done := make(chan struct{}, 2)
	go func() { p.pipe(conn, b, c, true); done <- struct{}{} }()
	go func() { p.pipe(conn, c, b, false); done <- struct{}{} }()
	<-done
	conn.Close()
	<-done
}

// chunk is bytes read from one side, due on the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst: a reader stamps each chunk with its due time, a
// writer waits for it, so chunks read while earlier ones wait are in
// flight together.
func (p *Proxy) pipe(c *Conn, dst, src net.Conn, toBackend bool) {
	inFlight := make(chan chunk, 256)
	go func() {
		defer close(inFlight)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 && (p.opts.Forward == nil || p.opts.Forward(c, toBackend, buf[:n])) {
				ch := chunk{data: buf[:n]}
				if p.opts.Delay != nil {
					ch.due = time.Now().Add(p.opts.Delay(toBackend))
				}
				inFlight <- ch
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range inFlight {
		time.Sleep(time.Until(ch.due))
		if _, err := dst.Write(ch.data); err != nil {
			_ = src.Close() // the reader returns; drain what it sent
			for range inFlight {
			}
			return
		}
	}
}
