package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// Publisher publishes webhook deliveries to one Kafka topic and returns only
// once every in-sync replica has acknowledged them. Its Publish method is an
// idempotency.Func. A Publisher is safe for concurrent use; concurrent
// Publishes share batches.
type Publisher struct {
	// cur is the generation of Writers and Transport that Publish uses;
	// a reset replaces it (see Options.ResetAfter).
	cur    atomic.Pointer[writers]
	codecs [2]kafka.Compression // of the shared batches, of a record alone
	limits limits
	// transport is Options.Transport (or a new one): the template each
	// generation copies, and what CheckDurability reads through.
	transport *kafka.Transport
	brokers   []string
	topic     string
	opts      Options

	inst instruments

	mu        sync.Mutex // serialises resets and Close
	closed    bool
	lastReset time.Time
	resets    int
	retiring  sync.WaitGroup // replaced generations still closing

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
	if opts.ResetAfter == 0 {
		opts.ResetAfter = DefaultResetAfter
	}
	lim := opts.limits(ctx, brokers, transport, topic, large)
	p := &Publisher{
		codecs:    [2]kafka.Compression{small, large},
		limits:    lim,
		transport: transport,
		brokers:   append([]string(nil), brokers...),
		topic:     topic,
		opts:      opts,
		inst:      inst,
		lastReset: opts.Now(),
	}
	p.cur.Store(p.newWriters())
	if !opts.SkipDurabilityCheck {
		warnDurability(ctx, p.brokers, transport, topic, opts)
	}
	return p, nil
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
	msg := kafka.Message{Key: key, Value: d.Body, Headers: Headers(d)}
	g := p.acquire()
	if g == nil {
		err = &definiteError{err: errPublisherClosed}
	} else {
		err = p.write(ctx, g, d, msg)
		g.use.RUnlock()
	}
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
	if g != nil {
		p.observe(ctx, g, err)
	}
	return publishError(d, p.topic, err)
}

// publishError wraps a Publish error with the delivery and the topic, and
// with idempotency.ErrOutcomeUnknown when IsOutcomeUnknown(err): the
// Handler then holds the delivery's key instead of releasing it.
func publishError(d idempotency.Delivery, topic string, err error) error {
	switch {
	case err == nil:
		return nil
	case IsOutcomeUnknown(err):
		return fmt.Errorf("kafkapub: publish %q to %s: %w: %w", d.Key, topic, idempotency.ErrOutcomeUnknown, err)
	default:
		return fmt.Errorf("kafkapub: publish %q to %s: %w", d.Key, topic, err)
	}
}

// write sends msg by the route its size calls for (see limits.place). A
// broker that refuses the record as too large, which a compression estimate
// can get wrong by a few bytes, sends it through the claim check, or gets a
// 413: the broker refuses every attempt of it alike.
func (p *Publisher) write(ctx context.Context, g *writers, d idempotency.Delivery, msg kafka.Message) error {
	msg, r, err := p.limits.place(ctx, d, msg, true)
	if err != nil {
		return err
	}
	w := g.small
	if r == routeAlone {
		w = g.large
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
	return g.small.WriteMessages(ctx, msg)
}

// Close flushes nothing (Publish is synchronous), closes the writers and
// their connections, and waits for the writers a reset replaced to close.
// Publish after Close fails. Close is safe to call twice.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true // no reset from now on
		g := p.cur.Load()
		p.mu.Unlock()
		g.closing.Store(true)
		g.use.Lock() // kafka-go's Writer.Close must not race WriteMessages
		p.closeErr = g.close()
		g.use.Unlock()
		p.retiring.Wait()
		p.transport.CloseIdleConnections() // New's and CheckDurability's requests
	})
	return p.closeErr
}
