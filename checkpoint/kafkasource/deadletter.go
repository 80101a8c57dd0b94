package kafkasource

import (
	"context"
	"errors"
	"fmt"
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
//
// Each dead-letter record is written in a Kafka transaction of its own,
// under a transactional id of the source partition's, so read the topic
// with isolation level read_committed (kafkatxn.Reader; the Java
// consumer's isolation.level=read_committed): a read_uncommitted reader
// also sees the records of transactions that were aborted, such as the
// write of an owner that lost its partition before committing it.
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
	// Transport to the brokers (TLS, SASL): a *kafka.Transport, whose TLS,
	// SASL, Dial, DialTimeout, ClientID and Resolver are used. Default: the
	// way Options.Dialer connects.
	Transport kafka.RoundTripper
	// Timeout of each produce, fetch and transaction request. Default:
	// DefaultDeadLetterTimeout.
	Timeout time.Duration
	// TransactionalIDPrefix begins the transactional id of each source
	// partition's dead-letter writer: the id is the prefix, "-", the source
	// topic, "-" and the partition (for ACLs on transactional ids). Two
	// pipelines must not share one. Default: the consumer group's id
	// followed by "-deadletter".
	TransactionalIDPrefix string
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
