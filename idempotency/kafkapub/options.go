package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// Defaults of Options.
const (
	// DefaultBatchTimeout is how long the writer waits for more messages
	// before sending a batch. kafka-go's own default of 1 s would make
	// every webhook wait a second: each Publish is synchronous.
	DefaultBatchTimeout = 2 * time.Millisecond
	// DefaultMaxAttempts is how many times kafka-go tries a batch. Every
	// retry may duplicate a message the broker had already written.
	DefaultMaxAttempts = 3
	// DefaultWriteTimeout bounds each produce request on the wire.
	DefaultWriteTimeout = 5 * time.Second
)

// ErrInvalidOptions is wrapped by the error New returns for an unusable
// configuration.
var ErrInvalidOptions = errors.New("kafkapub: invalid options")

// Options configures a Publisher. The zero value is valid.
type Options struct {
	// PartitionKey returns the message key of a delivery: the entity whose
	// events must stay in order, for example the organisation id. Messages
	// with one key go to one partition, in publish order. An error fails
	// the Publish (and so answers the webhook 503). Default:
	// Delivery.Partition (the provider's tenant: GitHub organization or
	// owner, Jira site and project), else the delivery key, which spreads
	// load but orders nothing.
	//
	// Window aggregates are kept per partition: a window key (for example
	// organisation and employee) must be derived from fields that the
	// partition key is derived from too, or one window's events spread
	// over partitions and each partition's processor writes a partial row.
	// See window.PartitionCheck.
	PartitionKey func(d idempotency.Delivery) ([]byte, error)
	// Balancer maps keys to partitions. Default kafka.Murmur2Balancer, the
	// Java client's partitioner, so producers in other languages agree.
	Balancer kafka.Balancer
	// BatchTimeout: see DefaultBatchTimeout.
	BatchTimeout time.Duration
	// MaxAttempts: see DefaultMaxAttempts.
	MaxAttempts int
	// WriteTimeout: see DefaultWriteTimeout. It also bounds New's
	// durability check.
	WriteTimeout time.Duration
	// ResetAfter is how many Publishes in a row may end with an unknown
	// outcome that no broker answered (a timeout, a broken connection) or
	// with a stale-metadata refusal (NotLeaderForPartition,
	// LeaderNotAvailable, ...) before Publisher replaces its kafka-go
	// Writers and Transport with fresh ones: after leader elections and
	// broker restarts kafka-go's cached connections, metadata and batch
	// queues do not always recover. Resets are at least WriteTimeout
	// apart, counted in exactlyonce.kafkapub.writer.resets and logged.
	// Default DefaultResetAfter; negative: never. IdempotentPublisher
	// ignores it.
	ResetAfter int
	// Compression is the codec of every batch, by Kafka's compression.type
	// names: none, gzip, snappy, lz4 or zstd. Consumers decompress on
	// their own. Default DefaultCompression.
	Compression string
	// LargeCompression is the codec of a delivery too large for the topic
	// uncompressed, which goes alone in its batch; if it does not fit
	// compressed either, it goes through Payloads, or is rejected with 413.
	// Default DefaultLargeCompression.
	LargeCompression string
	// MaxMessageBytes is the largest record batch the topic accepts.
	// Default: the topic's max.message.bytes, read by New (bounded by
	// WriteTimeout), else DefaultMaxMessageBytes with a warning.
	MaxMessageBytes int
	// Payloads, when set, keeps the payloads of deliveries too large for
	// the topic even compressed (the claim check): the payload is stored
	// under ClaimCheckName before a record referring to it is written, and
	// consumers read it back with Payload. Default nil: such deliveries
	// are refused with idempotency.Reject(413, reason), which the Handler
	// answers as a permanent failure.
	Payloads PayloadStore
	// SkipDurabilityCheck skips the start-up check of the topic's
	// min.insync.replicas and replication factor. Default false.
	SkipDurabilityCheck bool
	// Transport connects to the brokers, for both the writes and the
	// durability check: set its TLS (a *tls.Config) and SASL
	// (sasl/plain.Mechanism, sasl/scram.Mechanism) to reach a managed
	// Kafka. Default: a new kafka.Transport, plain TCP without
	// authentication. Publisher writes through copies of its
	// configuration, a new one after each reset (see ResetAfter).
	Transport *kafka.Transport
	// Logger receives the durability warning. Default: discards.
	Logger *slog.Logger
	// MeterProvider receives the metrics. Default: no-op.
	MeterProvider metric.MeterProvider
	// Now is the clock for latency metrics. Default time.Now.
	Now func() time.Time
}

// defaultPartitionKey is Options.PartitionKey's default: the delivery's
// tenant, else its key.
func defaultPartitionKey(d idempotency.Delivery) ([]byte, error) {
	if d.Partition != "" {
		return []byte(d.Partition), nil
	}
	return []byte(d.Key), nil
}

// codecs checks and returns Compression and LargeCompression, defaults
// filled in.
func (o *Options) codecs() (small, large kafka.Compression, err error) {
	if o.Compression == "" {
		o.Compression = DefaultCompression
	}
	if o.LargeCompression == "" {
		o.LargeCompression = DefaultLargeCompression
	}
	if o.MaxMessageBytes < 0 {
		return 0, 0, fmt.Errorf("%w: negative MaxMessageBytes", ErrInvalidOptions)
	}
	if small, err = codec(o.Compression); err != nil {
		return 0, 0, err
	}
	large, err = codec(o.LargeCompression)
	return small, large, err
}

// limits reads the topic's max.message.bytes unless MaxMessageBytes is set,
// and logs the limits the publisher works with.
func (o *Options) limits(ctx context.Context, brokers []string, transport *kafka.Transport, topic string, large kafka.Compression) limits {
	n := o.MaxMessageBytes
	from := "Options.MaxMessageBytes"
	if n == 0 {
		cctx, cancel := context.WithTimeout(ctx, o.WriteTimeout)
		var err error
		n, err = maxMessageBytes(cctx, &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport}, topic)
		cancel()
		from = "the topic's max.message.bytes"
		if err != nil {
			n, from = DefaultMaxMessageBytes, "Kafka's default max.message.bytes"
			o.Logger.LogAttrs(ctx, slog.LevelWarn, "kafkapub: could not read the topic's max.message.bytes; assuming Kafka's default",
				slog.String("topic", topic), slog.Int("max_message_bytes", n), slog.Any("error", err))
		}
	}
	l := newLimits(topic, n, large, o.Payloads)
	o.Logger.LogAttrs(ctx, slog.LevelInfo, "kafkapub: record size limits",
		slog.String("topic", topic), slog.Int("max_message_bytes", l.maxMessage), slog.String("from", from),
		slog.Int("writer_batch_bytes", l.batchBytes), slog.String("compression", o.Compression),
		slog.String("large_compression", o.LargeCompression), slog.Bool("claim_check", o.Payloads != nil))
	return l
}

// observeDefaults fills in the Logger, MeterProvider and Now both
// publishers honour.
func (o *Options) observeDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MeterProvider == nil {
		o.MeterProvider = noop.NewMeterProvider()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}
