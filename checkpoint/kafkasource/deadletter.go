package kafkasource

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/meter"
)

// DefaultDeadLetterTimeout bounds each produce and each fetch of a
// dead-letter write.
const DefaultDeadLetterTimeout = 10 * time.Second

// Headers a dead-letter record carries besides the original record's own
// headers: where the record came from and why it could not be processed.
const (
	HeaderDeadLetterTopic     = "dlq-source-topic"
	HeaderDeadLetterPartition = "dlq-source-partition"
	HeaderDeadLetterOffset    = "dlq-source-offset"
	HeaderDeadLetterError     = "dlq-error"
)

// deadLetterParticipant is the checkpoint name of a chain's dead-letter
// state. Participants of a Processor must not use it.
const deadLetterParticipant = "kafkasource.deadletter"

// ErrPoison marks a record that Process can never handle, such as a value
// it cannot decode: processing it again fails the same way, so retrying
// would stall the partition forever. Process returns Poison(err) for such a
// record; what happens then is the Processor's policy (see
// Processor.DeadLetter).
var ErrPoison = errors.New("kafkasource: poison record")

// Poison marks err as the error of a poison record: errors.Is(Poison(err),
// ErrPoison) and errors.Is(Poison(err), err) both hold.
func Poison(err error) error {
	if err == nil {
		err = errors.New("no reason given")
	}
	return &poisonError{err: err}
}

type poisonError struct{ err error }

func (e *poisonError) Error() string   { return "poison record: " + e.err.Error() }
func (e *poisonError) Unwrap() []error { return []error{ErrPoison, e.err} }

// PoisonError is the error Run returns when a chain without a dead-letter
// topic meets a poison record: the chain stops at that offset rather than
// skip it. It wraps ErrPoison and Process's error.
type PoisonError struct {
	Partition checkpoint.TopicPartition
	Offset    int64
	Err       error // Process's error
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("kafkasource: %s: offset %d is a poison record and the processor has no dead-letter topic, so the chain stops there: %v",
		e.Partition, e.Offset, e.Err)
}

func (e *PoisonError) Unwrap() error { return e.Err }

// DeadLetter is a Processor's dead-letter topic: where a poison record goes,
// once, before the chain goes on with the next record.
type DeadLetter struct {
	// Topic receives the poison records: the original key, value, time and
	// headers, plus HeaderDeadLetterTopic, HeaderDeadLetterPartition,
	// HeaderDeadLetterOffset and HeaderDeadLetterError. It must exist. A
	// source partition P always writes to partition P modulo the topic's
	// partition count (as counted the first time), so one partition's dead
	// letters stay in order.
	Topic string
	// Brokers of Topic. Default: the consumer group's brokers.
	Brokers []string
	// Transport to the brokers (TLS, SASL). Default: kafka-go's
	// DefaultTransport.
	Transport kafka.RoundTripper
	// Timeout of each produce and fetch. Default: DefaultDeadLetterTimeout.
	Timeout time.Duration
}

// DeadLetterOrigin is where a dead-letter record came from, read back from
// its headers by ParseDeadLetter.
type DeadLetterOrigin struct {
	Topic     string
	Partition int
	Offset    int64
	Err       string // the text of Process's error
}

// ParseDeadLetter returns where dead-letter record m came from. It fails
// for a record without the dead-letter headers.
func ParseDeadLetter(m kafka.Message) (DeadLetterOrigin, error) {
	var o DeadLetterOrigin
	var okTopic, okPart, okOff bool
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderDeadLetterTopic:
			o.Topic, okTopic = string(h.Value), true
		case HeaderDeadLetterPartition:
			p, err := strconv.Atoi(string(h.Value))
			o.Partition, okPart = p, err == nil
		case HeaderDeadLetterOffset:
			off, err := strconv.ParseInt(string(h.Value), 10, 64)
			o.Offset, okOff = off, err == nil
		case HeaderDeadLetterError:
			o.Err = string(h.Value)
		}
	}
	if !okTopic || !okPart || !okOff {
		return o, errors.New("kafkasource: not a dead-letter record: source topic, partition or offset header missing or malformed")
	}
	return o, nil
}

// poisonMetrics counts poison records by what became of them.
type poisonMetrics struct{ records metric.Int64Counter }

func newPoisonMetrics(mp metric.MeterProvider) (poisonMetrics, error) {
	m := meter.New(mp, "checkpoint/kafkasource")
	c := m.Counter("exactlyonce.kafkasource.poison_records", "{record}",
		"Records Process reported as poison, by outcome: dead_lettered (written to the dead-letter topic), "+
			"already_dead_lettered (a replay found it there already) or stopped (no dead-letter topic: the chain stopped).")
	return poisonMetrics{records: c}, m.Err()
}

func (m poisonMetrics) add(ctx context.Context, p checkpoint.TopicPartition, outcome string) {
	m.records.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(
		append(meter.Partition(p.Topic, p.Partition), attribute.String("outcome", outcome))...))
}

// deadLetters writes one source partition's poison records to the
// dead-letter topic, each exactly once across crashes and replays.
//
// Kafka offers no idempotent write across producer restarts (kafka-go has
// no idempotent producer), so the write is made idempotent by looking
// before writing. The checkpointed state holds a dead-letter offset `from`:
// every dead-letter record of this source partition whose source offset is
// at or past the checkpoint's next offset lies at or after `from`. After a
// restore, the first poison record makes the chain read the dead-letter
// partition from `from` to its end and remember which source offsets are
// already there (written by an incarnation that died before its
// checkpoint); a replayed poison record found there is not written again.
// `from` only moves forward past records whose source offset the chain has
// gone beyond, so the next restore still finds everything it may replay.
//
// It is a checkpoint.Participant, called from the chain goroutine only.
type deadLetters struct {
	cfg    DeadLetter
	client *kafka.Client
	source checkpoint.TopicPartition

	partition int   // dead-letter partition; -1 until known
	from      int64 // see above; -1: the partition's first offset
	scanned   bool  // written holds every record of ours in [from, horizon)
	horizon   int64 // end of the scanned range and of our own writes
	written   map[int64]int64
	next      int64 // the chain's next source offset, set by the chain
}

const deadLetterStateVersion = 1

func newDeadLetters(cfg DeadLetter, brokers []string, source checkpoint.TopicPartition) (*deadLetters, error) {
	if cfg.Topic == "" {
		return nil, fmt.Errorf("%w: DeadLetter.Topic is empty", ErrInvalidOptions)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative DeadLetter.Timeout", ErrInvalidOptions)
	}
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = brokers
	}
	setDefault(&cfg.Timeout, DefaultDeadLetterTimeout)
	if cfg.Transport == nil {
		cfg.Transport = kafka.DefaultTransport
	}
	return &deadLetters{
		cfg:       cfg,
		client:    &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: cfg.Transport, Timeout: cfg.Timeout},
		source:    source,
		partition: -1,
		from:      -1,
		written:   map[int64]int64{},
	}, nil
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
func (d *deadLetters) write(ctx context.Context, m kafka.Message, cause error) (already bool, err error) {
	if d.partition < 0 {
		if err := d.choosePartition(ctx); err != nil {
			return false, err
		}
	}
	if !d.scanned {
		if err := d.scan(ctx); err != nil {
			return false, err
		}
	}
	if _, ok := d.written[m.Offset]; ok {
		return true, nil
	}
	headers := make([]kafka.Header, 0, len(m.Headers)+4)
	headers = append(headers, m.Headers...)
	headers = append(headers,
		kafka.Header{Key: HeaderDeadLetterTopic, Value: []byte(m.Topic)},
		kafka.Header{Key: HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(m.Partition))},
		kafka.Header{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
		kafka.Header{Key: HeaderDeadLetterError, Value: []byte(cause.Error())},
	)
	rec := kafka.Record{Time: m.Time, Headers: headers}
	if m.Key != nil {
		rec.Key = kafka.NewBytes(m.Key)
	}
	if m.Value != nil {
		rec.Value = kafka.NewBytes(m.Value)
	}
	resp, err := d.client.Produce(ctx, &kafka.ProduceRequest{
		Topic: d.cfg.Topic, Partition: d.partition, RequiredAcks: kafka.RequireAll,
		Records: kafka.NewRecordReader(rec),
	})
	if err == nil {
		err = resp.Error
	}
	if err == nil {
		for _, rerr := range resp.RecordErrors {
			err = rerr
		}
	}
	if err != nil {
		// The write may have landed all the same: the restart rescans.
		return false, fmt.Errorf("kafkasource: %s: write offset %d to dead-letter topic %s: %w", d.source, m.Offset, d.cfg.Topic, err)
	}
	d.written[m.Offset] = resp.BaseOffset
	d.horizon = max(d.horizon, resp.BaseOffset+1)
	return false, nil
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

// scan reads the dead-letter partition from d.from to its end and notes the
// records of this source partition.
func (d *deadLetters) scan(ctx context.Context) error {
	offset := d.from
	if offset < 0 {
		offset = kafka.FirstOffset
	}
	for {
		resp, err := d.client.Fetch(ctx, &kafka.FetchRequest{
			Topic: d.cfg.Topic, Partition: d.partition, Offset: offset,
			MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 10 * time.Millisecond,
			IsolationLevel: kafka.ReadCommitted,
		})
		if err == nil {
			err = resp.Error
		}
		if err != nil {
			return fmt.Errorf("kafkasource: %s: read dead-letter topic %s at %d: %w", d.source, d.cfg.Topic, offset, err)
		}
		if offset == kafka.FirstOffset {
			offset = resp.LogStartOffset
		}
		if offset >= resp.HighWatermark {
			d.scanned, d.horizon = true, max(d.horizon, offset)
			if d.from < 0 {
				d.from = offset
			}
			return nil
		}
		progressed := false
		for {
			r, err := resp.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("kafkasource: %s: read dead-letter topic %s: %w", d.source, d.cfg.Topic, err)
			}
			if r.Offset < offset {
				continue // a batch can start before the offset asked for
			}
			if src, ok := d.origin(r.Headers); ok {
				d.written[src] = r.Offset
			}
			offset, progressed = r.Offset+1, true
		}
		if !progressed {
			// Nothing readable before the high watermark (control records
			// or an open transaction): read up to where we could.
			d.scanned, d.horizon = true, max(d.horizon, offset)
			if d.from < 0 {
				d.from = offset
			}
			return nil
		}
	}
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

// handlePoison applies the chain's poison policy to the error Process
// returned for m. It returns nil when the chain may go on (the record is in
// the dead-letter topic), else the error that stops the chain.
func (s *Source) handlePoison(ctx context.Context, p checkpoint.TopicPartition, dl *deadLetters, m kafka.Message, err error) error {
	if !errors.Is(err, ErrPoison) {
		return fmt.Errorf("kafkasource: %s: process offset %d: %w", p, m.Offset, err)
	}
	if dl == nil {
		s.poison.add(ctx, p, "stopped")
		return &PoisonError{Partition: p, Offset: m.Offset, Err: err}
	}
	already, werr := dl.write(ctx, m, err)
	if werr != nil {
		return werr
	}
	outcome := "dead_lettered"
	if already {
		outcome = "already_dead_lettered"
	}
	s.poison.add(ctx, p, outcome)
	s.log.Warn("kafkasource: poison record sent to the dead-letter topic", "partition", p.String(), "offset", m.Offset,
		"topic", dl.cfg.Topic, "replayed", already, "err", err)
	return nil
}
