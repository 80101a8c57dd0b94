package netfail_test

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/netfail"
)

// echoServer answers every connection with what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string) (string, error) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

// TestProxy: bytes pass both ways; Accept refuses a client (it reads an end
// of stream); Forward loses an answer and may close the connection; Cut
// closes what is open and the proxy goes on; Close ends it all.
func TestProxy(t *testing.T) {
	backend := echoServer(t)
	var refuse, drop atomic.Bool
	p, err := netfail.NewProxy(backend, netfail.ProxyOptions{
		Accept: func(net.Conn) bool { return !refuse.Load() },
		Forward: func(c *netfail.Conn, toBackend bool, _ []byte) bool {
			if !toBackend && drop.CompareAndSwap(true, false) {
				c.Close()
				return false
			}
			return true
		},
	})
	require.NoError(t, err)
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	got, err := roundTrip(t, c, "hello")
	require.NoError(t, err)
	assert.Equal(t, "hello", got)

	drop.Store(true)
	_, err = roundTrip(t, c, "lost")
	assert.ErrorIs(t, err, io.EOF, "the answer is lost and the connection closed")
	_ = c.Close()

	refuse.Store(true)
	c, err = net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	_, err = roundTrip(t, c, "refused")
	assert.Error(t, err, "a refused client")
	_ = c.Close()
	refuse.Store(false)

	c, err = net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	_, err = roundTrip(t, c, "before the cut")
	require.NoError(t, err)
	p.Cut()
	_, err = roundTrip(t, c, "after the cut")
	assert.Error(t, err, "a connection open at the cut")
	_ = c.Close()
	c, err = net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	got, err = roundTrip(t, c, "again")
	require.NoError(t, err, "the proxy goes on after a cut")
	assert.Equal(t, "again", got)

	p.Close()
	_, err = roundTrip(t, c, "closed")
	assert.Error(t, err, "a connection open at Close")
	_ = c.Close()
	_, err = net.Dial("tcp", p.Addr())
	assert.Error(t, err, "nothing listens after Close")
	p.Close() // twice
}

// TestProxyDelay: every round trip takes at least twice the one-way delay.
func TestProxyDelay(t *testing.T) {
	const delay = 10 * time.Millisecond
	p, err := netfail.NewProxy(echoServer(t), netfail.ProxyOptions{Delay: func(bool) time.Duration { return delay }})
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	for range 3 {
		start := time.Now()
		_, err := roundTrip(t, c, "x")
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(start), 2*delay)
	}
}
