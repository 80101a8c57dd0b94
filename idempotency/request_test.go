package idempotency

import (
	"bytes"
	"io"
	"math"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readBody reads what io.ReadAll(io.LimitReader) reads, whatever size the
// request announced and however the reader splits the body.
func TestReadBodyAsReadAll(t *testing.T) {
	for _, n := range []int{0, 1, 100, 511, 512, 513, 4000, 70 << 10} {
		body := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		for _, limit := range []int64{1, 100, 512, 4001, 100 << 10} {
			want, err := io.ReadAll(io.LimitReader(bytes.NewReader(body), limit))
			require.NoError(t, err)
			for _, size := range []int64{-1, 0, int64(n) - 1, int64(n), int64(n) + 1, 1 << 62, math.MaxInt64} {
				for _, r := range []io.Reader{bytes.NewReader(body), iotest.OneByteReader(bytes.NewReader(body)), iotest.DataErrReader(bytes.NewReader(body))} {
					got, err := readBody(r, size, limit)
					require.NoError(t, err)
					require.Equal(t, want, got, "body %d, limit %d, size %d", n, limit, size)
					if size == int64(n) && int64(n) < limit && n < 64<<10 {
						assert.Equal(t, n+1, cap(got), "a body of the size announced is read into one buffer")
					}
				}
			}
		}
	}
	_, err := readBody(iotest.ErrReader(io.ErrUnexpectedEOF), 10, 100)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}
