package testkit_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestLatencyProxy: every round trip through the proxy takes at least its
// rtt longer, and the bytes arrive intact and in order, also when many
// chunks are in flight at once.
func TestLatencyProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }() // echo
		}
	}()
	const rtt = 20 * time.Millisecond
	c, err := net.Dial("tcp", testkit.LatencyProxy(t, ln.Addr().String(), rtt))
	require.NoError(t, err)
	defer c.Close()

	buf := make([]byte, 1)
	for range 5 {
		start := time.Now()
		_, err := c.Write([]byte{'x'})
		require.NoError(t, err)
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(start), rtt, "a round trip through the proxy")
	}

	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(rand.N(256))
	}
	go func() { _, _ = c.Write(want) }()
	got := make([]byte, len(want))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "4 MiB echoed intact")
}
