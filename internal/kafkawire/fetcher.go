package kafkawire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// Fetcher reads one partition from Next on, one Fetch request at a time,
// with isolation level read_committed. Set its exported fields before the
// first Fetch. A Fetcher is not safe for concurrent use; Close is not safe
// beside a Fetch.
type Fetcher struct {
	// Dialer says how to reach the brokers: Resolver, DialFunc, TLS,
	// SASLMechanism, Timeout. Required.
	Dialer *kafka.Dialer
	// ClientID is sent with every request. Default: Dialer.ClientID, else
	// "exactlyonce".
	ClientID string
	// Brokers are asked for the partition's leader, in turn.
	Brokers   []string
	Topic     string
	Partition int
	// Next is the offset the next fetch starts at: one past the last
	// complete batch looked at.
	Next int64
	// MaxBytes is the partition's limit in one fetch; a first batch larger
	// than it is still returned whole (KIP-74).
	MaxBytes int
	// MaxWait is the longest the broker waits for a first record.
	MaxWait time.Duration
	// Uncommitted sends isolation level read_uncommitted, for FetchBatches
	// only: kafkatxn's producer looks for its own batches and markers,
	// which may lie past the last stable offset (another producer's
	// transaction still open before them). Fetch is read_committed
	// whatever this says.
	Uncommitted bool
	// HighWatermark is the partition's high watermark in the last
	// response, or 0 before the first.
	HighWatermark int64

	conn    net.Conn
	corr    int32
	req     []byte
	msgs    []kafka.Message
	hdrs    []kafka.Header
	aborted []abortedTxn
	pids    []int64 // producers whose aborted transaction is open at the batch being decoded
}

// Fetch sends one Fetch request and returns the committed records it got
// from Next on, possibly none (the broker's MaxWait ran out, or only
// control records and aborted ones came), and moves Next past them. The
// returned slice is reused by the next call; the messages' contents are
// not. A broker's error code is returned wrapping its kafka.Error (for
// example kafka.OffsetOutOfRange); a batch older than v2 as a
// *FormatError. On any error the connection is closed, so that the next
// Fetch looks the leader up again. When ctx ends, Fetch returns soon with
// an error wrapping ctx.Err() (context.Canceled or
// context.DeadlineExceeded), not the i/o timeout that interrupted it.
func (f *Fetcher) Fetch(ctx context.Context) ([]kafka.Message, error) {
	ms, err := f.fetch(ctx)
	if err != nil {
		f.Close()
		err = ctxErr(ctx, err)
	}
	return ms, err
}

// ctxErr returns err, or, when ctx ended, an error wrapping ctx.Err() that
// names err: a fetch cut short by its context ends with a read past the
// connection's deadline, which says nothing of why.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("kafkawire: %w (%v)", cerr, err)
	}
	return err
}

// Close closes the Fetcher's connection, if any; a later Fetch opens a new
// one.
func (f *Fetcher) Close() {
	if f.conn != nil {
		_ = f.conn.Close()
		f.conn = nil
	}
}

func (f *Fetcher) clientID() string {
	switch {
	case f.ClientID != "":
		return f.ClientID
	case f.Dialer.ClientID != "":
		return f.Dialer.ClientID
	}
	return "exactlyonce"
}

// connect dials the partition's leader.
func (f *Fetcher) connect(ctx context.Context) error {
	var errs []error
	for _, b := range f.Brokers {
		leader, err := f.Dialer.LookupLeader(ctx, "tcp", b, f.Topic, f.Partition)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c, err := Dial(ctx, f.Dialer, f.clientID(), net.JoinHostPort(leader.Host, strconv.Itoa(leader.Port)))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.conn = c
		return nil
	}
	return fmt.Errorf("kafkawire: connect to the leader of %s/%d: %w", f.Topic, f.Partition, errors.Join(errs...))
}

// responseLimit is the largest response fetch reads. A broker returns the
// first record batch whole even when it exceeds the request's max bytes,
// so that the consumer makes progress (KIP-74), and a topic's
// max.message.bytes may allow batches of many megabytes: the limit only
// guards against reading a length that is no Kafka response at all.
func (f *Fetcher) responseLimit() int64 {
	return max(int64(f.MaxBytes), 1<<30) + 1<<20
}

func (f *Fetcher) fetch(ctx context.Context) ([]kafka.Message, error) {
	buf, err := f.roundTrip(ctx, 1)
	if err != nil {
		return nil, err
	}
	return f.decodeResponse(buf)
}

// FetchBatches sends one Fetch request (read_uncommitted if Uncommitted)
// and returns the high watermark and the headers of the complete v2
// batches of the response, from the batch holding Next on, control
// batches included; batches older than v2 are left out (they have no
// producer ids). It does not move Next. On any error the connection is
// closed.
func (f *Fetcher) FetchBatches(ctx context.Context) ([]Batch, int64, error) {
	bs, hwm, err := f.fetchBatches(ctx)
	if err != nil {
		f.Close()
		err = ctxErr(ctx, err)
	}
	return bs, hwm, err
}

func (f *Fetcher) fetchBatches(ctx context.Context) ([]Batch, int64, error) {
	iso := int8(1)
	if f.Uncommitted {
		iso = 0
	}
	buf, err := f.roundTrip(ctx, iso)
	if err != nil {
		return nil, 0, err
	}
	hwm, records, err := f.parseResponse(buf)
	if err != nil {
		return nil, 0, err
	}
	var out []Batch
	for {
		raw, rest, base, ok, err := nextBatch(records)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			return out, hwm, nil
		}
		records = rest
		if raw[batchMagicAt] != 2 {
			continue
		}
		b, err := parseBatch(raw, base)
		if err != nil {
			return nil, 0, err
		}
		if b.Control {
			recs, err := f.decodeRecords(b, hwm, nil)
			if err != nil {
				return nil, 0, err
			}
			b.Commit = isCommit(recs)
		}
		b.body = nil
		out = append(out, b)
	}
}

// roundTrip sends one Fetch request with isolation level iso (0
// read_uncommitted, 1 read_committed) and returns its response after the
// correlation id.
func (f *Fetcher) roundTrip(ctx context.Context, iso int8) ([]byte, error) {
	if f.conn == nil {
		if err := f.connect(ctx); err != nil {
			return nil, err
		}
	}
	conn := f.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(f.MaxWait + 30*time.Second))
	f.corr++
	f.req = appendFetchRequest(f.req[:0], f.corr, f.clientID(), f.Topic, f.Partition, f.Next, iso, f.MaxBytes, f.MaxWait)
	if _, err := conn.Write(f.req); err != nil {
		return nil, err
	}
	var head [8]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(head[:4]))
	if corr := int32(binary.BigEndian.Uint32(head[4:])); corr != f.corr || size < 4 || int64(size) > f.responseLimit() {
		return nil, fmt.Errorf("%w: response of %d bytes for request %d (want %d)", ErrMalformed, size, corr, f.corr)
	}
	// A fresh buffer per response: the messages handed out are windows of
	// it, and their holder may keep them.
	buf := make([]byte, size-4)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// appendFetchRequest appends a size-prefixed Fetch v4 request for one
// partition.
func appendFetchRequest(b []byte, corr int32, clientID, topic string, partition int, offset int64,
	iso int8, maxBytes int, maxWait time.Duration) []byte {
	b = append(b, 0, 0, 0, 0)               // size, set below
	b = binary.BigEndian.AppendUint16(b, 1) // api key: Fetch
	b = binary.BigEndian.AppendUint16(b, 4) // api version
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = appendString(b, clientID)
	b = binary.BigEndian.AppendUint32(b, 0xffffffff) // replica id: -1, a consumer
	b = binary.BigEndian.AppendUint32(b, uint32(maxWait.Milliseconds()))
	b = binary.BigEndian.AppendUint32(b, 1) // min bytes
	// The request's limit is twice the partition's: with one partition per
	// request that changes nothing on Kafka, but kfake leaves out the
	// aborted transactions of a partition when the response fills up on
	// the request's limit instead of the partition's.
	b = binary.BigEndian.AppendUint32(b, uint32(min(2*int64(maxBytes), math.MaxInt32)))
	b = append(b, byte(iso))                // isolation level: 0 read_uncommitted, 1 read_committed
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
