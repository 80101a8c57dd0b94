package chsink

import (
	"bytes"
	"testing"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blockBytes returns what ch-go sends for input as one block, on both of
// its paths: WriteBlock (compression off, chained writes) and EncodeBlock
// (compression on, one buffer).
func blockBytes(t *testing.T, input proto.Input) (written, encoded []byte) {
	t.Helper()
	b := proto.Block{Columns: len(input), Rows: input[0].Data.Rows(), Info: proto.BlockInfo{BucketNum: -1}}
	var out bytes.Buffer
	w := proto.NewWriter(&out, new(proto.Buffer))
	require.NoError(t, b.WriteBlock(w, proto.Version, input))
	_, err := w.Flush()
	require.NoError(t, err)
	var buf proto.Buffer
	require.NoError(t, b.EncodeBlock(&buf, proto.Version, input))
	return out.Bytes(), buf.Buf
}

// TestSealedColumnsEncodeAsTyped checks, for every column kind, that the
// sealed (already encoded) columns put on the wire exactly the bytes ch-go
// puts there for the typed columns, batch after batch in the same reused
// set (sizes that shrink, grow and change LowCardinality dictionaries).
func TestSealedColumnsEncodeAsTyped(t *testing.T) {
	set, err := newColSet(KindSchema)
	require.NoError(t, err)
	for _, tt := range []struct {
		first uint64
		n     int
	}{{0, 1}, {1, 257}, {1000, 3}, {7, 70_000}, {3, 2}} {
		for _, r := range KindRows(tt.first, tt.n) {
			for _, c := range set.cols {
				c.add(&r)
			}
		}
		wantW, wantE := blockBytes(t, set.input) // prepares the typed columns, as an insert would
		_, size, err := set.seal()
		require.NoError(t, err)
		gotW, gotE := blockBytes(t, set.sealed)
		assert.Equal(t, wantW, gotW, "WriteBlock, %d rows", tt.n)
		assert.Equal(t, wantE, gotE, "EncodeBlock, %d rows", tt.n)
		assert.Equal(t, wantW, gotE) // same bytes on both paths
		assert.Equal(t, len(set.wire.Buf), size)
		set.reset()
		assert.Zero(t, set.input[0].Data.Rows())
		assert.Empty(t, set.wire.Buf)
	}
}

// hashTyped is the content hash as chsink computed it before batches were
// sealed into encoded columns: each column's name, then its state prefix
// and encoding, each column encoded on its own. Journals written then are
// replayed now, so seal must give the same hash.
func hashTyped(t *testing.T, input proto.Input) uint64 {
	t.Helper()
	d := xxhash.New()
	var buf proto.Buffer
	for _, c := range input {
		buf.Reset()
		if p, ok := c.Data.(proto.Preparable); ok {
			require.NoError(t, p.Prepare())
		}
		if st, ok := c.Data.(proto.StateEncoder); ok {
			st.EncodeState(&buf)
		}
		c.Data.EncodeColumn(&buf)
		_, _ = d.WriteString(c.Name)
		_, _ = d.Write(buf.Buf)
	}
	return d.Sum64()
}

// TestSealHashIsStable pins the content hash that journaled intents carry:
// the same as before (hashTyped), and a golden value for a fixed batch, so
// that a change of the hash or of ch-go's encoding, which would turn every
// replay after an upgrade into a ContentMismatchError, fails here first.
func TestSealHashIsStable(t *testing.T) {
	set, err := newColSet(KindSchema)
	require.NoError(t, err)
	for _, r := range OneEntryMaps(KindRows(0, 100)) {
		for _, c := range set.cols {
			c.add(&r)
		}
	}
	want := hashTyped(t, set.input)
	got, _, err := set.seal()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, uint64(goldenKindHash), got)
	again, _, err := set.seal() // sealing twice changes nothing
	require.NoError(t, err)
	assert.Equal(t, got, again)
}

const goldenKindHash = 0x758f3066089c05d1
