package redisstore

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A token must differ from every other claim's: within a Store by its
// counter, between Stores by the random prefix each draws.
func TestTokensUnique(t *testing.T) {
	var a, b tokens
	require.NoError(t, a.init())
	require.NoError(t, b.init())
	assert.NotEqual(t, a.prefix, b.prefix, "two Stores drew one prefix")
	seen := make(map[string]bool)
	for range 1000 {
		v := a.pending("fp") // a claim's value holds a token of its own
		require.Len(t, v, 1+40+1+2)
		assert.Equal(t, "p", v[:1])
		assert.Equal(t, "\x00fp", v[41:])
		for _, tk := range []string{a.next(), b.next(), v[1:41]} {
			assert.Len(t, tk, 40)
			_, err := hex.DecodeString(tk)
			assert.NoError(t, err, tk)
			assert.False(t, seen[tk], "token %s twice", tk)
			seen[tk] = true
		}
	}
}
