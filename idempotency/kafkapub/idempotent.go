package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// IdempotentPublisher publishes like Publisher, through kafkatxn's
// idempotent producer: every batch carries a producer id, epoch and
// sequence number, so a retry after a lost acknowledgement is dropped by the
// broker instead of written twice. It needs brokers with idempotence enabled
// (Kafka 0.11+, the default since 3.0); use Publisher where it is disabled.
// It is safe for concurrent use.
type IdempotentPublisher struct {
	p          *kafkatxn.Producer
	brokers    []string
	transport  *kafka.Transport
	topic      string
	partitions []int
	limits     limits
	opts       Options
	inst       instruments
}

// NewIdempotent returns an IdempotentPublisher to topic. It reads the
// topic's partitions once: partitions added later are not used until a
// restart. Options.MaxAttempts and BatchTimeout do not apply (the producer
// retries a batch until WriteTimeout × MaxAttempts, the delivery timeout).
// Like New, it reports the same metrics through Options.MeterProvider, and
// unless Options.SkipDurabilityCheck is set warns through Options.Logger
// when the topic makes acks=all weaker than it sounds.
func NewIdempotent(ctx context.Context, brokers []string, topic string, opts Options) (*IdempotentPublisher, error) {
	if len(brokers) == 0 || topic == "" {
		return nil, fmt.Errorf("%w: brokers and topic are required", ErrInvalidOptions)
	}
	if opts.MaxAttempts < 0 || opts.WriteTimeout < 0 {
		return nil, fmt.Errorf("%w: negative MaxAttempts or WriteTimeout", ErrInvalidOptions)
	}
	if opts.PartitionKey == nil {
		// As Publisher: by tenant, so one tenant's events stay in order
		// on one partition (by delivery id they spread, and windows keyed
		// by tenant get a partial row per partition).
		opts.PartitionKey = defaultPartitionKey
	}
	if opts.Balancer == nil {
		opts.Balancer = kafka.Murmur2Balancer{}
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	opts.observeDefaults()
	_, _, err := opts.codecs() // validated; kafkatxn writes uncompressed batches
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
	md, err := (&kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport, Timeout: opts.WriteTimeout}).
		Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("kafkapub: metadata of %s: %w", topic, err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name == topic && t.Error == nil {
			for _, p := range t.Partitions {
				parts = append(parts, p.ID)
			}
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("kafkapub: topic %s has no partitions", topic)
	}
	slices.Sort(parts)
	if !opts.SkipDurabilityCheck {
		warnDurability(ctx, brokers, transport, topic, opts)
	}
	lim := opts.limits(ctx, brokers, transport, topic, 0)
	p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{
		// The producer waits for a batch in flight past Publish's ctx
		// until its outcome is known: a batch unanswered at the delivery
		// timeout (WriteTimeout) is sent again with its sequence number
		// until a broker answers, so Publish says written or not, never
		// "unknown" (but after Close). Two attempts fit in WriteTimeout.
		RequestTimeout:  opts.WriteTimeout / 2,
		DeliveryTimeout: opts.WriteTimeout,
		SettleUnknown:   true,
		Transport:       transport,
	})
	if err != nil {
		return nil, fmt.Errorf("kafkapub: %w", err)
	}
	return &IdempotentPublisher{
		p: p, brokers: slices.Clone(brokers), transport: transport, limits: lim,
		topic: topic, partitions: parts, opts: opts, inst: inst,
	}, nil
}

// CheckDurability reads the topic's min.insync.replicas and replication
// factor, as Publisher.CheckDurability.
func (p *IdempotentPublisher) CheckDurability(ctx context.Context) (Durability, error) {
	return checkDurability(ctx, p.brokers, p.transport, p.topic)
}

// Publish writes one message for d, with the same key, value and headers
// as Publisher.Publish, and returns nil once every in-sync replica has it.
// A retry after a lost acknowledgement does not write it twice.
//
// Publish returns when the message's outcome is known, which for a
// message sent to a broker that stopped answering is after ctx ends: its
// batch is sent again with the same sequence number until a broker
// answers, and Publish then returns nil (written once) or an error that
// says it was not written. Waiting behind an earlier batch of its
// partition, it ends with ctx, having sent nothing. Only Close, ending
// that wait, leaves an error for which IsOutcomeUnknown is true (it wraps
// kafkatxn.ErrOutcomeUnknown and idempotency.ErrOutcomeUnknown): the
// message may be in the log, and the Handler holds the delivery's key
// until its PendingTTL.
func (p *IdempotentPublisher) Publish(ctx context.Context, d idempotency.Delivery) error {
	key, err := p.opts.PartitionKey(d)
	if err != nil {
		return fmt.Errorf("kafkapub: partition key of %q: %w", d.Key, err)
	}
	msg := kafka.Message{Key: key, Value: d.Body, Headers: Headers(d)}
	part := p.opts.Balancer.Balance(msg, p.partitions...)
	start := p.opts.Now()
	msg, _, err = p.limits.place(ctx, d, msg, false)
	if err == nil {
		_, err = p.p.Produce(ctx, p.topic, part, record(msg))
		if errors.Is(err, kafka.MessageSizeTooLarge) {
			if p.limits.payloads == nil {
				err = p.limits.tooLarge(d, recordBytes(msg), -1, err)
			} else if msg, err = p.limits.claimCheck(ctx, d, msg); err == nil {
				_, err = p.p.Produce(ctx, p.topic, part, record(msg))
			}
		}
	}
	var rej *idempotency.RejectError
	if err != nil && !errors.As(err, &rej) {
		if kafkatxn.IsOutcomeUnknown(err) {
			err = &retriedError{err: err}
		} else {
			err = &definiteError{err: err}
		}
	}
	p.inst.record(ctx, start, p.opts.Now(), err)
	return publishError(d, p.topic, err)
}

func record(m kafka.Message) kafkatxn.Record {
	rec := kafkatxn.Record{Key: m.Key, Value: m.Value, Headers: make([]kafkatxn.Header, len(m.Headers))}
	for i, h := range m.Headers {
		rec.Headers[i] = kafkatxn.Header{Key: h.Key, Value: h.Value}
	}
	return rec
}

// Close closes the producer. It is safe to call twice.
func (p *IdempotentPublisher) Close() error { return p.p.Close() }

// definiteError is a kafkatxn error that says the message was not written
// (anything but kafkatxn.ErrOutcomeUnknown), even when it is not a broker's
// answer: a ctx that ended before the send, a closed producer. It unwraps to
// the error, so errors.Is and errors.As still match it.
type definiteError struct {
	err error
}

func (e *definiteError) Error() string { return e.err.Error() }

func (e *definiteError) Unwrap() error { return e.err }
