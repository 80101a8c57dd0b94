package idempotency

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The accepted body is built by hand for plain keys; it must stay what
// json.Marshal made of it, since done keys stored before replay it too.
func TestAcceptedResponseIsJSONMarshal(t *testing.T) {
	marshal := func(key string) []byte {
		b, err := json.Marshal(struct {
			Status   string `json:"status"`
			Delivery string `json:"delivery"`
		}{"accepted", key})
		require.NoError(t, err)
		return b
	}
	keys := []string{
		"", "delivery-1", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "a b~!#$%'()*+,-./:;=?@[]^_`{|}",
		`q"uote`, `back\slash`, "<tag>", "a&b", "tab\there", "nl\n", "\x00\x1f\x7f",
		"caf\u00e9", "\u2028\u2029", "\xff\xfe bad utf-8", "日本",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
			if rng.IntN(2) == 0 {
				b[i] = byte(0x20 + rng.IntN(0x5f)) // mostly printable ASCII
			}
		}
		keys = append(keys, string(b))
	}
	for _, key := range keys {
		r := acceptedResponse(key)
		assert.Equal(t, string(marshal(key)), string(r.Body), "key %q", key)
		assert.Equal(t, http.StatusAccepted, r.Status)
		assert.Equal(t, "application/json", r.ContentType)
	}
	assert.True(t, jsonPlain("delivery-1"))
	assert.False(t, jsonPlain("a<b"))
}
