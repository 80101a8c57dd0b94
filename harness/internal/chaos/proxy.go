package chaos

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/netfail"
)

// slowLink stands between the processors and ClickHouse: it copies bytes
// both ways, each chunk delivered the link's current delay after it was
// read (pipelined, as on a long link: a delay, not a bandwidth limit).
// KindClickHouseSlow sets the delay for a while: the sinks' inserts, which
// a checkpoint awaits in its asynchronous part, slow down. Each client
// connection dials the backend anew, so a ClickHouse restarted on its port
// is reached again.
type slowLink struct {
	*netfail.Proxy
	delay   atomic.Int64 // one way, ns
	delayed atomic.Int64 // chunks held back toward the backend so far
}

// newSlowLink listens on a loopback port in front of backend.
func newSlowLink(backend string) (*slowLink, error) {
	l := &slowLink{}
	p, err := netfail.NewProxy(backend, netfail.ProxyOptions{
		Dial: func() (net.Conn, error) { return net.DialTimeout("tcp", backend, 5*time.Second) },
		Delay: func(toBackend bool) time.Duration {
			d := time.Duration(l.delay.Load())
			if d > 0 && toBackend {
				l.delayed.Add(1)
			}
			return d
		},
	})
	if err != nil {
		return nil, err
	}
	l.Proxy = p
	return l, nil
}

// setDelay sets the one-way delay of the chunks read from now on.
func (l *slowLink) setDelay(d time.Duration) { l.delay.Store(int64(d)) }
