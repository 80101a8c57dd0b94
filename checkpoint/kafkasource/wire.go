package kafkasource

// The chain's own fetch path: one Fetch request at a time for the chain's
// partition, its response read whole into a fresh buffer, and the record
// batches decoded from that buffer into kafka.Messages whose Key, Value and
// Headers are windows of it. kafka-go's Reader decodes the same bytes with
// a copy and an allocation per key, value and header, a read deadline per
// record, and a channel send per record to the goroutine that fetches; in
// the end-to-end benchmark that was most of the chain's CPU beside its own
// work (BENCHMARKS.md). The messages are those kafka-go's Reader hands out
// for the same log (TestWireFetcherMatchesKafkaGo), field for field.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"
	"unsafe"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/backoff"
)

// errMalformed marks a fetch response or record batch this decoder cannot
// read (truncated, a bad length or CRC): the fetch fails rather than hand
// out records it is not sure of.
var errMalformed = errors.New("kafkasource: malformed fetch response")

// errLegacyFormat marks a batch in a message format older than v2 (Kafka
// before 0.11), which only kafka-go's Reader decodes.
var errLegacyFormat = errors.New("kafkasource: message format older than v2")

// wireUsable reports whether the wire fetcher can connect the way d says:
// plain TCP, optionally through d.DialFunc. TLS, SASL and a custom
// Resolver are left to kafka-go's Reader.
func wireUsable(d *kafka.Dialer) bool {
	return d.TLS == nil && d.SASLMechanism == nil && d.Resolver == nil
}

// wireFetcher reads one partition from next on, for one chain.
type wireFetcher struct {
	dialer    *kafka.Dialer
	brokers   []string
	topic     string
	partition int
	next      int64
	isolation int8
	maxBytes  int
	maxWait   time.Duration
	log       *slog.Logger
	// legacy is kafka-go's Reader, once a batch older than v2 was met: it
	// reads the partition from there on.
	legacy func(next int64) (fetcher, error)

	conn    net.Conn
	corr    int32
	req     []byte
	msgs    []kafka.Message // reused: the mailbox copies the messages out
	pending []kafka.Message // of FetchMessage
	old     fetcher
	failed  int // consecutive failed fetches, for the backoff
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fetchBatch returns the next fetched records, at least one, waiting until
// there are some or ctx ends. Connection failures and broker errors are
// retried with a backoff, as kafka-go's Reader does; an offset out of range
// is returned (wrapping kafka.OffsetOutOfRange). The returned slice is
// reused by the next call; the messages' contents are not.
func (f *wireFetcher) fetchBatch(ctx context.Context) ([]kafka.Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if f.old != nil {
			m, err := f.old.FetchMessage(ctx)
			if err != nil {
				return nil, err
			}
			f.msgs = append(f.msgs[:0], m)
			return f.msgs, nil
		}
		ms, err := f.fetchOnce(ctx)
		switch {
		case err == nil:
			f.failed = 0
			if len(ms) > 0 {
				return ms, nil
			}
			continue
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, kafka.OffsetOutOfRange):
			return nil, err
		case errors.Is(err, errLegacyFormat):
			f.closeConn()
			if f.old, err = f.legacy(f.next); err != nil {
				return nil, err
			}
			continue
		}
		f.closeConn()
		f.failed++
		level := slog.LevelDebug // a broker restarting or moving is routine
		if errors.Is(err, errMalformed) {
			level = slog.LevelWarn // not routine: say so while retrying
		}
		f.log.Log(ctx, level, "kafkasource: fetch failed, retrying", "topic", f.topic, "partition", f.partition,
			"offset", f.next, "failures", f.failed, "err", err)
		// Doubling from 100 ms to 1 s, no jitter: each partition's fetcher
		// is on its own schedule already.
		wait := backoff.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}.Delay(f.failed, nil)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// FetchMessage hands out fetched records one at a time; the chain takes
// them a fetch at a time with fetchBatch.
func (f *wireFetcher) FetchMessage(ctx context.Context) (kafka.Message, error) {
	if len(f.pending) == 0 {
		ms, err := f.fetchBatch(ctx)
		if err != nil {
			return kafka.Message{}, err
		}
		f.pending = append(f.pending[:0], ms...)
	}
	m := f.pending[0]
	f.pending = f.pending[1:]
	return m, nil
}

func (f *wireFetcher) Close() error {
	f.closeConn()
	if f.old != nil {
		return f.old.Close()
	}
	return nil
}

func (f *wireFetcher) closeConn() {
	if f.conn != nil {
		_ = f.conn.Close()
		f.conn = nil
	}
}

// connect dials the partition's leader.
func (f *wireFetcher) connect(ctx context.Context) error {
	var errs []error
	for _, b := range f.brokers {
		leader, err := f.dialer.LookupLeader(ctx, "tcp", b, f.topic, f.partition)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		addr := net.JoinHostPort(leader.Host, strconv.Itoa(leader.Port))
		var c net.Conn
		if f.dialer.DialFunc != nil {
			c, err = f.dialer.DialFunc(ctx, "tcp", addr)
		} else {
			nd := net.Dialer{Timeout: f.dialer.Timeout, Deadline: f.dialer.Deadline, LocalAddr: f.dialer.LocalAddr,
				FallbackDelay: f.dialer.FallbackDelay, KeepAlive: f.dialer.KeepAlive}
			c, err = nd.DialContext(ctx, "tcp", addr)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.conn = c
		return nil
	}
	return fmt.Errorf("kafkasource: connect to the leader of %s/%d: %w", f.topic, f.partition, errors.Join(errs...))
}

// responseLimit is the largest response fetchOnce reads. A broker returns
// the first record batch whole even when it exceeds the request's max
// bytes, so that the consumer makes progress (KIP-74), and a topic's
// max.message.bytes may allow batches of many megabytes: the limit only
// guards against reading a length that is no Kafka response at all.
func (f *wireFetcher) responseLimit() int64 {
	return max(int64(f.maxBytes), 1<<30) + 1<<20
}

// fetchOnce sends one Fetch request (v4: isolation level, aborted
// transactions) and decodes its response.
func (f *wireFetcher) fetchOnce(ctx context.Context) ([]kafka.Message, error) {
	if f.conn == nil {
		if err := f.connect(ctx); err != nil {
			return nil, err
		}
	}
	conn := f.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(f.maxWait + 30*time.Second))
	f.corr++
	f.req = appendFetchRequest(f.req[:0], f.corr, f.dialer.ClientID, f.topic, f.partition, f.next,
		f.isolation, f.maxBytes, f.maxWait)
	if _, err := conn.Write(f.req); err != nil {
		return nil, err
	}
	var head [8]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(head[:4]))
	if corr := int32(binary.BigEndian.Uint32(head[4:])); corr != f.corr || size < 4 || int64(size) > f.responseLimit() {
		return nil, fmt.Errorf("%w: response of %d bytes for request %d (want %d)", errMalformed, size, corr, f.corr)
	}
	// A fresh buffer per response: the messages handed out are windows of
	// it, and the chain may keep them.
	buf := make([]byte, size-4)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return nil, err
	}
	return f.decodeResponse(buf)
}

// appendFetchRequest appends a size-prefixed Fetch v4 request for one
// partition.
func appendFetchRequest(b []byte, corr int32, clientID, topic string, partition int, offset int64,
	isolation int8, maxBytes int, maxWait time.Duration) []byte {
	b = append(b, 0, 0, 0, 0)               // size, set below
	b = binary.BigEndian.AppendUint16(b, 1) // api key: Fetch
	b = binary.BigEndian.AppendUint16(b, 4) // api version
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = appendString(b, clientID)
	b = binary.BigEndian.AppendUint32(b, 0xffffffff) // replica id: -1, a consumer
	b = binary.BigEndian.AppendUint32(b, uint32(maxWait.Milliseconds()))
	b = binary.BigEndian.AppendUint32(b, 1) // min bytes
	b = binary.BigEndian.AppendUint32(b, uint32(maxBytes))
	b = append(b, byte(isolation))
	b = binary.BigEndian.AppendUint32(b, 1) // one topic
	b = appendString(b, topic)
	b = binary.BigEndian.AppendUint32(b, 1) // one partition
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	b = binary.BigEndian.AppendUint64(b, uint64(offset))
	b = binary.BigEndian.AppendUint32(b, uint32(maxBytes))
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// wireReader reads big-endian fields from a buffer; the first read past its
// end sets bad, and every later read returns zero.
type wireReader struct {
	b   []byte
	bad bool
}

func (r *wireReader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *wireReader) int8() int8 {
	v := r.take(1)
	if v == nil {
		return 0
	}
	return int8(v[0])
}

func (r *wireReader) int16() int16 {
	v := r.take(2)
	if v == nil {
		return 0
	}
	return int16(binary.BigEndian.Uint16(v))
}

func (r *wireReader) int32() int32 {
	v := r.take(4)
	if v == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(v))
}

func (r *wireReader) int64() int64 {
	v := r.take(8)
	if v == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func (r *wireReader) varint() int64 {
	if r.bad {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varBytes reads a varint length and that many bytes; kafka-go's Reader
// hands out nil for a null (-1) and for an empty value alike, and so does
// this.
func (r *wireReader) varBytes() []byte {
	n := r.varint()
	if n <= 0 {
		return nil
	}
	if n > int64(len(r.b)) {
		r.bad = true
		return nil
	}
	return r.take(int(n))
}

// decodeResponse decodes a Fetch v4 response (after its correlation id) for
// the one partition requested, and returns its records from f.next on,
// moving f.next past every complete batch.
func (f *wireFetcher) decodeResponse(buf []byte) ([]kafka.Message, error) {
	r := wireReader{b: buf}
	r.int32() // throttle time
	if n := r.int32(); n != 1 && !r.bad {
		return nil, fmt.Errorf("%w: %d topics", errMalformed, n)
	}
	r.take(int(r.int16())) // topic name
	if n := r.int32(); n != 1 && !r.bad {
		return nil, fmt.Errorf("%w: %d partitions", errMalformed, n)
	}
	r.int32() // partition
	code := r.int16()
	hwm := r.int64()
	r.int64() // last stable offset
	if n := r.int32(); n > 0 {
		r.take(16 * int(n)) // aborted transactions: kafka-go's Reader ignores them too
	}
	records := r.take(int(r.int32()))
	if r.bad {
		return nil, fmt.Errorf("%w: partition header", errMalformed)
	}
	if code != 0 {
		return nil, fmt.Errorf("kafkasource: fetch %s/%d at %d: %w", f.topic, f.partition, f.next, kafka.Error(code))
	}
	msgs := f.msgs[:0]
	var hdrs []kafka.Header
	for len(records) >= 17 {
		base := int64(binary.BigEndian.Uint64(records))
		length := int(int32(binary.BigEndian.Uint32(records[8:])))
		if length < 0 {
			return nil, fmt.Errorf("%w: batch at %d of length %d", errMalformed, base, length)
		}
		if 12+length > len(records) {
			break // the response was cut at MaxBytes inside this batch
		}
		batch := records[:12+length]
		records = records[12+length:]
		if magic := batch[16]; magic != 2 {
			if len(msgs) > 0 {
				break // hand out what came before it; the next fetch starts here
			}
			return nil, fmt.Errorf("%w: magic %d at offset %d", errLegacyFormat, magic, base)
		}
		var err error
		if msgs, hdrs, err = f.decodeBatch(batch, base, hwm, msgs, hdrs); err != nil {
			return nil, err
		}
	}
	f.msgs = msgs
	return msgs, nil
}

// decodeBatch appends the records of one v2 record batch at or after f.next
// to msgs, and moves f.next past the batch.
func (f *wireFetcher) decodeBatch(batch []byte, base, hwm int64, msgs []kafka.Message, hdrs []kafka.Header) ([]kafka.Message, []kafka.Header, error) {
	const fixed = 61 // bytes before the records
	if len(batch) < fixed {
		return msgs, hdrs, fmt.Errorf("%w: batch at %d of %d bytes", errMalformed, base, len(batch))
	}
	if crc := binary.BigEndian.Uint32(batch[17:]); crc != crc32.Checksum(batch[21:], castagnoli) {
		return msgs, hdrs, fmt.Errorf("%w: batch at %d: CRC mismatch", errMalformed, base)
	}
	h := wireReader{b: batch[21:fixed]}
	attrs := h.int16()
	lastDelta := h.int32()
	firstTS := h.int64()
	h.int64()         // max timestamp: kafka-go's Reader uses the records' own, and so does this
	h.take(8 + 2 + 4) // producer id, epoch, base sequence
	count := h.int32()
	last := base + int64(lastDelta)
	if last < f.next {
		return msgs, hdrs, nil // all before the position: a compressed batch fetched again
	}
	body := batch[fixed:]
	if codec := compress.Compression(attrs & 7); codec != 0 {
		c := codec.Codec()
		if c == nil {
			return msgs, hdrs, fmt.Errorf("%w: batch at %d: unknown compression %d", errMalformed, base, codec)
		}
		zr := c.NewReader(bytes.NewReader(body))
		var out bytes.Buffer
		out.Grow(4 * len(body))
		_, err := out.ReadFrom(zr)
		_ = zr.Close()
		if err != nil {
			return msgs, hdrs, fmt.Errorf("%w: batch at %d: %s: %w", errMalformed, base, c.Name(), err)
		}
		body = out.Bytes()
	}
	if count < 0 || int(count) > len(body) {
		return msgs, hdrs, fmt.Errorf("%w: batch at %d: %d records in %d bytes", errMalformed, base, count, len(body))
	}
	if cap(hdrs)-len(hdrs) < 4*int(count) {
		hdrs = make([]kafka.Header, 0, 4*int(count)) // the earlier records keep theirs
	}
	r := wireReader{b: body}
	for range count {
		size := r.varint()
		rec := wireReader{b: r.take(int(size))}
		if r.bad {
			return msgs, hdrs, fmt.Errorf("%w: batch at %d: record length %d", errMalformed, base, size)
		}
		rec.int8() // attributes: unused
		ts := firstTS + rec.varint()
		off := base + rec.varint()
		key := rec.varBytes()
		value := rec.varBytes()
		nh := rec.varint()
		if nh < 0 || nh > int64(len(rec.b)) {
			return msgs, hdrs, fmt.Errorf("%w: batch at %d: %d headers", errMalformed, base, nh)
		}
		var headers []kafka.Header
		if nh > 0 {
			from := len(hdrs)
			for range nh {
				k := rec.varBytes()
				v := rec.varBytes()
				// The key's bytes are never written again (the buffer is
				// this fetch's alone), so a string can share them.
				hdrs = append(hdrs, kafka.Header{Key: unsafe.String(unsafe.SliceData(k), len(k)), Value: v})
			}
			headers = hdrs[from:len(hdrs):len(hdrs)]
		}
		if rec.bad {
			return msgs, hdrs, fmt.Errorf("%w: batch at %d: record at %d", errMalformed, base, off)
		}
		if off < f.next {
			continue
		}
		msgs = append(msgs, kafka.Message{
			Topic: f.topic, Partition: f.partition, Offset: off, HighWaterMark: hwm,
			Key: key, Value: value, Headers: headers, Time: makeTime(ts),
		})
	}
	if r.bad {
		return msgs, hdrs, fmt.Errorf("%w: batch at %d", errMalformed, base)
	}
	f.next = last + 1
	return msgs, hdrs, nil
}

// makeTime is kafka-go's conversion of a record's timestamp.
func makeTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.Unix(ms/1000, (ms%1000)*int64(time.Millisecond)).UTC()
}

// newWireFetcher returns the chain's own fetcher of p, positioned at next.
func (s *Source) newWireFetcher(p checkpoint.TopicPartition, next int64) *wireFetcher {
	iso := int8(1)
	if s.opts.ReadUncommitted {
		iso = 0
	}
	clientID := s.opts.Dialer.ClientID
	if clientID == "" {
		clientID = "exactlyonce"
	}
	d := *s.opts.Dialer
	d.ClientID = clientID
	return &wireFetcher{
		dialer: &d, brokers: s.group.Brokers, topic: p.Topic, partition: p.Partition, next: next,
		isolation: iso, maxBytes: s.opts.MaxBytes, maxWait: s.opts.MaxWait, log: s.log,
		legacy: func(next int64) (fetcher, error) { return s.newKafkaGoReader(p, next) },
	}
}
