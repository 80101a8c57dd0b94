package testkit

import (
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/netfail"
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
	p, err := netfail.NewProxy(backend, netfail.ProxyOptions{
		Delay: func(bool) time.Duration { return rtt / 2 },
	})
	if err != nil {
		t.Fatalf("testkit: latency proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p.Addr()
}
