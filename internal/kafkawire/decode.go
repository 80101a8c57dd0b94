package kafkawire

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"
	"unsafe"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Offsets and bits of a v2 record batch (KIP-98's format, magic 2).
const (
	batchMagicAt = 16
	batchCRCAt   = 17
	batchAttrsAt = 21 // the CRC covers everything from here on
	batchFixed   = 61 // bytes before the first record
	attrCodec    = 7
	attrLogTime  = 1 << 3 // timestamp type: LogAppendTime
	attrTxn      = 1 << 4
	attrControl  = 1 << 5
)

// abortedTxn is one entry of a fetch response's aborted transactions: the
// producer and the offset of its aborted transaction's first record.
type abortedTxn struct {
	producerID, firstOffset int64
}

// parseResponse reads a Fetch v4 response (after its correlation id) for
// the one partition requested: its high watermark and record batches, and
// its aborted transactions into f.aborted, sorted by first offset.
func (f *Fetcher) parseResponse(buf []byte) (hwm int64, records []byte, err error) {
	r := wireReader{b: buf}
	r.int32() // throttle time
	if n := r.int32(); n != 1 && !r.bad {
		return 0, nil, fmt.Errorf("%w: %d topics", ErrMalformed, n)
	}
	r.take(int(r.int16())) // topic name
	if n := r.int32(); n != 1 && !r.bad {
		return 0, nil, fmt.Errorf("%w: %d partitions", ErrMalformed, n)
	}
	r.int32() // partition
	code := r.int16()
	hwm = r.int64()
	r.int64() // last stable offset: the broker sends nothing past it
	f.aborted = f.aborted[:0]
	if n := r.int32(); n > 0 && int(n) <= len(r.b)/16 {
		for range n {
			f.aborted = append(f.aborted, abortedTxn{producerID: r.int64(), firstOffset: r.int64()})
		}
	} else if n > 0 {
		r.bad = true
	}
	records = r.take(int(r.int32()))
	if r.bad {
		return 0, nil, fmt.Errorf("%w: partition header", ErrMalformed)
	}
	if code != 0 {
		return 0, nil, fmt.Errorf("kafkawire: fetch %s/%d at %d: %w", f.Topic, f.Partition, f.Next, kafka.Error(code))
	}
	slices.SortFunc(f.aborted, func(a, b abortedTxn) int { return cmp.Compare(a.firstOffset, b.firstOffset) })
	f.HighWatermark = hwm
	return hwm, records, nil
}

// nextBatch splits the first complete batch off records. ok is false at
// the end, or where the response was cut at MaxBytes inside a batch.
func nextBatch(records []byte) (batch, rest []byte, base int64, ok bool, err error) {
	if len(records) <= batchMagicAt {
		return nil, nil, 0, false, nil
	}
	base = int64(binary.BigEndian.Uint64(records))
	length := int(int32(binary.BigEndian.Uint32(records[8:])))
	if 12+length <= batchMagicAt {
		// Too short to hold the magic byte (parseBatch checks a v2
		// batch's header length).
		return nil, nil, base, false, fmt.Errorf("%w: batch at %d of length %d", ErrMalformed, base, length)
	}
	if 12+length > len(records) {
		return nil, nil, base, false, nil
	}
	return records[:12+length], records[12+length:], base, true, nil
}

// decodeResponse decodes a Fetch v4 response (after its correlation id) and
// returns its committed records from f.Next on, moving f.Next past every
// complete batch.
func (f *Fetcher) decodeResponse(buf []byte) ([]kafka.Message, error) {
	hwm, records, err := f.parseResponse(buf)
	if err != nil {
		return nil, err
	}
	// The Java consumer's algorithm: the broker lists every aborted
	// transaction overlapping the fetched range; from the batch that
	// reaches an entry's first offset on, that producer's transactional
	// batches are dropped, until its abort marker.
	f.pids = f.pids[:0]
	f.hdrs = nil // the previous fetch's messages keep theirs
	msgs := f.msgs[:0]
	for {
		batch, rest, base, ok, err := nextBatch(records)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		records = rest
		if magic := int8(batch[batchMagicAt]); magic != 2 {
			if len(msgs) > 0 {
				break // hand out what came before it; the next fetch starts here
			}
			return nil, &FormatError{Topic: f.Topic, Partition: f.Partition, Offset: base, Magic: magic}
		}
		if msgs, err = f.decodeBatch(batch, base, hwm, msgs); err != nil {
			return nil, err
		}
	}
	f.msgs = msgs
	return msgs, nil
}

// Batch is the header of one v2 record batch: what kafkatxn's producer
// looks for to learn whether a batch or a transaction marker of its own is
// in the log.
type Batch struct {
	BaseOffset, LastOffset int64
	ProducerID             int64 // -1: none
	ProducerEpoch          int16
	BaseSequence           int32
	Transactional, Control bool
	Commit                 bool // of a control batch: a commit (true) or an abort marker
	attrs                  int16
	firstTS, maxTS         int64
	count                  int32
	body                   []byte // the records, compressed as attrs say
}

// parseBatch reads the header of one v2 batch, its CRC checked.
func parseBatch(batch []byte, base int64) (Batch, error) {
	if len(batch) < batchFixed {
		return Batch{}, fmt.Errorf("%w: batch at %d of %d bytes", ErrMalformed, base, len(batch))
	}
	if crc := binary.BigEndian.Uint32(batch[batchCRCAt:]); crc != crc32.Checksum(batch[batchAttrsAt:], castagnoli) {
		return Batch{}, fmt.Errorf("%w: batch at %d: CRC mismatch", ErrMalformed, base)
	}
	h := wireReader{b: batch[batchAttrsAt:batchFixed]}
	b := Batch{BaseOffset: base, attrs: h.int16(), body: batch[batchFixed:]}
	b.LastOffset = base + int64(h.int32())
	b.firstTS = h.int64()
	b.maxTS = h.int64()
	b.ProducerID, b.ProducerEpoch, b.BaseSequence = h.int64(), h.int16(), h.int32()
	b.count = h.int32()
	b.Transactional, b.Control = b.attrs&attrTxn != 0, b.attrs&attrControl != 0
	return b, nil
}

// decodeBatch appends the committed records of one v2 record batch at or
// after f.Next to msgs, and moves f.Next past the batch.
func (f *Fetcher) decodeBatch(batch []byte, base, hwm int64, msgs []kafka.Message) ([]kafka.Message, error) {
	b, err := parseBatch(batch, base)
	if err != nil {
		return msgs, err
	}
	for len(f.aborted) > 0 && f.aborted[0].firstOffset <= b.LastOffset {
		if !slices.Contains(f.pids, f.aborted[0].producerID) {
			f.pids = append(f.pids, f.aborted[0].producerID)
		}
		f.aborted = f.aborted[1:]
	}
	if b.LastOffset < f.Next || (!b.Control && b.Transactional && b.ProducerID >= 0 && slices.Contains(f.pids, b.ProducerID)) {
		// All before the position (a compressed batch fetched again), or
		// a batch of an aborted transaction.
		f.Next = max(f.Next, b.LastOffset+1)
		return msgs, nil
	}
	from := len(msgs)
	if msgs, err = f.decodeRecords(b, hwm, msgs); err != nil {
		return msgs[:from], err
	}
	if b.Control {
		// An abort marker ends its producer's aborted transaction. Control
		// records are never handed out.
		if !isCommit(msgs[from:]) {
			f.pids = slices.DeleteFunc(f.pids, func(p int64) bool { return p == b.ProducerID })
		}
		msgs = msgs[:from]
	}
	f.Next = b.LastOffset + 1
	return msgs, nil
}

// isCommit reports whether the records of a control batch are a commit
// marker: a control record's key is a version (int16) and a type (int16: 0
// abort, 1 commit).
func isCommit(recs []kafka.Message) bool {
	for _, m := range recs {
		if len(m.Key) >= 4 && binary.BigEndian.Uint16(m.Key[2:]) == 0 {
			return false
		}
	}
	return len(recs) > 0
}

// decodeRecords decompresses b's records and appends those at or after
// f.Next to msgs.
func (f *Fetcher) decodeRecords(b Batch, hwm int64, msgs []kafka.Message) ([]kafka.Message, error) {
	base, firstTS, body := b.BaseOffset, b.firstTS, b.body
	if codec := compress.Compression(b.attrs & attrCodec); codec != 0 {
		c := codec.Codec()
		if c == nil {
			return msgs, fmt.Errorf("%w: batch at %d: unknown compression %d", ErrMalformed, base, codec)
		}
		zr := c.NewReader(bytes.NewReader(body))
		var out bytes.Buffer
		out.Grow(4 * len(body))
		_, err := out.ReadFrom(zr)
		_ = zr.Close()
		if err != nil {
			return msgs, fmt.Errorf("%w: batch at %d: %s: %w", ErrMalformed, base, c.Name(), err)
		}
		body = out.Bytes()
	}
	count := int(b.count)
	logTime := b.attrs&attrLogTime != 0
	if count < 0 || count > len(body) {
		return msgs, fmt.Errorf("%w: batch at %d: %d records in %d bytes", ErrMalformed, base, count, len(body))
	}
	if cap(f.hdrs)-len(f.hdrs) < 4*count {
		f.hdrs = make([]kafka.Header, 0, 4*count) // the earlier records keep theirs
	}
	r := wireReader{b: body}
	for range count {
		size := r.varint()
		rec := wireReader{b: r.take(int(size))}
		if r.bad {
			return msgs, fmt.Errorf("%w: batch at %d: record length %d", ErrMalformed, base, size)
		}
		rec.int8() // attributes: unused
		ts := firstTS + rec.varint()
		if logTime {
			// A LogAppendTime topic: the broker stamped the batch with
			// its append time, which the Java consumer reports for every
			// record, the producer's own times left in the records.
			ts = b.maxTS
		}
		off := base + rec.varint()
		key := rec.varBytes()
		value := rec.varBytes()
		nh := rec.varint()
		if nh < 0 || nh > int64(len(rec.b)) {
			return msgs, fmt.Errorf("%w: batch at %d: %d headers", ErrMalformed, base, nh)
		}
		var headers []kafka.Header
		if nh > 0 {
			from := len(f.hdrs)
			for range nh {
				k := rec.varBytes()
				v := rec.varBytes()
				// The key's bytes are never written again (the buffer is
				// this fetch's alone), so a string can share them.
				f.hdrs = append(f.hdrs, kafka.Header{Key: unsafe.String(unsafe.SliceData(k), len(k)), Value: v})
			}
			headers = f.hdrs[from:len(f.hdrs):len(f.hdrs)]
		}
		if rec.bad {
			return msgs, fmt.Errorf("%w: batch at %d: record at %d", ErrMalformed, base, off)
		}
		if off < f.Next {
			continue
		}
		msgs = append(msgs, kafka.Message{
			Topic: f.Topic, Partition: f.Partition, Offset: off, HighWaterMark: hwm,
			Key: key, Value: value, Headers: headers, Time: makeTime(ts),
		})
	}
	if r.bad {
		return msgs, fmt.Errorf("%w: batch at %d", ErrMalformed, base)
	}
	return msgs, nil
}

// makeTime is kafka-go's conversion of a record's timestamp.
func makeTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.Unix(ms/1000, (ms%1000)*int64(time.Millisecond)).UTC()
}
