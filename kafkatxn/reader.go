package kafkatxn

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// Defaults of ReaderOptions.
const (
	DefaultMaxBytes = 1 << 20
	DefaultMaxWait  = 500 * time.Millisecond
)

// ReaderOptions configures a Reader. The zero value is valid.
type ReaderOptions struct {
	// MaxBytes is the most one fetch returns. Default: DefaultMaxBytes.
	MaxBytes int
	// MaxWait is the longest a fetch waits at the end of the log. Default:
	// DefaultMaxWait.
	MaxWait time.Duration
	// Transport for broker connections. Default: a new kafka.Transport.
	Transport *kafka.Transport
}

// Reader reads one partition with isolation level read_committed, and
// filters it the way the Java consumer does: records of aborted transactions
// and transaction control records are skipped. kafka-go's own ReadCommitted
// only stops at the last stable offset and hands out both.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	cl        *kafka.Client
	transport *kafka.Transport
	topic     string
	partition int
	opts      ReaderOptions

	next int64
	// aborted are the aborted transactions the broker listed for the
	// fetched range that have not been passed yet, sorted by first offset.
	aborted []abortedTxn
	// abortingPIDs are the producers whose aborted transaction is open at
	// the current position: their transactional records are skipped until
	// their abort marker.
	abortingPIDs map[int64]bool
	buf          []kafka.Message
}

// NewReader returns a Reader of topic's partition starting at offset.
func NewReader(brokers []string, topic string, partition int, offset int64, opts ReaderOptions) (*Reader, error) {
	if len(brokers) == 0 || topic == "" || partition < 0 || offset < 0 {
		return nil, fmt.Errorf("%w: brokers, topic, partition >= 0 and offset >= 0 are required", ErrInvalidOptions)
	}
	if opts.MaxBytes < 0 || opts.MaxWait < 0 {
		return nil, fmt.Errorf("%w: negative MaxBytes or MaxWait", ErrInvalidOptions)
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxWait == 0 {
		opts.MaxWait = DefaultMaxWait
	}
	tr := opts.Transport
	if tr == nil {
		tr = &kafka.Transport{}
	}
	return &Reader{
		cl: &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}, transport: tr,
		topic: topic, partition: partition, opts: opts, next: offset, abortingPIDs: map[int64]bool{},
	}, nil
}

// Offset returns the offset the next fetch starts at: one past the last
// record or control marker handed out or skipped.
func (r *Reader) Offset() int64 { return r.next }

// Fetch returns the next committed records, at least one, waiting until
// there are some or ctx ends. The messages' Offset fields are their offsets;
// they have gaps where aborted records and control markers were skipped.
// An error from the broker (for example kafka.OffsetOutOfRange) is returned
// as is, wrapped.
func (r *Reader) Fetch(ctx context.Context) ([]kafka.Message, error) {
	for {
		fr, err := fetch(ctx, r.transport, r.cl.Addr, r.topic, r.partition, r.next, true, r.opts.MaxBytes, r.opts.MaxWait)
		if err != nil {
			return nil, err
		}
		if fr.err != nil {
			return nil, fmt.Errorf("kafkatxn: fetch %s/%d at %d: %w", r.topic, r.partition, r.next, fr.err)
		}
		r.buf = r.filter(fr, r.buf[:0])
		for i := range r.buf {
			r.buf[i].HighWaterMark = fr.highWatermark
		}
		if len(r.buf) > 0 {
			return slices.Clone(r.buf), nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// filter appends the committed records of fr to out and moves r.next past
// everything it looked at. The algorithm is the Java consumer's: the
// broker lists every aborted transaction overlapping the fetched range by
// producer id and first offset; a transactional batch of a producer whose
// aborted transaction has begun at or before the batch is skipped, until
// that producer's abort marker.
func (r *Reader) filter(fr *fetchResult, out []kafka.Message) []kafka.Message {
	for _, a := range fr.aborted {
		if !slices.Contains(r.aborted, a) {
			r.aborted = append(r.aborted, a)
		}
	}
	slices.SortFunc(r.aborted, func(a, b abortedTxn) int { return int(a.firstOffset - b.firstOffset) })
	for _, b := range fr.batches {
		if b.lastOffset < r.next {
			continue // a batch that starts before the position: already read
		}
		for len(r.aborted) > 0 && r.aborted[0].firstOffset <= b.lastOffset {
			r.abortingPIDs[r.aborted[0].producerID] = true
			r.aborted = r.aborted[1:]
		}
		switch {
		case b.control:
			if !b.commit {
				delete(r.abortingPIDs, b.producerID)
			}
		case b.transactional && r.abortingPIDs[b.producerID]:
			// a record of an aborted transaction
		default:
			for _, m := range b.records {
				if m.Offset >= r.next {
					out = append(out, m)
				}
			}
		}
		r.next = b.lastOffset + 1
	}
	return out
}

// Close releases the Reader's idle connections.
func (r *Reader) Close() error {
	if r.opts.Transport == nil {
		r.transport.CloseIdleConnections()
	}
	return nil
}
