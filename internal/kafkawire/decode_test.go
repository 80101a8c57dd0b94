package kafkawire

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testBatch is one v2 record batch to encode: its base offset, attributes,
// producer id, and the values of its records (offsets base, base+1, ...).
type testBatch struct {
	base   int64
	attrs  int16
	pid    int64
	values []string
	keys   [][]byte // of the records, when set (control records)
}

// encode writes b the way Kafka's DefaultRecordBatch lays it out.
func (b testBatch) encode() []byte {
	var recs []byte
	n := max(len(b.values), len(b.keys))
	for i := range n {
		rec := []byte{0}                  // attributes
		rec = binary.AppendVarint(rec, 0) // timestamp delta
		rec = binary.AppendVarint(rec, int64(i))
		var key []byte
		if b.keys != nil {
			key = b.keys[i]
		} else {
			key = []byte("k")
		}
		rec = binary.AppendVarint(rec, int64(len(key)))
		rec = append(rec, key...)
		v := ""
		if i < len(b.values) {
			v = b.values[i]
		}
		rec = binary.AppendVarint(rec, int64(len(v)))
		rec = append(rec, v...)
		rec = binary.AppendVarint(rec, 0) // headers
		recs = binary.AppendVarint(recs, int64(len(rec)))
		recs = append(recs, rec...)
	}
	out := binary.BigEndian.AppendUint64(nil, uint64(b.base))
	out = binary.BigEndian.AppendUint32(out, 0) // length, below
	out = binary.BigEndian.AppendUint32(out, 0) // leader epoch
	out = append(out, 2)                        // magic
	out = binary.BigEndian.AppendUint32(out, 0) // crc, below
	out = binary.BigEndian.AppendUint16(out, uint16(b.attrs))
	out = binary.BigEndian.AppendUint32(out, uint32(n-1)) // last offset delta
	out = binary.BigEndian.AppendUint64(out, 1000)        // first timestamp
	out = binary.BigEndian.AppendUint64(out, 1000)        // max timestamp
	out = binary.BigEndian.AppendUint64(out, uint64(b.pid))
	out = binary.BigEndian.AppendUint16(out, 0)
	out = binary.BigEndian.AppendUint32(out, 0)
	out = binary.BigEndian.AppendUint32(out, uint32(n))
	out = append(out, recs...)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[batchCRCAt:], crc32.Checksum(out[batchAttrsAt:], castagnoli))
	return out
}

// marker is a control batch of producer pid at offset: a commit or an
// abort marker.
func marker(offset, pid int64, commit bool) testBatch {
	key := []byte{0, 0, 0, 0}
	if commit {
		key[3] = 1
	}
	return testBatch{base: offset, attrs: attrTxn | attrControl, pid: pid, keys: [][]byte{key}}
}

// response is a Fetch v4 response body (after the correlation id) for
// partition 0 of topic "t" with the given aborted transactions.
func response(records []byte, aborted ...abortedTxn) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0) // throttle
	b = binary.BigEndian.AppendUint32(b, 1)
	b = appendString(b, "t")
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, 0)   // partition
	b = binary.BigEndian.AppendUint16(b, 0)   // error
	b = binary.BigEndian.AppendUint64(b, 100) // high watermark
	b = binary.BigEndian.AppendUint64(b, 100) // last stable offset
	b = binary.BigEndian.AppendUint32(b, uint32(len(aborted)))
	for _, a := range aborted {
		b = binary.BigEndian.AppendUint64(b, uint64(a.producerID))
		b = binary.BigEndian.AppendUint64(b, uint64(a.firstOffset))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(records)))
	return append(b, records...)
}

func values(t *testing.T, f *Fetcher, buf []byte) []string {
	t.Helper()
	ms, err := f.decodeResponse(buf)
	require.NoError(t, err)
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Value))
	}
	return out
}

// TestDecodeRefusesCorruptBatches: a batch whose CRC does not match, or
// that is cut inside a record, is an error, never records; a batch in a
// format before v2 is a *FormatError naming the partition and offset.
func TestDecodeRefusesCorruptBatches(t *testing.T) {
	good := testBatch{base: 7, pid: -1, values: []string{"v"}}.encode()
	f := &Fetcher{Topic: "t"}
	ms, err := f.decodeResponse(response(good))
	require.NoError(t, err)
	require.Len(t, ms, 1)
	assert.Equal(t, "k", string(ms[0].Key))
	assert.Equal(t, int64(7), ms[0].Offset)
	assert.Equal(t, int64(100), ms[0].HighWaterMark)
	assert.Equal(t, int64(8), f.Next)

	bad := testBatch{base: 7, pid: -1, values: []string{"v"}}.encode()
	bad[len(bad)-2] ^= 1 // a bit of the value
	f = &Fetcher{Topic: "t"}
	_, err = f.decodeResponse(response(bad))
	require.ErrorIs(t, err, ErrMalformed)
	assert.Equal(t, int64(0), f.Next)

	old := testBatch{base: 7, pid: -1, values: []string{"v"}}.encode()
	old[batchMagicAt] = 1
	f = &Fetcher{Topic: "t", Partition: 0}
	_, err = f.decodeResponse(response(old))
	var ferr *FormatError
	require.ErrorAs(t, err, &ferr)
	assert.Equal(t, FormatError{Topic: "t", Partition: 0, Offset: 7, Magic: 1}, *ferr)
	assert.Contains(t, err.Error(), "t/0 at offset 7")
	// After a v2 batch, the old one waits for the next fetch.
	f = &Fetcher{Topic: "t"}
	assert.Equal(t, []string{"v"}, values(t, f, response(append(testBatch{base: 6, pid: -1, values: []string{"v"}}.encode(), old...))))
	assert.Equal(t, int64(7), f.Next)

	cut := testBatch{base: 7, pid: -1, values: []string{"v"}}.encode()
	cut = cut[:len(cut)-3]
	binary.BigEndian.PutUint32(cut[8:], uint32(len(cut)-12))
	binary.BigEndian.PutUint32(cut[batchCRCAt:], crc32.Checksum(cut[batchAttrsAt:], castagnoli)) // a valid CRC over a cut record
	f = &Fetcher{Topic: "t"}
	_, err = f.decodeResponse(response(cut))
	require.ErrorIs(t, err, ErrMalformed)
	assert.Equal(t, int64(0), f.Next)

	// A batch cut by the response's end is left for the next fetch.
	f = &Fetcher{Topic: "t"}
	two := append(testBatch{base: 0, pid: -1, values: []string{"a"}}.encode(), good[:len(good)-5]...)
	assert.Equal(t, []string{"a"}, values(t, f, response(two)))
	assert.Equal(t, int64(1), f.Next)
}

// TestDecodeDropsAbortedAndControlRecords: with two producers interleaving
// transactions, the records of the aborted ones (listed in the response)
// and every control record are dropped, committed and non-transactional
// records are kept, and Next moves past all of them.
func TestDecodeDropsAbortedAndControlRecords(t *testing.T) {
	const p1, p2 = 11, 22
	batches := []testBatch{
		{base: 0, attrs: attrTxn, pid: p1, values: []string{"p1-aborted-0", "p1-aborted-1"}},
		{base: 2, attrs: attrTxn, pid: p2, values: []string{"p2-committed-2"}},
		{base: 3, pid: -1, values: []string{"plain-3"}},
		marker(4, p1, false),
		{base: 5, attrs: attrTxn, pid: p1, values: []string{"p1-committed-5"}},
		{base: 6, attrs: attrTxn, pid: p2, values: []string{"p2-aborted-6"}},
		marker(7, p2, true), // p2's first transaction (offset 2) commits...
		marker(8, p1, true),
		marker(9, p2, false), // ...its second, begun at 6, aborts
		{base: 10, attrs: attrTxn, pid: p2, values: []string{"p2-committed-10"}},
		marker(11, p2, true),
	}
	var records []byte
	for _, b := range batches {
		records = append(records, b.encode()...)
	}
	aborted := []abortedTxn{{producerID: p2, firstOffset: 6}, {producerID: p1, firstOffset: 0}} // unsorted, as a broker may
	f := &Fetcher{Topic: "t"}
	assert.Equal(t, []string{"p2-committed-2", "plain-3", "p1-committed-5", "p2-committed-10"},
		values(t, f, response(records, aborted...)))
	assert.Equal(t, int64(12), f.Next)

	// From offset 5 on, the broker lists only p2's aborted transaction.
	f = &Fetcher{Topic: "t", Next: 5}
	assert.Equal(t, []string{"p1-committed-5", "p2-committed-10"}, values(t, f, response(records, aborted[0])))

	// A response of only aborted records and markers moves Next all the
	// same, so that the next fetch goes on after them.
	f = &Fetcher{Topic: "t"}
	only := append(batches[0].encode(), batches[3].encode()...)
	assert.Empty(t, values(t, f, response(only, aborted[1])))
	assert.Equal(t, int64(5), f.Next)
}

// FuzzDecodeResponse: no input makes the decoder panic or hand out records
// together with an error, and Next never moves back.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(response(testBatch{base: 3, pid: -1, values: []string{"a", "b"}}.encode()))
	f.Add(response(append(testBatch{base: 0, attrs: attrTxn, pid: 1, values: []string{"x"}}.encode(), marker(1, 1, false).encode()...),
		abortedTxn{producerID: 1, firstOffset: 0}))
	f.Fuzz(func(t *testing.T, buf []byte) {
		fe := &Fetcher{Topic: "t", Next: 2}
		ms, err := fe.decodeResponse(buf)
		if err != nil && len(ms) > 0 {
			t.Fatalf("%d records with error %v", len(ms), err)
		}
		var ferr *FormatError
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.As(err, &ferr) && !isBrokerError(err) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if fe.Next < 2 {
			t.Fatalf("Next moved back to %d", fe.Next)
		}
	})
}

func isBrokerError(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr)
}

// TestFetchRequestIsolation: the request carries the isolation level it is
// given, read_uncommitted (0) included; it was always read_committed, and
// kafkatxn's look-ups of its markers past the last stable offset found
// nothing (issue 42, finding 1).
func TestFetchRequestIsolation(t *testing.T) {
	for _, iso := range []int8{0, 1} {
		req := appendFetchRequest(nil, 1, "c", "t", 0, 0, iso, 100, 0)
		// size 4, api key 2, version 2, correlation 4, client id 2+1,
		// replica 4, max wait 4, min bytes 4, max bytes 4: then isolation.
		assert.Equal(t, iso, int8(req[4+2+2+4+3+4+4+4+4]), "isolation %d", iso)
	}
}

// TestDecodeNullsEmptiesAndLogAppendTime: a null key or value (length -1)
// decodes as nil, an empty one as a non-nil empty slice; a batch whose
// timestamp type is LogAppendTime gives every record the batch's max
// timestamp.
func TestDecodeNullsEmptiesAndLogAppendTime(t *testing.T) {
	b := testBatch{base: 0, pid: -1, keys: [][]byte{nil, {}}, values: []string{"", ""}}.encode()
	// The first record's key: length -1 instead of 0 (a record of the
	// same size, its key's varint one byte either way).
	at := batchFixed + 1 + 1 + 1 + 1 // record length, attributes, timestamp and offset deltas
	require.Equal(t, byte(0), b[at])
	b[at] = 1 // zigzag varint -1
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchAttrsAt:], castagnoli))
	f := &Fetcher{Topic: "t"}
	ms, err := f.decodeResponse(response(b))
	require.NoError(t, err)
	require.Len(t, ms, 2)
	assert.Nil(t, ms[0].Key)
	assert.NotNil(t, ms[1].Key)
	assert.Empty(t, ms[1].Key)
	assert.NotNil(t, ms[0].Value)
	assert.Equal(t, int64(1000), ms[0].Time.UnixMilli())

	lt := testBatch{base: 0, attrs: attrLogTime, pid: -1, values: []string{"a"}}.encode()
	binary.BigEndian.PutUint64(lt[batchAttrsAt+2+4+8:], 5000) // max timestamp: the append time
	binary.BigEndian.PutUint32(lt[batchCRCAt:], crc32.Checksum(lt[batchAttrsAt:], castagnoli))
	f = &Fetcher{Topic: "t"}
	ms, err = f.decodeResponse(response(lt))
	require.NoError(t, err)
	require.Len(t, ms, 1)
	assert.Equal(t, int64(5000), ms[0].Time.UnixMilli())
}
