package testkit_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestFreeAddr proves FreeAddr returns a loopback address a server can
// listen on at once.
func TestFreeAddr(t *testing.T) {
	addr := testkit.FreeAddr(t)
	host, _, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, "the port FreeAddr returned is taken")
	require.NoError(t, ln.Close())
}
