package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/meter"
	"github.com/exactlyonce/exactlyonce/internal/netfail"
)

// Defaults for Options.
const (
	DefaultSessionTimeout    = 10 * time.Second
	DefaultRebalanceTimeout  = 10 * time.Second
	DefaultHeartbeatInterval = time.Second
	DefaultMaxWait           = 500 * time.Millisecond
	DefaultMaxBytes          = 1 << 20
	DefaultBuffer            = 256
	DefaultMaxBatch          = 256
	DefaultTickInterval      = time.Second
)

var (
	// ErrRunning is returned by Run on a Source that is already running.
	ErrRunning = errors.New("kafkasource: already running")
	// ErrInvalidOptions is wrapped by the error New returns for a missing
	// argument or an invalid option.
	ErrInvalidOptions = errors.New("kafkasource: invalid options")
	// errGenerationEnded marks a skipped offset commit.
	errGenerationEnded = errors.New("kafkasource: generation ended, offset commit skipped")
)

// OffsetOutOfRangeError reports that a partition's restored offset is no
// longer (or not yet) in the log, and the OutOfRange policy is
// OutOfRangeFail.
type OffsetOutOfRangeError struct {
	Partition    checkpoint.TopicPartition
	Offset       int64 // the offset the chain must read next
	First, Last  int64 // the log's first offset and high watermark
	CheckpointID checkpoint.ID
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("kafkasource: %s: offset %d (checkpoint %d) is outside the log [%d, %d]",
		e.Partition, e.Offset, e.CheckpointID, e.First, e.Last)
}

// OutOfRange says what a chain does when the offset it must read is outside
// the partition's log: records were deleted by retention before they were
// processed, or the topic was recreated.
type OutOfRange int

const (
	// OutOfRangeFail stops Run with an *OffsetOutOfRangeError. Nothing is
	// skipped silently. This is the default.
	OutOfRangeFail OutOfRange = iota
	// OutOfRangeEarliest continues at the log's first offset, keeping the
	// restored state. Records before it are lost to the pipeline.
	OutOfRangeEarliest
	// OutOfRangeLatest continues at the high watermark, keeping the
	// restored state.
	OutOfRangeLatest
)

// StartOffset says where a partition without any checkpoint starts.
type StartOffset int

const (
	// StartEarliest reads a partition without checkpoint from its first
	// offset. This is the default.
	StartEarliest StartOffset = iota
	// StartLatest reads a partition without checkpoint from its high
	// watermark: earlier records are never processed.
	StartLatest
)

// Options configures a Source. The zero value is valid.
type Options struct {
	// OutOfRange policy. Default: OutOfRangeFail.
	OutOfRange OutOfRange
	// StartOffset for a partition without checkpoint. Default:
	// StartEarliest.
	StartOffset StartOffset
	// SessionTimeout, RebalanceTimeout and HeartbeatInterval of the
	// consumer group. A shorter heartbeat notices rebalances sooner.
	// Defaults: DefaultSessionTimeout, DefaultRebalanceTimeout,
	// DefaultHeartbeatInterval.
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	// MaxWait is the longest a fetch waits at the end of the log. Default:
	// DefaultMaxWait.
	MaxWait time.Duration
	// MaxBytes is the most a fetch returns. Default: DefaultMaxBytes.
	MaxBytes int
	// Buffer is how many fetched records wait ahead of the chain; the chain
	// takes all that wait at once, so it is also the largest fetched batch.
	// The chain's fetcher adds a whole fetch at once when fewer than
	// Buffer records wait, so that its next fetch is under way while the
	// chain works: up to Buffer-1 records plus one fetch (MaxBytes) wait
	// then. Default: DefaultBuffer.
	Buffer int
	// MaxBatch is the most records one Processor.ProcessBatch call gets. A
	// barrier waits for the call in progress, so it bounds how long a
	// checkpoint waits for a chain. Default: DefaultMaxBatch.
	MaxBatch int
	// Dialer for every broker connection (group coordinator, partition
	// readers, offset and topic checks): set its TLS (a *tls.Config) and
	// SASLMechanism (sasl/plain.Mechanism, sasl/scram.Mechanism) to reach
	// a managed Kafka; its Resolver and DialFunc, if set, are used too.
	// Default: kafka-go's default dialer, plain TCP.
	Dialer *kafka.Dialer
	// Logger. Default: discard.
	Logger *slog.Logger
	// MeterProvider for the exactlyonce.kafkasource.* metrics (chain
	// restarts, poison records, idle members, partition changes; see
	// docs/metrics.md). Default: no-op.
	MeterProvider metric.MeterProvider
	// MissingTopic says what Run does when a subscribed topic does not
	// exist; not used with Group.TopicRegex, which waits for no topic.
	// Default: MissingTopicWait.
	MissingTopic MissingTopic
	// TopicPollInterval is how often Run checks for a missing topic, and
	// for new partitions of its topics (a new partition makes the group
	// rebalance and gets a chain). Default: DefaultTopicPollInterval.
	TopicPollInterval time.Duration
	// Restart is the restart strategy of a failed chain. The zero value
	// restarts chains that failed on an unreachable server with a bounded
	// exponential backoff; see Restart.
	Restart Restart
}

// Processor is one partition's processing chain, returned by a ProcessorFunc
// for every partition the Source is assigned.
type Processor struct {
	// Participants are the chain's stateful operators by stable name; the
	// names key their state in every checkpoint. Chains sets it from the
	// checkpoint.Chain; a ProcessorFunc that fills it by hand is the older,
	// deprecated form (see the package doc). The Source owns their
	// lifecycle: one that implements Runner is started once the chain is
	// restored and awaited when the chain ends; one that implements
	// io.Closer is closed when the chain ends, however it ends (so a sink's
	// flush timer needs no goroutine of yours, and nothing leaks when a
	// chain fails halfway).
	Participants map[string]checkpoint.Participant
	// Process handles one record. It is called from the chain goroutine
	// only, in offset order, never concurrently with a participant's
	// methods, except an AsyncParticipant's pending part and
	// CheckpointCompleted, which run in the coordinator's goroutine beside
	// it (the participant synchronises them). Its ctx ends when the partition's ownership ends (the
	// generation ended or Run stopped): a sink fences on it. An error stops
	// Run, unless ctx has ended.
	Process func(ctx context.Context, m kafka.Message) error
	// ProcessBatch, if set, is used instead of Process: it handles a slice
	// of consecutive records (at most Options.MaxBatch, as many as were
	// fetched and waiting), so a chain can decide them together (for
	// instance with dedup's ObserveBatch) and hand rows to its sinks in
	// bulk. It is called like Process: from the chain goroutine only, in
	// offset order, never concurrently with a participant's methods, with
	// the same ctx. Barriers fall between calls, so the records of one call
	// are on the same side of every checkpoint.
	//
	// It returns how many records it handled, all of them (len(ms)) and a
	// nil error, or n < len(ms) with the error of ms[n]: records before
	// ms[n] count as processed, ms[n] goes to the poison policy (Poison) or
	// stops the chain like a Process error, and a chain that goes on calls
	// ProcessBatch again from ms[n+1]. ms[n] must have left no effect.
	//
	// The slice is reused once ProcessBatch returns: do not keep it. The
	// messages' Key, Value and Headers are not reused and may be kept (they
	// share their fetch's buffer: see the package doc).
	ProcessBatch func(ctx context.Context, ms []kafka.Message) (int, error)
	// Tick, if set, is called from the chain goroutine every TickInterval,
	// between records, also while no record arrives: the place for work that
	// processing time drives, such as a window operator closing windows of
	// an idle input. What Tick does depends on the wall clock, so it is not
	// replayed identically after a restore; keep its effects idempotent
	// (rows keyed and versioned by their content). An error stops Run,
	// unless ctx has ended.
	Tick func(ctx context.Context) error
	// TickInterval is the time between two Ticks. Default:
	// DefaultTickInterval.
	TickInterval time.Duration
	// Close, if set, is called once when the chain stops, after the last
	// Process or checkpoint and after every Runner returned, before the
	// participants are closed. Participants need not be closed here.
	Close func() error
	// DeadLetter is the chain's policy for a poison record, one for which
	// Process returns an error wrapping ErrPoison (see Poison). Nil (the
	// default): the chain stops there and Run returns a *PoisonError; the
	// partition goes no further until the record is dealt with. Set: the
	// record goes to the dead-letter topic, exactly once even across
	// crashes and replays, and the chain goes on with the next record.
	// Either way the record is counted in exactlyonce.kafkasource.poison_records;
	// nothing is skipped silently.
	DeadLetter *DeadLetter
}

// ProcessorFunc builds a fresh chain for partition p. ctx ends with the
// ownership of p; it is the same ctx Process receives. Keep no state outside
// the participants: it would not survive a move of p to another instance.
//
// When a step fails halfway, return the Processor built so far with the
// error: the Source closes the participants it holds (those that implement
// io.Closer), so a sink opened before a later step failed is not leaked.
type ProcessorFunc func(ctx context.Context, p checkpoint.TopicPartition) (*Processor, error)

// NewProcessor is ProcessorFunc.
//
// Deprecated: use ProcessorFunc; a type named like a constructor read as
// one.
type NewProcessor = ProcessorFunc

// maxGroupFailures and minGroupOutage bound how long Run rides out
// consecutive retryable consumer-group errors: it returns the last one
// once there were maxGroupFailures of them and the first was
// minGroupOutage ago. The time matters with a short HeartbeatInterval (the
// join backoff): a real broker takes seconds to restart, tens of seconds on
// a loaded machine, where 20 failures 100 ms apart ended Run
// (TestBrokerRestart on Apache Kafka).
const (
	maxGroupFailures = 20
	minGroupOutage   = 2 * time.Minute
)

// groupFailures counts consecutive consumer-group errors, for both
// protocols' loops: reset after a success, and asked whether to ride out
// the next error.
type groupFailures struct {
	n     int
	since time.Time // the first of the run
}

// retry counts err and reports whether Run rides it out: a retryable
// error, unless there were maxGroupFailures of them over at least
// minGroupOutage.
func (f *groupFailures) retry(err error) bool {
	if f.n++; f.n == 1 {
		f.since = time.Now()
	}
	return retryableGroupError(err) && (f.n < maxGroupFailures || time.Since(f.since) < minGroupOutage)
}

// retryableGroupError reports whether a consumer-group error is one that
// rejoining the group resolves: a rebalance in progress, a stale generation
// or member, a coordinator that moved or a broken connection.
func retryableGroupError(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr {
		case kafka.RebalanceInProgress, kafka.IllegalGeneration, kafka.UnknownMemberId:
			return true
		}
		return kerr.Temporary()
	}
	return netfail.Is(err)
}

// Source reads a consumer group's partitions, one chain per partition, and
// coordinates their checkpoints with a checkpoint.Coordinator.
type Source struct {
	group   Group
	coord   *checkpoint.Coordinator
	newProc ProcessorFunc
	opts    Options
	log     *slog.Logger
	running atomic.Bool
	poison  poisonMetrics
	watch   *groupWatch

	restarts metric.Int64Counter
	// topicRegex is Group.TopicRegex compiled, anchored as the broker
	// matches it (the whole name), or nil.
	topicRegex *regexp.Regexp
	// instanceWait bounds how long a join refused with
	// UNRELEASED_INSTANCE_ID is retried: defaultInstanceWait, shorter in
	// tests.
	instanceWait time.Duration

	commitMu sync.Mutex // serialises commits on the generation's connection
}

// New returns a Source. Run starts it.
func New(group Group, coord *checkpoint.Coordinator, newProcessor ProcessorFunc, opts Options) (*Source, error) {
	if err := group.validate(); err != nil {
		return nil, err
	}
	switch {
	case coord == nil:
		return nil, fmt.Errorf("%w: nil Coordinator", ErrInvalidOptions)
	case newProcessor == nil:
		return nil, fmt.Errorf("%w: nil ProcessorFunc", ErrInvalidOptions)
	case opts.OutOfRange < OutOfRangeFail || opts.OutOfRange > OutOfRangeLatest:
		return nil, fmt.Errorf("%w: unknown OutOfRange policy %d", ErrInvalidOptions, opts.OutOfRange)
	case opts.MissingTopic < MissingTopicWait || opts.MissingTopic > MissingTopicFail:
		return nil, fmt.Errorf("%w: unknown MissingTopic policy %d", ErrInvalidOptions, opts.MissingTopic)
	case opts.StartOffset < StartEarliest || opts.StartOffset > StartLatest:
		return nil, fmt.Errorf("%w: unknown StartOffset %d", ErrInvalidOptions, opts.StartOffset)
	case opts.SessionTimeout < 0 || opts.RebalanceTimeout < 0 || opts.HeartbeatInterval < 0 ||
		opts.MaxWait < 0 || opts.MaxBytes < 0 || opts.Buffer < 0 || opts.MaxBatch < 0 || opts.TopicPollInterval < 0:
		return nil, fmt.Errorf("%w: negative duration, size or buffer", ErrInvalidOptions)
	}
	setDefault(&opts.SessionTimeout, DefaultSessionTimeout)
	setDefault(&opts.RebalanceTimeout, DefaultRebalanceTimeout)
	setDefault(&opts.HeartbeatInterval, DefaultHeartbeatInterval)
	setDefault(&opts.MaxWait, DefaultMaxWait)
	setDefault(&opts.MaxBytes, DefaultMaxBytes)
	setDefault(&opts.Buffer, DefaultBuffer)
	setDefault(&opts.MaxBatch, DefaultMaxBatch)
	setDefault(&opts.TopicPollInterval, DefaultTopicPollInterval)
	if opts.Dialer == nil {
		opts.Dialer = kafka.DefaultDialer
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := opts.Restart.setDefaults(); err != nil {
		return nil, err
	}
	m := meter.New(opts.MeterProvider, "checkpoint/kafkasource")
	restarts := m.Counter("exactlyonce.kafkasource.chain.restarts", "{restart}",
		"Chains built again after a retryable failure.")
	if err := m.Err(); err != nil {
		return nil, fmt.Errorf("kafkasource: New: metrics: %w", err)
	}
	pm, err := newPoisonMetrics(opts.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("kafkasource: New: %w", err)
	}
	watch, err := newGroupWatch(opts.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("kafkasource: New: %w", err)
	}
	s := &Source{group: group, coord: coord, newProc: newProcessor, opts: opts, log: opts.Logger,
		restarts: restarts, poison: pm, watch: watch, instanceWait: defaultInstanceWait}
	if group.TopicRegex != "" {
		s.topicRegex = topicRegex(group.TopicRegex)
	}
	return s, nil
}

func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Checkpoint takes a checkpoint of every partition the Source owns now and
// waits for it; see checkpoint.Coordinator.Trigger.
func (s *Source) Checkpoint(ctx context.Context) error { return s.coord.Trigger(ctx) }

// Run joins the consumer group and processes its partitions until ctx ends
// or a chain fails for good. It drives the coordinator's interval
// checkpoints. A chain that fails on an unreachable server is built again
// from its last checkpoint by Options.Restart while the other chains go
// on. Run returns nil when ctx ended, else the first permanent chain error
// (a failed checkpoint, Process or restore that IsRetryable rejects, or
// ErrRestartsExhausted): the caller restarts, and every partition resumes
// from its last completed checkpoint.
//
// On every rebalance (under ProtocolConsumer, for every partition that
// moves) each chain stops where it is: work since its last
// checkpoint is abandoned, not committed, and the partition's next owner
// (maybe this instance again) restores from the checkpoint.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer s.running.Store(false)

	if err := s.awaitTopics(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	switch s.group.Protocol {
	case ProtocolConsumer:
		return s.runMember(ctx, false)
	case ProtocolAuto:
		err := s.runMember(ctx, true)
		if !errors.Is(err, errClassicGroup) {
			return err
		}
		s.log.Info("kafkasource: ProtocolAuto: joining under the classic protocol", "group", s.group.ID, "why", err)
	}
	return s.runClassic(ctx)
}
