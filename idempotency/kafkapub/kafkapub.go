package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/internal/meter"
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
	// authentication.
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

// Publisher publishes webhook deliveries to one Kafka topic and returns only
// once every in-sync replica has acknowledged them. Its Publish method is an
// idempotency.Func. A Publisher is safe for concurrent use; concurrent
// Publishes share batches.
type Publisher struct {
	w         *kafka.Writer // shared batches of records that fit uncompressed
	large     *kafka.Writer // a record alone in its batch, compressed
	limits    limits
	transport *kafka.Transport
	brokers   []string
	topic     string
	opts      Options

	inst instruments

	closeOnce sync.Once
	closeErr  error
}

// New returns a Publisher to topic, reached through brokers. Unless
// Options.SkipDurabilityCheck is set, it reads the topic's
// min.insync.replicas and replication factor and logs a warning when acks=all
// is weaker than it sounds (see Durability.Weak). The check only warns; a
// failed check is logged too, and New still succeeds. The check ends with ctx
// or after Options.WriteTimeout, whichever comes first.
func New(ctx context.Context, brokers []string, topic string, opts Options) (*Publisher, error) {
	if len(brokers) == 0 || topic == "" {
		return nil, fmt.Errorf("%w: brokers and topic are required", ErrInvalidOptions)
	}
	if opts.BatchTimeout < 0 || opts.MaxAttempts < 0 || opts.WriteTimeout < 0 {
		return nil, fmt.Errorf("%w: negative BatchTimeout, MaxAttempts or WriteTimeout", ErrInvalidOptions)
	}
	if opts.PartitionKey == nil {
		opts.PartitionKey = defaultPartitionKey
	}
	if opts.Balancer == nil {
		opts.Balancer = kafka.Murmur2Balancer{}
	}
	if opts.BatchTimeout == 0 {
		opts.BatchTimeout = DefaultBatchTimeout
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	opts.observeDefaults()
	small, large, err := opts.codecs()
	if err != nil {
		return nil, err
	}
	inst, err := newInstruments(opts.MeterProvider)
	if err != nil {
		return nil, err
	}

	transport := opts.Transport
	if transport == nil {
		transport = &kafka.Transport{}
	}
	lim := opts.limits(ctx, brokers, transport, topic, large)
	writer := func(batchSize int, batchBytes int64, c kafka.Compression) *kafka.Writer {
		return &kafka.Writer{
			Addr:     kafka.TCP(brokers...),
			Topic:    topic,
			Balancer: opts.Balancer,
			// acks=all, explicitly: the zero value is acks=none, which
			// reports no error at all when the broker loses the message.
			RequiredAcks: kafka.RequireAll,
			Async:        false,
			BatchTimeout: opts.BatchTimeout,
			BatchSize:    batchSize,
			BatchBytes:   batchBytes,
			Compression:  c,
			MaxAttempts:  opts.MaxAttempts,
			WriteTimeout: opts.WriteTimeout,
			Transport:    transport,
		}
	}
	p := &Publisher{
		w: writer(0, int64(lim.batchBytes), small),
		// One record per batch, so the broker measures it alone.
		large:     writer(1, 1<<62, large),
		limits:    lim,
		transport: transport,
		brokers:   append([]string(nil), brokers...),
		topic:     topic,
		opts:      opts,
		inst:      inst,
	}
	if !opts.SkipDurabilityCheck {
		warnDurability(ctx, p.brokers, transport, topic, opts)
	}
	return p, nil
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

// instruments are the metrics both publishers report, with one meaning.
type instruments struct {
	published metric.Int64Counter
	latency   metric.Float64Histogram
}

func newInstruments(mp metric.MeterProvider) (instruments, error) {
	m := meter.New(mp, "idempotency/kafkapub")
	in := instruments{
		published: m.Counter("exactlyonce.kafkapub.messages", "{message}", "Publishes by result: ok, failed, unknown."),
		latency:   m.Histogram("exactlyonce.kafkapub.publish.duration", "s", "Time from Publish to the broker's acknowledgement."),
	}
	if err := m.Err(); err != nil {
		return instruments{}, fmt.Errorf("kafkapub: metrics: %w", err)
	}
	return in, nil
}

// record counts one Publish that started at start and ended with err.
func (in instruments) record(ctx context.Context, start, end time.Time, err error) {
	result := "ok"
	switch {
	case err == nil:
	case IsOutcomeUnknown(err):
		result = "unknown"
	default:
		result = "failed"
	}
	in.published.Add(ctx, 1, metric.WithAttributes(attribute.String("result", result)))
	in.latency.Record(ctx, end.Sub(start).Seconds())
}

// warnDurability logs, through opts.Logger, a topic whose settings make
// acks=all weaker than it sounds, or a check that could not be made. It is
// bounded by opts.WriteTimeout even when ctx is not: a broker that accepts
// connections but never answers must not hang start-up.
func warnDurability(ctx context.Context, brokers []string, transport *kafka.Transport, topic string, opts Options) {
	cctx, cancel := context.WithTimeout(ctx, opts.WriteTimeout)
	d, err := checkDurability(cctx, brokers, transport, topic)
	cancel()
	switch {
	case err != nil:
		opts.Logger.LogAttrs(ctx, slog.LevelWarn, "kafkapub: could not check the topic's durability settings",
			slog.String("topic", topic), slog.Any("error", err))
	case d.Weak():
		opts.Logger.LogAttrs(ctx, slog.LevelWarn, "kafkapub: acks=all is weaker than it sounds: "+d.Reason(),
			slog.String("topic", topic),
			slog.Int("min_insync_replicas", d.MinInSyncReplicas),
			slog.Int("replication_factor", d.ReplicationFactor))
	}
}

// Publish writes one message for d and returns nil only once the broker has
// acknowledged it with acks=all. The message's key comes from
// Options.PartitionKey, its value is d.Body, and its headers carry
// HeaderEventID (d.Key), HeaderSource, and HeaderEventType, HeaderHookID and
// HeaderRetry when set (see Headers; consumers read them with ReadMetadata).
//
// Publish may write d twice: kafka-go has no idempotent producer, so a retry
// after a lost acknowledgement, or a Publish whose ctx ends while the batch
// is in flight, can leave a copy behind even when Publish returns an error.
// IsOutcomeUnknown tells those errors apart. The event id header is what
// lets the downstream deduplicator drop the copy.
func (p *Publisher) Publish(ctx context.Context, d idempotency.Delivery) error {
	key, err := p.opts.PartitionKey(d)
	if err != nil {
		return fmt.Errorf("kafkapub: partition key of %q: %w", d.Key, err)
	}
	start := p.opts.Now()
	err = p.write(ctx, d, kafka.Message{Key: key, Value: d.Body, Headers: Headers(d)})
	if err != nil {
		err = flatten(err)
		var ke kafka.Error
		if p.opts.MaxAttempts > 1 && errors.As(err, &ke) && ke.Temporary() {
			// kafka-go retries a retriable refusal until MaxAttempts, so
			// this is the last of several answers; an earlier attempt may
			// have been written before its answer was lost.
			err = &retriedError{err: err}
		}
	}
	p.inst.record(ctx, start, p.opts.Now(), err)
	if err != nil {
		return fmt.Errorf("kafkapub: publish %q to %s: %w", d.Key, p.topic, err)
	}
	return nil
}

// write sends msg by the route its size calls for (see limits.place). A
// broker that refuses the record as too large, which a compression estimate
// can get wrong by a few bytes, sends it through the claim check, or gets a
// 413: the broker refuses every attempt of it alike.
func (p *Publisher) write(ctx context.Context, d idempotency.Delivery, msg kafka.Message) error {
	msg, r, err := p.limits.place(ctx, d, msg, true)
	if err != nil {
		return err
	}
	w := p.w
	if r == routeAlone {
		w = p.large
	}
	err = w.WriteMessages(ctx, msg)
	if !errors.Is(flatten(err), kafka.MessageSizeTooLarge) {
		return err
	}
	if p.limits.payloads == nil {
		return p.limits.tooLarge(d, recordBytes(msg), -1, flatten(err))
	}
	if msg, err = p.limits.claimCheck(ctx, d, msg); err != nil {
		return err
	}
	return p.w.WriteMessages(ctx, msg)
}

// Close flushes nothing (Publish is synchronous), closes the writers and
// their connections. Publish after Close fails. Close is safe to call twice.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closeErr = errors.Join(p.w.Close(), p.large.Close())
		p.transport.CloseIdleConnections()
	})
	return p.closeErr
}

// IsOutcomeUnknown reports whether a Publish error leaves it open whether the
// message was written: the broker may hold it although Publish failed. It
// returns false only for errors the broker answered with, which mean the
// message was not written (except NotEnoughReplicasAfterAppend, which means
// it was written to the leader but not replicated, and RequestTimedOut).
//
// A retriable refusal (NotEnoughReplicas, NotLeaderForPartition, ...) is
// definite only when it answered the one attempt. When Options.MaxAttempts
// allowed retries, kafka-go made several attempts and returns the last
// answer; an earlier attempt may have been written before its answer was
// lost, so Publish reports such an error as unknown. A non-retriable refusal
// (MessageSizeTooLarge, an authorization error) stays definite: the broker
// refuses every attempt of the same message alike.
//
// For IdempotentPublisher it follows kafkatxn's producer, which knows: only
// an error wrapping kafkatxn.ErrOutcomeUnknown is unknown.
//
// Either way the webhook is answered 503 and retried; the distinction tells
// an operator whether duplicates downstream are to be expected.
func IsOutcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	var rej *idempotency.RejectError
	if errors.As(err, &rej) {
		return false // refused before anything was sent
	}
	var re *retriedError
	if errors.As(err, &re) {
		return true
	}
	var de *definiteError
	if errors.As(err, &de) {
		return false
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && IsOutcomeUnknown(e) {
				return true
			}
		}
		return we.Count() == 0
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		return ke == kafka.NotEnoughReplicasAfterAppend || ke == kafka.RequestTimedOut
	}
	return true
}

// retriedError is a broker's refusal that was the last of several attempts.
// It unwraps to the refusal, so errors.Is and errors.As still match it.
type retriedError struct {
	err error
}

func (e *retriedError) Error() string {
	return e.err.Error() + " (after retries; an earlier attempt may have been written)"
}

func (e *retriedError) Unwrap() error { return e.err }

// flatten turns kafka.WriteErrors of one message into its one error, so that
// errors.Is and errors.As see it.
func flatten(err error) error {
	var we kafka.WriteErrors
	if errors.As(err, &we) && we.Count() == 1 {
		for _, e := range we {
			if e != nil {
				return e
			}
		}
	}
	return err
}

// Durability is what a topic's configuration makes of acks=all.
type Durability struct {
	Topic string
	// MinInSyncReplicas is the topic's min.insync.replicas: how many
	// replicas must hold a write before acks=all acknowledges it.
	MinInSyncReplicas int
	// ReplicationFactor is the number of replicas of the topic's
	// partitions (the smallest, if they differ).
	ReplicationFactor int
}

// Weak reports whether an acknowledged write can be lost with a single
// broker: with min.insync.replicas 1, acks=all is acks=1 in disguise, since
// the leader alone may acknowledge when its followers fall behind.
func (d Durability) Weak() bool {
	return d.MinInSyncReplicas <= 1 || d.ReplicationFactor <= 1
}

// Reason explains Weak in one sentence, or returns "" when it is false.
func (d Durability) Reason() string {
	switch {
	case d.ReplicationFactor <= 1:
		return "the topic has a single replica, so one broker's disk holds every acknowledged event"
	case d.MinInSyncReplicas <= 1:
		return "min.insync.replicas is " + strconv.Itoa(d.MinInSyncReplicas) +
			", so the leader alone may acknowledge a write (acks=1 in disguise); set it to " +
			strconv.Itoa(min(2, d.ReplicationFactor)) + " or more"
	default:
		return ""
	}
}

// CheckDurability reads the topic's min.insync.replicas (DescribeConfigs)
// and replication factor (Metadata).
func (p *Publisher) CheckDurability(ctx context.Context) (Durability, error) {
	return checkDurability(ctx, p.brokers, p.transport, p.topic)
}

func checkDurability(ctx context.Context, brokers []string, transport *kafka.Transport, topic string) (Durability, error) {
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport}
	d := Durability{Topic: topic}

	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return d, fmt.Errorf("kafkapub: metadata of %s: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return d, fmt.Errorf("kafkapub: metadata of %s: %w", topic, t.Error)
		}
		for _, part := range t.Partitions {
			if n := len(part.Replicas); d.ReplicationFactor == 0 || n < d.ReplicationFactor {
				d.ReplicationFactor = n
			}
		}
	}
	if d.ReplicationFactor == 0 {
		return d, fmt.Errorf("kafkapub: topic %s has no partitions", topic)
	}

	dc, err := c.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{
		Resources: []kafka.DescribeConfigRequestResource{{
			ResourceType: kafka.ResourceTypeTopic,
			ResourceName: topic,
			ConfigNames:  []string{"min.insync.replicas"},
		}},
	})
	if err != nil {
		return d, fmt.Errorf("kafkapub: describe configs of %s: %w", topic, err)
	}
	for _, r := range dc.Resources {
		if r.Error != nil {
			return d, fmt.Errorf("kafkapub: describe configs of %s: %w", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != "min.insync.replicas" {
				continue
			}
			n, err := strconv.Atoi(e.ConfigValue)
			if err != nil {
				return d, fmt.Errorf("kafkapub: min.insync.replicas of %s is %q", topic, e.ConfigValue)
			}
			d.MinInSyncReplicas = n
		}
	}
	if d.MinInSyncReplicas == 0 {
		return d, fmt.Errorf("kafkapub: topic %s reports no min.insync.replicas", topic)
	}
	return d, nil
}

// Ping reports whether the publisher can publish now: a fresh connection to
// a broker answers a metadata request for the topic, and every partition
// has a leader. It does not reuse the writer's connections, so a broker
// that stopped answering (paused, partitioned away) fails it within ctx.
// A readiness probe calls it.
func (p *Publisher) Ping(ctx context.Context) error {
	return ping(ctx, p.brokers, p.transport, p.topic)
}

// Ping is Publisher.Ping.
func (p *IdempotentPublisher) Ping(ctx context.Context) error {
	return ping(ctx, p.brokers, p.transport, p.topic)
}

func ping(ctx context.Context, brokers []string, transport *kafka.Transport, topic string) error {
	d := &kafka.Dialer{TLS: transport.TLS, SASLMechanism: transport.SASL}
	var errs []error
	for _, b := range brokers {
		err := pingBroker(ctx, d, b, topic)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("kafkapub: no broker answers for %s: %w", topic, errors.Join(errs...))
}

func pingBroker(ctx context.Context, d *kafka.Dialer, broker, topic string) error {
	c, err := d.DialContext(ctx, "tcp", broker)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	parts, err := c.ReadPartitions(topic)
	if err != nil {
		return fmt.Errorf("%s: %w", broker, err)
	}
	if len(parts) == 0 {
		return fmt.Errorf("%s: topic %s has no partitions", broker, topic)
	}
	for _, pt := range parts {
		if pt.Error != nil {
			return fmt.Errorf("%s: partition %d: %w", broker, pt.ID, pt.Error)
		}
		if pt.Leader.Host == "" {
			return fmt.Errorf("%s: partition %d has no leader", broker, pt.ID)
		}
	}
	return nil
}
