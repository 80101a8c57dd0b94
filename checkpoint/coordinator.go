package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/internal/meter"
)

// DefaultInterval is the default time between two interval checkpoints.
const DefaultInterval = 10 * time.Second

var (
	// ErrChainStopped is returned for a checkpoint that a chain could not
	// take because it stopped first (its partition was revoked).
	ErrChainStopped = errors.New("checkpoint: chain stopped before the barrier")
	// ErrUnknownState is returned by Attach when the newest checkpoint
	// holds state for a participant name the chain does not have: loading
	// the rest would silently drop that state.
	ErrUnknownState = errors.New("checkpoint: checkpoint holds state of an unknown participant")
	// ErrDeclined is wrapped by a Snapshot error of a participant that is
	// healthy but cannot snapshot at this barrier, for example a sink in the
	// middle of a batch it must write whole. The checkpoint is skipped as if
	// it had failed (nothing written, no offset moved), but the chain goes
	// on, and the next barrier tries again.
	ErrDeclined = errors.New("checkpoint: participant declined the barrier")
	// ErrOutputLost is wrapped by a Resolver's error for a checkpoint whose
	// output is gone for good (its Kafka transaction was aborted): Attach
	// falls back to an older retained checkpoint. Attach's error wraps it
	// when no retained checkpoint is left to fall back to.
	ErrOutputLost = errors.New("checkpoint: a checkpoint's output was lost")
	// ErrExpired is wrapped by an Expirer's error: the checkpoint's
	// snapshot would no longer be good once saved, so it is not saved.
	ErrExpired = errors.New("checkpoint: snapshot expired before its checkpoint was saved")
	// ErrSuperseded is wrapped by the error of a checkpoint that was not
	// saved because a later owner of the partition (a consumer-group
	// generation after the chain's) has saved one since the chain's
	// Parent: the chain's ownership ended though it was not told yet (a
	// process paused past its session timeout). Nothing is written and no
	// offset moves; the chain must stop, not restart under its old
	// generation. Task.Begin's checkpoint fails with it (on Failures), and
	// Store.Save returns it.
	ErrSuperseded = errors.New("checkpoint: a later owner of the partition saved a checkpoint")
	// ErrInvalidOptions is wrapped by the errors NewStore and
	// NewCoordinator return for a missing argument or an invalid option.
	ErrInvalidOptions = errors.New("checkpoint: invalid options")
)

// Error describes a checkpoint that did not complete: nothing was written
// and no offset moved.
type Error struct {
	Partition   TopicPartition
	ID          ID
	Participant string // empty when the failure was not a participant's
	Op          string // "snapshot", "save", "notify", "restore" or "start"
	Err         error
}

func (e *Error) Error() string {
	who := ""
	if e.Participant != "" {
		who = " participant " + e.Participant
	}
	return fmt.Sprintf("checkpoint %d of %s:%s %s: %v", e.ID, e.Partition, who, e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Options configures a Coordinator. The zero value is valid.
type Options struct {
	// Interval between checkpoints triggered by Run. Shorter means less to
	// replay after a crash and more snapshot work. Negative disables
	// interval checkpoints (only Trigger takes them). Default:
	// DefaultInterval.
	Interval time.Duration
	// Now is the clock for checkpoint times and durations. Default:
	// time.Now.
	Now func() time.Time
	// Logger. Default: discard.
	Logger *slog.Logger
	// MeterProvider for checkpoint metrics. Default: noop.
	MeterProvider metric.MeterProvider
	// Synchronous runs every checkpoint's whole protocol at the barrier,
	// in the chain's goroutine, as before asynchronous snapshots: Begin
	// returns once the checkpoint completed, and every participant is
	// snapshotted with Snapshot, its SnapshotAsync unused. The chain then
	// waits for the sinks' last inserts, the file's fsyncs and the offset
	// commit at every barrier; it is for comparison (BenchmarkEndToEnd
	// runs both) and as a fallback. Default: false.
	Synchronous bool
}

// Coordinator triggers checkpoints of every attached chain, on an interval
// (Run) and on demand (Trigger), and runs the checkpoint protocol of each
// chain (Task). It is safe for concurrent use.
type Coordinator struct {
	store    *Store
	interval time.Duration
	sync     bool
	now      func() time.Time
	log      *slog.Logger

	duration metric.Float64Histogram
	size     metric.Int64Histogram
	failures metric.Int64Counter
	declines metric.Int64Counter
	skips    metric.Int64Counter
	waits    metric.Int64Counter
	hold     metric.Float64Histogram
	commits  metric.Int64Counter
	expired  metric.Int64Counter
	fallback metric.Int64Counter
	reg      metric.Registration

	mu     sync.Mutex
	tasks  map[*Task]struct{}
	closed bool
}

// NewCoordinator returns a Coordinator writing checkpoints to store.
func NewCoordinator(store *Store, opts Options) (*Coordinator, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: NewCoordinator: nil Store", ErrInvalidOptions)
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{
		store: store, interval: opts.Interval, sync: opts.Synchronous, now: opts.Now, log: opts.Logger,
		tasks: map[*Task]struct{}{},
	}
	m := meter.New(opts.MeterProvider, "checkpoint")
	c.duration = m.Histogram("exactlyonce.checkpoint.duration", "s",
		"Time from barrier to durable checkpoint metadata, per partition.")
	c.size = m.Int64Histogram("exactlyonce.checkpoint.size", "By", "Size of a partition's checkpoint file.")
	c.failures = m.Counter("exactlyonce.checkpoint.failures", "{checkpoint}", "Checkpoints that did not complete.")
	c.declines = m.Counter("exactlyonce.checkpoint.declines", "{checkpoint}",
		"Checkpoints skipped because a participant declined the barrier (ErrDeclined).")
	c.skips = m.Counter("exactlyonce.checkpoint.skips", "{checkpoint}",
		"Interval barriers skipped because the partition's previous checkpoint was still pending.")
	c.waits = m.Counter("exactlyonce.checkpoint.waits", "{checkpoint}",
		"Checkpoints whose barrier waited for the partition's previous checkpoint to complete (a Trigger, or a chain's own).")
	c.hold = m.Histogram("exactlyonce.checkpoint.hold", "s",
		"Time a barrier held its chain: the synchronous part of a checkpoint (see Task.Begin).")
	c.commits = m.Counter("exactlyonce.checkpoint.offset_commit.failures", "{commit}",
		"Offset commits to the consumer group that failed after a completed checkpoint (harmless: the checkpoint is the truth).")
	c.expired = m.Counter("exactlyonce.checkpoint.expired", "{checkpoint}",
		"Checkpoints not saved because a participant's snapshot would have expired first (ErrExpired: a Kafka transaction near its timeout).")
	c.fallback = m.Counter("exactlyonce.checkpoint.restore.fallbacks", "{checkpoint}",
		"Checkpoints a restore passed over because their output was lost (ErrOutputLost), falling back to an older one.")
	age := m.FloatObservableGauge("exactlyonce.checkpoint.last_completed.age", "s",
		"Time since the partition's last completed (or restored) checkpoint.")
	lag := m.ObservableGauge("exactlyonce.checkpoint.consumer.lag", "{record}",
		"Records between the partition's high watermark and the chain's next offset.")
	c.reg = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		now := c.now()
		for _, t := range c.snapshotTasks() {
			at := metric.WithAttributeSet(t.attrs)
			t.mu.Lock()
			last, l, haveLag := t.lastCompleted, t.lag, t.haveLag
			t.mu.Unlock()
			if !last.IsZero() {
				o.ObserveFloat64(age, now.Sub(last).Seconds(), at)
			}
			if haveLag {
				o.ObserveInt64(lag, l, at)
			}
		}
		return nil
	}, age, lag)
	if err := m.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: NewCoordinator: metrics: %w", err)
	}
	return c, nil
}

// Store returns the coordinator's Store.
func (c *Coordinator) Store() *Store { return c.store }

func (c *Coordinator) snapshotTasks() []*Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Keys(c.tasks))
}

// Close unregisters the metric callbacks. It is safe to call twice.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.reg.Unregister()
}

// Run triggers a checkpoint of every attached chain each Interval until ctx
// ends, and returns nil then. It does not wait for the checkpoints: a chain
// that fails its checkpoint reports the error itself. kafkasource's
// Source.Run calls it, so a Coordinator serves one Source. With a negative
// Interval, Run only waits for ctx.
func (c *Coordinator) Run(ctx context.Context) error {
	if c.interval < 0 {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			for _, t := range c.snapshotTasks() {
				t.barrier(true)
			}
		}
	}
}

// Trigger checkpoints every attached chain now and waits until each has
// completed or failed. It returns nil when all completed, else the failures
// joined. A chain whose barrier is already pending (not yet taken) shares
// it. Cancelling ctx stops the wait, not the checkpoints.
func (c *Coordinator) Trigger(ctx context.Context) error {
	tasks := c.snapshotTasks()
	bs := make([]*Barrier, len(tasks))
	for i, t := range tasks {
		bs[i] = t.barrier(false)
	}
	var errs []error
	for _, b := range bs {
		select {
		case <-b.done:
			errs = append(errs, b.err)
		case <-ctx.Done():
			return fmt.Errorf("checkpoint: trigger: %w", ctx.Err())
		}
	}
	return errors.Join(errs...)
}
