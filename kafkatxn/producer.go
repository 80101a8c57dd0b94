package kafkatxn

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/exactlyonce/exactlyonce/internal/backoff"
)

// Defaults of ProducerOptions.
const (
	// DefaultDeliveryTimeout bounds how long Produce retries one batch
	// (the Java client's delivery.timeout.ms is 120 s; a webhook gateway
	// answers sooner).
	DefaultDeliveryTimeout = 30 * time.Second
	// DefaultRequestTimeout bounds each produce request on the wire.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultInitialBackoff and DefaultMaxBackoff bound the pause between
	// two attempts of a request: it doubles from 50 ms after each failure
	// of the same request up to 1 s, lowered by up to a fifth at random
	// (the Java client's retry.backoff.ms and retry.backoff.max.ms, with
	// its 20 % jitter).
	DefaultInitialBackoff = 50 * time.Millisecond
	DefaultMaxBackoff     = time.Second
)

// backoffMultiplier and backoffJitter complete the retry policy.
const (
	backoffMultiplier = 2
	backoffJitter     = 0.2
)

// ProducerOptions configures a Producer. The zero value is valid.
type ProducerOptions struct {
	// DeliveryTimeout: see DefaultDeliveryTimeout.
	DeliveryTimeout time.Duration
	// RequestTimeout: see DefaultRequestTimeout.
	RequestTimeout time.Duration
	// InitialBackoff and MaxBackoff: see DefaultInitialBackoff. The
	// attempts of a batch are bounded by DeliveryTimeout, not by a count.
	InitialBackoff, MaxBackoff time.Duration
	// SettleUnknown keeps a batch whose outcome is unknown when
	// DeliveryTimeout runs out (an attempt went unanswered: the broker may
	// have written it) and resends it with the same sequence number, one
	// attempt each MaxBackoff, until a broker answers: Produce then
	// returns the batch's offset (it was written, once) or a definite
	// error (it was not), never ErrOutcomeUnknown, unless Close ends the
	// wait. Meanwhile the partition's later batches wait, or end with
	// their ctx. Default false: ErrOutcomeUnknown at DeliveryTimeout.
	SettleUnknown bool
	// Transport for broker connections. Default: a new kafka.Transport,
	// closed by Close.
	Transport *kafka.Transport
	// Now is the clock for record timestamps. Default time.Now.
	Now func() time.Time
}

func (o *ProducerOptions) setDefaults() error {
	if o.DeliveryTimeout < 0 || o.RequestTimeout < 0 || o.InitialBackoff < 0 || o.MaxBackoff < 0 {
		return fmt.Errorf("%w: negative timeout or backoff", ErrInvalidOptions)
	}
	if o.DeliveryTimeout == 0 {
		o.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.InitialBackoff == 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.InitialBackoff)
	}
	if o.MaxBackoff < o.InitialBackoff {
		return fmt.Errorf("%w: MaxBackoff %v below InitialBackoff %v", ErrInvalidOptions, o.MaxBackoff, o.InitialBackoff)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// policy is the retry policy of every request: doubling waits with 20 %
// jitter, bounded in time by the caller (DeliveryTimeout).
func (o *ProducerOptions) policy() backoff.Policy {
	return backoff.Policy{Initial: o.InitialBackoff, Max: o.MaxBackoff, Multiplier: backoffMultiplier, Jitter: backoffJitter}
}

// wait returns the pause after the attempt-th failed attempt (from 1).
func (o *ProducerOptions) wait(attempt int) time.Duration {
	return o.policy().Delay(attempt, rand.Float64)
}

// Producer is an idempotent Kafka producer (KIP-98): every batch carries the
// producer id, its epoch and the sequence number of its first record in the
// partition, so the broker drops a batch it already wrote when a retry
// follows a lost acknowledgement, and refuses one that would leave a gap.
//
// A Producer is safe for concurrent use. Batches to one partition are sent
// one at a time, in Produce order (one in flight per partition: the order
// and the sequence stay simple, and a retry never overtakes a later batch).
type Producer struct {
	cl        *kafka.Client
	transport *kafka.Transport
	ownTrans  bool
	opts      ProducerOptions

	mu     sync.Mutex // guards pid, epoch, parts, closed
	pid    int64
	epoch  int16
	parts  map[topicPartition]*partState
	closed bool
	// closing is closed by Close: it ends the waits between attempts of
	// a batch settling its outcome (ProducerOptions.SettleUnknown).
	closing chan struct{}
}

type topicPartition struct {
	topic     string
	partition int
}

// partState is the sequence of one partition. Its turn is held for the
// whole send of a batch, retries included.
type partState struct {
	// turn holds a token while a batch of the partition is being sent: a
	// channel rather than a mutex, so that a Produce waiting behind a
	// batch in flight (a broker that stopped answering) ends with its ctx.
	turn  chan struct{}
	epoch int16 // the epoch seq counts in; another epoch restarts at 0
	seq   int32
	// next is the offset after the last batch this producer wrote here, or
	// -1: where a search for a batch of unknown outcome starts.
	next int64
}

// NewProducer asks the cluster at brokers for a producer id (InitProducerID)
// and returns an idempotent Producer.
func NewProducer(ctx context.Context, brokers []string, opts ProducerOptions) (*Producer, error) {
	if len(brokers) == 0 {
		return nil, fmt.Errorf("%w: no brokers", ErrInvalidOptions)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	p := &Producer{transport: opts.Transport, opts: opts, parts: map[topicPartition]*partState{}, closing: make(chan struct{})}
	if p.transport == nil {
		p.transport, p.ownTrans = &kafka.Transport{}, true
	}
	p.cl = &kafka.Client{Addr: kafka.TCP(brokers...), Transport: p.transport, Timeout: opts.RequestTimeout}
	if err := p.initProducerID(ctx, -1, -1); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// initProducerID gets a producer id, or with KIP-360 bumps the epoch of
// (pid, epoch). p.mu is held or p is not shared yet.
func (p *Producer) initProducerID(ctx context.Context, pid int64, epoch int16) error {
	var lastErr error
	for attempt := 0; ; attempt++ {
		res, err := p.cl.InitProducerID(ctx, &kafka.InitProducerIDRequest{
			ProducerID: int(pid), ProducerEpoch: int(epoch), TransactionTimeoutMs: 60_000,
		})
		if err == nil {
			err = res.Error
		}
		if err == nil {
			p.pid, p.epoch = int64(res.Producer.ProducerID), int16(res.Producer.ProducerEpoch)
			return nil
		}
		lastErr = err
		if pid >= 0 && isKafkaErr(err, kafka.InvalidProducerEpoch, kafka.ProducerFenced, kafka.UnknownProducerId) {
			pid, epoch = -1, -1 // the bump was refused: start a new producer id
			continue
		}
		if !retriable(err) || attempt > 20 {
			return fmt.Errorf("kafkatxn: init producer id: %w", lastErr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatxn: init producer id: %w (last error: %w)", ctx.Err(), lastErr)
		case <-time.After(p.opts.wait(attempt + 1)):
		}
	}
}

// ProducerID returns the producer id and epoch now in use.
func (p *Producer) ProducerID() (id int64, epoch int16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid, p.epoch
}

// Produce writes recs as one batch to topic's partition and returns the
// offset of the first one once the leader and every in-sync replica have it
// (acks=all). It retries a batch whose answer was lost with the same
// sequence number, which the broker recognises as a duplicate, until
// DeliveryTimeout (or, with ProducerOptions.SettleUnknown, until a broker
// answers). An error wrapping ErrOutcomeUnknown means the batch may be in
// the log; any other error means it is not. When ctx ends while a batch is
// in flight Produce still waits for its outcome (at most DeliveryTimeout,
// without SettleUnknown), so that the next batch of the partition follows
// it in sequence; when ctx ends while it waits for an earlier batch of the
// partition, it returns ctx's error and sent nothing.
func (p *Producer) Produce(ctx context.Context, topic string, partition int, recs ...Record) (int64, error) {
	if topic == "" || partition < 0 || len(recs) == 0 {
		return 0, fmt.Errorf("%w: topic, partition and at least one record are required", ErrInvalidArgument)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, ErrClosed
	}
	tp := topicPartition{topic, partition}
	ps := p.parts[tp]
	if ps == nil {
		ps = &partState{turn: make(chan struct{}, 1), epoch: p.epoch, next: -1}
		p.parts[tp] = ps
	}
	p.mu.Unlock()

	select {
	case ps.turn <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err() // nothing sent: a definite failure
	}
	defer func() { <-ps.turn }()
	if err := ctx.Err(); err != nil {
		return 0, err // nothing sent yet: a definite failure
	}
	return p.send(tp, ps, recs)
}

// send writes one batch with retries; ps.turn is held.
func (p *Producer) send(tp topicPartition, ps *partState, recs []Record) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.DeliveryTimeout)
	defer cancel()
	if ps.next < 0 {
		// The partition's end before our first batch: the lower bound of
		// a search for a batch whose answer was lost (see written).
		if end, err := p.logEnd(ctx, tp); err == nil {
			ps.next = end
		}
	}
	p.mu.Lock()
	pid, epoch := p.pid, p.epoch
	p.mu.Unlock()
	if ps.epoch != epoch {
		ps.epoch, ps.seq = epoch, 0
	}
	h := batchHeader{producerID: pid, producerEpoch: epoch, baseSequence: ps.seq}
	batch := encode(nil, h, recs, p.opts.Now())
	unknown := false // an attempt may have been written
	var lastErr error
	for attempt := 1; ; attempt++ {
		if unknown && ps.next >= 0 {
			// The broker dedups a retry by its sequence window, but a
			// broker that restarted may have lost that window (kfake keeps
			// it only across clean shutdowns). Look for the batch first.
			if off, found, err := p.written(ctx, tp, ps.next, h); err == nil && found {
				return p.acked(ps, h, recs, off), nil
			}
		}
		off, err := p.produceRaw(ctx, tp, batch)
		switch {
		case err == nil, isKafkaErr(err, kafka.DuplicateSequenceNumber):
			return p.acked(ps, h, recs, off), nil
		case isKafkaErr(err, kafka.OutOfOrderSequenceNumber, kafka.UnknownProducerId, kafka.InvalidProducerEpoch, kafka.ProducerFenced):
			// The broker holds no state matching ours (it lost it, or
			// our epoch is stale), and did not write this attempt. As the
			// Java client does since KIP-360, bump the epoch, restart the
			// sequences at 0, and send the batch again.
			if err := p.bump(ctx, epoch); err != nil {
				return 0, p.fail(unknown, err)
			}
			p.mu.Lock()
			pid, epoch = p.pid, p.epoch
			p.mu.Unlock()
			ps.epoch, ps.seq = epoch, 0
			h = batchHeader{producerID: pid, producerEpoch: epoch}
			batch = encode(batch[:0], h, recs, p.opts.Now())
			lastErr = err
			continue
		case retriable(err):
			lastErr = err
			if !definite(err) {
				unknown = true
			}
		default:
			return 0, p.fail(unknown, err)
		}
		if unknown && p.opts.SettleUnknown && ctx.Err() != nil {
			// Past DeliveryTimeout, settling: the same batch again, until
			// a broker answers it. Each attempt has RequestTimeout.
			ctx = context.Background()
		}
		select {
		case <-ctx.Done():
			if unknown && p.opts.SettleUnknown {
				ctx = context.Background() // as above
				continue
			}
			// Out of time with an attempt of unknown outcome: the next
			// batch must not count on this sequence, so bump the epoch.
			if unknown {
				_ = p.bump(context.Background(), epoch)
			}
			return 0, p.fail(unknown, fmt.Errorf("delivery timeout: %w", lastErr))
		case <-p.closing:
			return 0, p.fail(unknown, fmt.Errorf("%w while retrying: %w", ErrClosed, lastErr))
		case <-time.After(p.opts.wait(attempt)):
		}
	}
}

func (p *Producer) acked(ps *partState, h batchHeader, recs []Record, off int64) int64 {
	ps.seq = h.baseSequence + int32(len(recs))
	ps.next = off + int64(len(recs))
	return off
}

func (p *Producer) fail(unknown bool, err error) error {
	if unknown {
		return fmt.Errorf("kafkatxn: produce: %w: %w", ErrOutcomeUnknown, err)
	}
	return fmt.Errorf("kafkatxn: produce: %w", err)
}

// bump moves the producer to a new epoch unless another partition already
// did since seen.
func (p *Producer) bump(ctx context.Context, seen int16) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch != seen {
		return nil
	}
	return p.initProducerID(ctx, p.pid, p.epoch)
}

func (p *Producer) produceRaw(ctx context.Context, tp topicPartition, batch []byte) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, p.opts.RequestTimeout)
	defer cancel()
	res, err := p.cl.RawProduce(rctx, &kafka.RawProduceRequest{
		Topic: tp.topic, Partition: tp.partition, RequiredAcks: kafka.RequireAll,
		RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(batch)},
	})
	if err != nil {
		return 0, err
	}
	if res.Error != nil {
		return res.BaseOffset, res.Error
	}
	return res.BaseOffset, nil
}

// logEnd returns the high watermark of tp.
func (p *Producer) logEnd(ctx context.Context, tp topicPartition) (int64, error) {
	res, err := p.cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{tp.topic: {kafka.LastOffsetOf(tp.partition)}},
	})
	if err != nil {
		return 0, err
	}
	for _, po := range res.Topics[tp.topic] {
		if po.Partition == tp.partition {
			if po.Error != nil {
				return 0, po.Error
			}
			return po.LastOffset, nil
		}
	}
	return 0, fmt.Errorf("kafkatxn: no offsets for %s/%d", tp.topic, tp.partition)
}

// written searches tp from offset from to its end for the batch h, and
// returns its offset if it is there.
func (p *Producer) written(ctx context.Context, tp topicPartition, from int64, h batchHeader) (int64, bool, error) {
	return findBatch(ctx, p.transport, p.cl.Addr, tp, from, h, p.opts.RequestTimeout)
}

// Close releases the connections. Produce after Close fails with ErrClosed.
// Close is safe to call twice.
func (p *Producer) Close() error {
	p.mu.Lock()
	if !p.closed {
		close(p.closing)
	}
	p.closed = true
	p.mu.Unlock()
	if p.ownTrans {
		p.transport.CloseIdleConnections()
	}
	return nil
}
