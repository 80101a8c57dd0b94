package testkit

import (
	"net"
	"sync"
)

// proxyConns are chGuard's connections open on either side, so that
// closing the guard cuts them all, and no connection is taken on after
// that. (The kit's other proxies are internal/netfail's Proxy; the guard's
// half-close and drain are its own.)
type proxyConns struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

// track registers c so closeAll can cut it; false once the proxy is closed.
func (p *proxyConns) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.conns == nil {
		p.conns = map[net.Conn]struct{}{}
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxyConns) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// closeAll closes ln and every tracked connection; track refuses from now.
func (p *proxyConns) closeAll(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	_ = ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
}
