package kafkatxn

import (
	"encoding/binary"
	"hash/crc32"
	"time"
)

// Record is one record to produce.
type Record struct {
	Key, Value []byte
	Headers    []Header
	// Time is the record's timestamp. Default: the time of the produce.
	Time time.Time
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// batchHeader is what identifies a record batch to the broker's idempotence
// check: the producer session and the sequence number of its first record.
type batchHeader struct {
	producerID    int64
	producerEpoch int16
	baseSequence  int32
	transactional bool
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// Offsets inside a v2 record batch (KIP-98's format, magic 2).
const (
	batchLengthAt = 8
	batchCRCAt    = 17
	batchAttrsAt  = 21 // the CRC covers everything from here on
	batchFixed    = 61 // bytes before the first record
	attrTxn       = 1 << 4
)

// appendBatch appends one uncompressed v2 record batch holding recs to dst.
// Base offset, partition leader epoch and record offsets are the producer's
// placeholders; the broker assigns the offsets. The layout is Kafka's
// (DefaultRecordBatch): kafka-go's own encoder writes producer id -1, which
// turns idempotence off, so this package encodes batches itself.
func appendBatch(dst []byte, h batchHeader, recs []Record, now time.Time) []byte {
	start := len(dst)
	first := now.UnixMilli()
	if len(recs) > 0 && !recs[0].Time.IsZero() {
		first = recs[0].Time.UnixMilli()
	}
	maxTS := first
	var attrs int16
	if h.transactional {
		attrs |= attrTxn
	}
	dst = binary.BigEndian.AppendUint64(dst, 0)                   // base offset
	dst = binary.BigEndian.AppendUint32(dst, 0)                   // batch length, set below
	dst = binary.BigEndian.AppendUint32(dst, 0xffffffff)          // partition leader epoch: -1
	dst = append(dst, 2)                                          // magic
	dst = binary.BigEndian.AppendUint32(dst, 0)                   // CRC, set below
	dst = binary.BigEndian.AppendUint16(dst, uint16(attrs))       // attributes
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs)-1)) // last offset delta
	dst = binary.BigEndian.AppendUint64(dst, uint64(first))       // first timestamp
	dst = binary.BigEndian.AppendUint64(dst, 0)                   // max timestamp, set below
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.producerID))
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.producerEpoch))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.baseSequence))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs)))
	for i, r := range recs {
		ts := first
		if !r.Time.IsZero() {
			ts = r.Time.UnixMilli()
		}
		maxTS = max(maxTS, ts)
		body := recordSize(r, ts-first, int64(i))
		dst = binary.AppendVarint(dst, int64(body))
		dst = append(dst, 0) // record attributes
		dst = binary.AppendVarint(dst, ts-first)
		dst = binary.AppendVarint(dst, int64(i))
		dst = appendVarBytes(dst, r.Key)
		dst = appendVarBytes(dst, r.Value)
		dst = binary.AppendVarint(dst, int64(len(r.Headers)))
		for _, hd := range r.Headers {
			dst = binary.AppendVarint(dst, int64(len(hd.Key)))
			dst = append(dst, hd.Key...)
			dst = appendVarBytes(dst, hd.Value)
		}
	}
	b := dst[start:]
	binary.BigEndian.PutUint64(b[35:], uint64(maxTS))
	binary.BigEndian.PutUint32(b[batchLengthAt:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchAttrsAt:], crc32c))
	return dst
}

// appendVarBytes appends a varint length and b; nil is length -1 (null).
func appendVarBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

func varintLen(v int64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutVarint(buf[:], v)
}

func varBytesLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

// recordSize is the length of a record after its length prefix.
func recordSize(r Record, tsDelta, offDelta int64) int {
	n := 1 + varintLen(tsDelta) + varintLen(offDelta) + varBytesLen(r.Key) + varBytesLen(r.Value) +
		varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + varBytesLen(h.Value)
	}
	return n
}

// encode returns a produce request's record set: the size of the one batch,
// then the batch.
func encode(dst []byte, h batchHeader, recs []Record, now time.Time) []byte {
	dst = append(dst[:0], 0, 0, 0, 0)
	dst = appendBatch(dst, h, recs, now)
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst
}
