package kafkatxn

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
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
	// Transport says how to connect: its TLS, SASL, Dial, DialTimeout,
	// ClientID and Resolver are used for the Reader's own connection to
	// the partition's leader (its connection pool is not). Default: plain
	// TCP.
	Transport *kafka.Transport
}

// Reader reads one partition with isolation level read_committed, and
// filters it the way the Java consumer does: records of aborted transactions
// and transaction control records are skipped. kafka-go's own ReadCommitted
// only stops at the last stable offset and hands out both. It reads through
// the same fetcher and decoder as kafkasource's chains.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	f kafkawire.Fetcher
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
	return &Reader{f: kafkawire.Fetcher{Dialer: kafkawire.TransportDialer(opts.Transport), Brokers: brokers, Topic: topic,
		Partition: partition, Next: offset, MaxBytes: opts.MaxBytes, MaxWait: opts.MaxWait}}, nil
}

// Offset returns the offset the next fetch starts at: one past the last
// record or control marker handed out or skipped.
func (r *Reader) Offset() int64 { return r.f.Next }

// Fetch returns the next committed records, at least one, waiting until
// there are some or ctx ends. The messages' Offset fields are their offsets;
// they have gaps where aborted records and control markers were skipped.
// An error from the broker (for example kafka.OffsetOutOfRange) is returned
// as is, wrapped; a record batch older than v2 as a *FormatError.
func (r *Reader) Fetch(ctx context.Context) ([]kafka.Message, error) {
	for {
		from := r.f.Next
		ms, err := r.f.Fetch(ctx)
		if err != nil {
			return nil, fmt.Errorf("kafkatxn: fetch %s/%d at %d: %w", r.f.Topic, r.f.Partition, from, err)
		}
		if len(ms) > 0 {
			return slices.Clone(ms), nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// FormatError is the error (wrapped) Fetch returns for a record batch older
// than the v2 format (Kafka before 0.11, not converted by the broker): it
// names the partition and the batch's offset.
type FormatError = kafkawire.FormatError

// Close closes the Reader's connection.
func (r *Reader) Close() error {
	r.f.Close()
	return nil
}
