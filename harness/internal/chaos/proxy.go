package chaos

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// slowLink stands between the processors and ClickHouse: it copies bytes
// both ways, each chunk delivered the link's current delay after it was
// read (pipelined, as on a long link: a delay, not a bandwidth limit).
// KindClickHouseSlow sets the delay for a while: the sinks' inserts, which
// a checkpoint awaits in its asynchronous part, slow down. Each client
// connection dials the backend anew, so a ClickHouse restarted on its port
// is reached again.
type slowLink struct {
	ln      net.Listener
	backend string
	delay   atomic.Int64 // one way, ns
	delayed atomic.Int64 // chunks held back toward the backend so far

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// newSlowLink listens on a loopback port in front of backend.
func newSlowLink(backend string) (*slowLink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &slowLink{ln: ln, backend: backend, conns: map[net.Conn]bool{}}
	l.wg.Go(l.accept)
	return l, nil
}

func (l *slowLink) Addr() string { return l.ln.Addr().String() }

// setDelay sets the one-way delay of the chunks read from now on.
func (l *slowLink) setDelay(d time.Duration) { l.delay.Store(int64(d)) }

func (l *slowLink) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = true
	return true
}

func (l *slowLink) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

func (l *slowLink) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		if !l.track(c) {
			_ = c.Close()
			return
		}
		l.wg.Go(func() { l.serve(c) })
	}
}

func (l *slowLink) serve(c net.Conn) {
	defer l.untrack(c)
	defer c.Close()
	b, err := net.DialTimeout("tcp", l.backend, 5*time.Second)
	if err != nil {
		return
	}
	if !l.track(b) {
		_ = b.Close()
		return
	}
	defer l.untrack(b)
	defer b.Close()
	// Either direction ending ends both.
	done := make(chan struct{}, 2)
	go func() { l.pipe(b, c, true); done <- struct{}{} }()
	go func() { l.pipe(c, b, false); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = b.Close()
	<-done
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, each chunk held until its due time.
func (l *slowLink) pipe(dst, src net.Conn, toBackend bool) {
	inFlight := make(chan chunk, 256)
	go func() {
		defer close(inFlight)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				d := time.Duration(l.delay.Load())
				if d > 0 && toBackend {
					l.delayed.Add(1)
				}
				inFlight <- chunk{data: buf[:n], due: time.Now().Add(d)}
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

// Close stops the listener, closes every connection and waits for the
// goroutines.
func (l *slowLink) Close() {
	l.mu.Lock()
	l.closed = true
	_ = l.ln.Close()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
