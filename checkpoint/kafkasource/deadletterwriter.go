package kafkasource

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/segmentio/kafka-go"
)

// deadLetters writes one source partition's poison records to the
// dead-letter topic, each exactly once across crashes, replays and owners.
//
// The write is made idempotent by looking before writing, and the look is
// made safe against a second writer by a transaction. Each record is
// written in a transaction of its own under the source partition's
// transactional id. The writer starts its transactional producer before it
// looks, and that start fences every earlier writer of the id (an earlier
// incarnation of this chain, or an owner that lost the partition and does
// not know yet): their open transaction is aborted and they can commit no
// other. So whatever an earlier writer committed, it committed before this
// writer's look began, and the look (read_committed, to the high watermark
// after the start) finds it; whatever it did not commit never becomes
// visible. Two writers cannot both find nothing and both commit.
//
// The checkpointed state holds a dead-letter offset `from`: every
// dead-letter record of this source partition whose source offset is at or
// past the checkpoint's next offset lies at or after `from`. After a
// restore, the first poison record makes the chain read the dead-letter
// partition from `from` and remember which source offsets are already
// there; a replayed poison record found there is not written again. `from`
// only moves forward past records whose source offset the chain has gone
// beyond, so the next restore still finds everything it may replay.
//
// It is a checkpoint.Participant, called from the chain goroutine only.
type deadLetters struct {
	cfg    DeadLetter
	client *kafka.Client
	dialer *kafka.Dialer // the scan's connections
	tx     kafkatxn.TxOptions
	txid   string
	source checkpoint.TopicPartition

	p         *kafkatxn.TxProducer // nil until the first write
	partition int                  // dead-letter partition; -1 until known
	from      int64                // see above; -1: the partition's first offset
	scanned   bool                 // written holds every record of ours in [from, horizon)
	horizon   int64                // end of the scanned range and of our own writes
	written   map[int64]int64
	next      int64 // the chain's next source offset, set by the chain
}

const deadLetterStateVersion = 1

// newDeadLetters returns the dead-letter writer of source partition
// source in consumer group group, whose brokers are reached through d.
func newDeadLetters(cfg DeadLetter, group string, brokers []string, d *kafka.Dialer, source checkpoint.TopicPartition) (*deadLetters, error) {
	if cfg.Topic == "" {
		return nil, fmt.Errorf("%w: DeadLetter.Topic is empty", ErrInvalidOptions)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative DeadLetter.Timeout", ErrInvalidOptions)
	}
	if cfg.Topic == source.Topic {
		// A Group.TopicRegex can match the dead-letter topic.
		return nil, fmt.Errorf("%w: DeadLetter.Topic %s is a topic the chain reads: its dead letters would come back as poison, without end",
			ErrInvalidOptions, cfg.Topic)
	}
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = brokers
	}
	setDefault(&cfg.Timeout, DefaultDeadLetterTimeout)
	setDefault(&cfg.TransactionalIDPrefix, group+"-deadletter")
	var tr *kafka.Transport
	switch t := cfg.Transport.(type) {
	case nil:
		tr = dialerTransport(d)
	case *kafka.Transport:
		tr, d = t, kafkawire.TransportDialer(t)
	default:
		return nil, fmt.Errorf("%w: DeadLetter.Transport is a %T; it must be a *kafka.Transport", ErrInvalidOptions, cfg.Transport)
	}
	cfg.Transport = tr
	return &deadLetters{
		cfg:    cfg,
		client: &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: tr, Timeout: cfg.Timeout},
		dialer: d,
		// A transaction holds one record and is committed at once, so its
		// timeout only bounds how long an owner that died between the write
		// and the commit keeps the partition's readers (and the next look)
		// waiting.
		tx: kafkatxn.TxOptions{
			ProducerOptions:    kafkatxn.ProducerOptions{DeliveryTimeout: cfg.Timeout, Transport: tr},
			TransactionTimeout: deadLetterTxnTimeout(cfg.Timeout),
		},
		txid:      fmt.Sprintf("%s-%s-%d", cfg.TransactionalIDPrefix, source.Topic, source.Partition),
		source:    source,
		partition: -1,
		from:      -1,
		written:   map[int64]int64{},
	}, nil
}

// deadLetterTxnTimeout is the transaction timeout of a dead-letter writer
// whose requests time out after timeout: long enough for a produce and a
// commit, each retried for up to timeout.
func deadLetterTxnTimeout(timeout time.Duration) time.Duration { return 3 * timeout }

// Close closes the producer and the connections of the writer.
func (d *deadLetters) Close() error {
	var err error
	if d.p != nil {
		err = d.p.Close()
		d.p = nil
	}
	if tr, ok := d.cfg.Transport.(*kafka.Transport); ok {
		tr.CloseIdleConnections()
	}
	return err
}

// Snapshot saves the dead-letter partition and the offset from which a
// restore must look for records it may write again.
func (d *deadLetters) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	from := d.from
	if d.scanned {
		// Everything of ours before horizon is in written; keep from at the
		// first record that a replay from d.next could meet again.
		from = d.horizon
		for src, off := range d.written {
			if src >= d.next {
				from = min(from, off)
			}
		}
	}
	b := []byte{deadLetterStateVersion}
	b = binary.AppendVarint(b, int64(d.partition))
	return binary.AppendVarint(b, from), nil
}

func (d *deadLetters) Restore(_ context.Context, state []byte) error {
	if len(state) < 1 || state[0] != deadLetterStateVersion {
		return fmt.Errorf("kafkasource: dead-letter state: unknown version")
	}
	part, n := binary.Varint(state[1:])
	if n <= 0 {
		return errors.New("kafkasource: dead-letter state: bad partition")
	}
	from, m := binary.Varint(state[1+n:])
	if m <= 0 || 1+n+m != len(state) {
		return errors.New("kafkasource: dead-letter state: bad offset")
	}
	d.partition, d.from = int(part), from
	d.scanned, d.horizon = false, 0
	clear(d.written)
	return nil
}

func (d *deadLetters) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// write sends poison record m to the dead-letter topic unless a previous
// incarnation already did. It reports whether it found it there already.
// An error leaves the write undone or its outcome unknown; either way the
// chain must restart (and look again) before it goes past m.
func (d *deadLetters) write(ctx context.Context, m kafka.Message, cause error) (already bool, err error) {
	if err := d.ready(ctx); err != nil {
		return false, &deadLetterError{err}
	}
	if _, ok := d.written[m.Offset]; ok {
		return true, nil
	}
	headers := make([]kafkatxn.Header, 0, len(m.Headers)+4)
	for _, h := range m.Headers {
		headers = append(headers, kafkatxn.Header{Key: h.Key, Value: h.Value})
	}
	headers = append(headers,
		kafkatxn.Header{Key: HeaderDeadLetterTopic, Value: []byte(m.Topic)},
		kafkatxn.Header{Key: HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(m.Partition))},
		kafkatxn.Header{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
		kafkatxn.Header{Key: HeaderDeadLetterError, Value: []byte(cause.Error())},
	)
	off, err := d.p.Produce(ctx, d.cfg.Topic, d.partition,
		kafkatxn.Record{Key: m.Key, Value: m.Value, Headers: headers, Time: m.Time})
	if err == nil {
		err = d.p.Commit(ctx)
	}
	if err != nil {
		// The commit may have landed all the same: the restart looks again.
		return false, &deadLetterError{fmt.Errorf("kafkasource: %s: write offset %d to dead-letter topic %s: %w", d.source, m.Offset, d.cfg.Topic, err)}
	}
	d.written[m.Offset] = off
	d.horizon = max(d.horizon, off+1)
	return false, nil
}

// deadLetterError is a dead-letter write that failed. It is retryable
// (the chain restarts from its checkpoint, Restart) when Kafka or the
// network failed, its own timeouts included: a produce or commit whose
// outcome is unknown, a scan held back past its bound. That is safe:
// the restarted writer's producer start fences this one and aborts its
// open transaction, and its scan finds what did commit. A fenced writer
// (a newer owner of the partition writes) is not retryable.
type deadLetterError struct{ err error }

func (e *deadLetterError) Error() string { return e.err.Error() }
func (e *deadLetterError) Unwrap() error { return e.err }

// Retryable is read by IsRetryable.
func (e *deadLetterError) Retryable() bool {
	switch {
	case errors.Is(e.err, kafkatxn.ErrFenced) || errors.Is(e.err, context.Canceled):
		return false
	case kafkatxn.IsOutcomeUnknown(e.err) || errors.Is(e.err, context.DeadlineExceeded):
		return true
	}
	return IsRetryable(e.err)
}

// ready starts the transactional producer, which fences every earlier
// writer of the source partition, then reads what they committed.
func (d *deadLetters) ready(ctx context.Context) error {
	if d.partition < 0 {
		if err := d.choosePartition(ctx); err != nil {
			return err
		}
	}
	if d.p == nil {
		p, err := kafkatxn.NewTxProducer(ctx, d.cfg.Brokers, d.txid, d.tx)
		if err != nil {
			return fmt.Errorf("kafkasource: %s: dead-letter producer: %w", d.source, err)
		}
		d.p = p
	}
	if !d.scanned {
		return d.scan(ctx)
	}
	return nil
}

// choosePartition picks the dead-letter partition of the source partition.
func (d *deadLetters) choosePartition(ctx context.Context) error {
	meta, err := d.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{d.cfg.Topic}})
	if err != nil {
		return fmt.Errorf("kafkasource: dead-letter topic %s: metadata: %w", d.cfg.Topic, err)
	}
	for _, t := range meta.Topics {
		if t.Name != d.cfg.Topic {
			continue
		}
		if t.Error != nil {
			return fmt.Errorf("kafkasource: dead-letter topic %s: %w", d.cfg.Topic, t.Error)
		}
		if len(t.Partitions) == 0 {
			break
		}
		d.partition = d.source.Partition % len(t.Partitions)
		return nil
	}
	return fmt.Errorf("kafkasource: dead-letter topic %s does not exist", d.cfg.Topic)
}

// scan reads the committed records of the dead-letter partition from
// d.from up to its high watermark as it is now, after the producer fenced
// every earlier writer, and notes the records of this source partition.
// Another source partition's transaction still open on the shared
// partition holds the read back at its first record until it ends: the
// wait is bounded by that writer's transaction timeout, after which the
// broker aborts it at its next check (transaction.abort.timed.out.
// transaction.cleanup.interval.ms, 10 s by default). Past twice the
// timeout the scan fails, and the chain restarts.
func (d *deadLetters) scan(ctx context.Context) error {
	first, end, err := d.bounds(ctx)
	if err != nil {
		return err
	}
	from := max(d.from, first)
	ctx, cancel := context.WithTimeout(ctx, 2*deadLetterTxnTimeout(d.cfg.Timeout)+d.cfg.Timeout)
	defer cancel()
	f := kafkawire.Fetcher{Dialer: d.dialer, Brokers: d.cfg.Brokers, Topic: d.cfg.Topic, Partition: d.partition,
		Next: from, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond}
	defer f.Close()
	for f.Next < end {
		ms, err := f.Fetch(ctx)
		if err != nil {
			return fmt.Errorf("kafkasource: %s: read dead-letter topic %s at %d (up to %d): %w", d.source, d.cfg.Topic, f.Next, end, err)
		}
		for i := range ms {
			if src, ok := d.origin(ms[i].Headers); ok {
				d.written[src] = ms[i].Offset
			}
		}
	}
	d.scanned, d.horizon = true, max(d.horizon, end)
	if d.from < 0 {
		d.from = from
	}
	return nil
}

// bounds returns the dead-letter partition's first offset and high
// watermark.
func (d *deadLetters) bounds(ctx context.Context) (first, end int64, err error) {
	for _, req := range []kafka.OffsetRequest{kafka.FirstOffsetOf(d.partition), kafka.LastOffsetOf(d.partition)} {
		resp, err := d.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
			Topics: map[string][]kafka.OffsetRequest{d.cfg.Topic: {req}}})
		if err != nil {
			return 0, 0, fmt.Errorf("kafkasource: %s: offsets of dead-letter topic %s: %w", d.source, d.cfg.Topic, err)
		}
		for _, po := range resp.Topics[d.cfg.Topic] {
			if po.Partition != d.partition {
				continue
			}
			if po.Error != nil {
				return 0, 0, fmt.Errorf("kafkasource: %s: offsets of dead-letter topic %s: %w", d.source, d.cfg.Topic, po.Error)
			}
			first, end = max(first, po.FirstOffset), max(end, po.LastOffset)
		}
	}
	return first, end, nil
}

// origin returns the source offset of a dead-letter record with headers if it came from
// this chain's partition.
func (d *deadLetters) origin(headers []kafka.Header) (int64, bool) {
	o, err := ParseDeadLetter(kafka.Message{Headers: headers})
	if err != nil || o.Topic != d.source.Topic || o.Partition != d.source.Partition {
		return 0, false
	}
	return o.Offset, true
}
