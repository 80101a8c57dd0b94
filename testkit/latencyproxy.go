package testkit

import (
	"net"
	"sync"
	"testing"
	"time"
)

// LatencyProxy puts a network's delay in front of a server, as a link
// between availability zones has: it listens on a loopback port and copies
// bytes both ways between each client and a connection of its own to
// backend, each chunk delivered rtt/2 after it was read, so every request
// and answer pair takes at least rtt longer. Chunks are pipelined, not
// serialised: the delay adds latency, not a bandwidth limit. The proxy is
// closed at cleanup, which closes every connection and waits for its
// goroutines.
//
//	addr := testkit.LatencyProxy(t, chAddr, 5*time.Millisecond)
//	// ch.Options{Address: addr}: every round trip 5 ms longer
func LatencyProxy(t testing.TB, backend string, rtt time.Duration) (addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: latency proxy: %v", err)
	}
	p := &latencyProxy{ln: ln, backend: backend, delay: rtt / 2}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return ln.Addr().String()
}

type latencyProxy struct {
	ln      net.Listener
	backend string
	delay   time.Duration // one way
	wg      sync.WaitGroup
	proxyConns
}

// chunk is bytes read from one side, due on the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

func (p *latencyProxy) accept() {
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

func (p *latencyProxy) serve(c net.Conn) {
	defer p.untrack(c)
	defer c.Close()
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	if !p.track(b) {
		_ = b.Close()
		return
	}
	defer p.untrack(b)
	defer b.Close()
	// Either side ending ends both; the other direction then returns on
	// its closed connection.
	done := make(chan struct{}, 2)
	go func() { p.pipe(b, c); done <- struct{}{} }()
	go func() { p.pipe(c, b); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = b.Close()
	<-done
}

// pipe copies src to dst, each chunk delay after it was read: a reader
// stamps chunks, a writer waits for each one's time, so chunks read while
// earlier ones wait are in flight together, as on a long link.
func (p *latencyProxy) pipe(dst, src net.Conn) {
	inFlight := make(chan chunk, 256)
	go func() {
		defer close(inFlight)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				inFlight <- chunk{data: buf[:n], due: time.Now().Add(p.delay)}
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

func (p *latencyProxy) close() {
	p.closeAll(p.ln)
	p.wg.Wait()
}
