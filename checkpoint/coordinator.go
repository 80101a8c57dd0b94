package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
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
	Op          string // "snapshot", "save" or "notify"
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
}

// Coordinator triggers checkpoints of every attached chain, on an interval
// (Run) and on demand (Trigger), and runs the checkpoint protocol of each
// chain (Task). It is safe for concurrent use.
type Coordinator struct {
	store    *Store
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger

	duration metric.Float64Histogram
	size     metric.Int64Histogram
	failures metric.Int64Counter
	declines metric.Int64Counter
	commits  metric.Int64Counter
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
		store: store, interval: opts.Interval, now: opts.Now, log: opts.Logger,
		tasks: map[*Task]struct{}{},
	}
	m := meter.New(opts.MeterProvider, "checkpoint")
	c.duration = m.Histogram("exactlyonce.checkpoint.duration", "s",
		"Time from barrier to durable checkpoint metadata, per partition.")
	c.size = m.Int64Histogram("exactlyonce.checkpoint.size", "By", "Size of a partition's checkpoint file.")
	c.failures = m.Counter("exactlyonce.checkpoint.failures", "{checkpoint}", "Checkpoints that did not complete.")
	c.declines = m.Counter("exactlyonce.checkpoint.declines", "{checkpoint}",
		"Checkpoints skipped because a participant declined the barrier (ErrDeclined).")
	c.commits = m.Counter("exactlyonce.checkpoint.offset_commit.failures", "{commit}",
		"Offset commits to the consumer group that failed after a completed checkpoint (harmless: the checkpoint is the truth).")
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
				t.barrier()
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
		bs[i] = t.barrier()
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

// Barrier is a request to one chain to checkpoint between two records. The
// chain takes it from Task.Barriers and passes it to Task.Checkpoint.
type Barrier struct {
	done chan struct{}
	err  error
}

func (b *Barrier) finish(err error) {
	b.err = err
	close(b.done)
}

// Meta is what the source knows about the position of a checkpoint beside
// the offset: the consumer-group generation that owns the partition.
type Meta struct {
	Generation int64
	Member     string
}

// Task is one chain's side of the checkpoint protocol. The chain goroutine
// owns it: it calls Checkpoint when a barrier arrives between two records,
// and Detach when it stops.
type Task struct {
	c            *Coordinator
	p            TopicPartition
	names        []string
	participants map[string]Participant
	objects      map[string]*Objects // of the ObjectParticipants, by name
	attrs        attribute.Set
	barriers     chan *Barrier

	restored *Checkpoint
	lastID   ID

	mu            sync.Mutex
	pending       *Barrier // sent, not yet taken
	detached      bool
	lastCompleted time.Time
	lag           int64
	haveLag       bool
}

// Attach restores a chain's participants from the partition's newest intact
// checkpoint and registers the chain for barriers. participants maps stable
// names (the keys in every checkpoint) to the chain's participants.
//
// A checkpoint holding state under a name not in participants is an error
// wrapping ErrUnknownState; a participant without state in the checkpoint
// starts empty. A participant's Restore error is returned as is: restore
// does not fall back to an older checkpoint for it, since the error may be
// transient.
func (c *Coordinator) Attach(ctx context.Context, p TopicPartition, participants map[string]Participant) (*Task, error) {
	t := &Task{
		c: c, p: p, participants: participants,
		names:    slices.Sorted(maps.Keys(participants)),
		attrs:    attribute.NewSet(meter.Partition(p.Topic, p.Partition)...),
		barriers: make(chan *Barrier, 1),
	}
	for _, n := range t.names {
		if participants[n] == nil {
			return nil, fmt.Errorf("checkpoint: attach %s: participant %q is nil", p, n)
		}
	}
	for _, n := range t.names {
		op, ok := participants[n].(ObjectParticipant)
		if !ok {
			continue
		}
		d, err := c.store.dir(p)
		if err != nil {
			return nil, err
		}
		o, err := newObjects(c.store.storage, d, n)
		if err != nil {
			// The participant keeps working without objects (dedup then
			// writes full snapshots): its name, fine as a state's key,
			// cannot name a directory.
			c.log.WarnContext(ctx, "checkpoint: participant gets no objects", "partition", p.String(), "participant", n, "err", err)
			continue
		}
		if t.objects == nil {
			t.objects = map[string]*Objects{}
		}
		t.objects[n] = o
		op.UseObjects(o)
	}
	cp, err := c.store.Latest(ctx, p)
	switch {
	case errors.Is(err, ErrNotFound):
		c.log.InfoContext(ctx, "checkpoint: no checkpoint, fresh start", "partition", p.String())
	case err != nil:
		return nil, err
	default:
		for name := range cp.States {
			if _, ok := participants[name]; !ok {
				return nil, fmt.Errorf("checkpoint: attach %s: checkpoint %d: %q: %w", p, cp.ID, name, ErrUnknownState)
			}
		}
		for _, name := range t.names {
			state, ok := cp.States[name]
			if !ok {
				c.log.WarnContext(ctx, "checkpoint: participant has no state in checkpoint, starts empty",
					"partition", p.String(), "id", cp.ID, "participant", name)
				continue
			}
			if err := participants[name].Restore(ctx, state); err != nil {
				return nil, &Error{Partition: p, ID: cp.ID, Participant: name, Op: "restore", Err: err}
			}
		}
		t.restored, t.lastID, t.lastCompleted = cp, cp.ID, cp.Created
		c.log.InfoContext(ctx, "checkpoint: restored", "partition", p.String(), "id", cp.ID, "next_offset", cp.NextOffset)
	}
	c.mu.Lock()
	c.tasks[t] = struct{}{}
	c.mu.Unlock()
	return t, nil
}

// Restored returns the checkpoint the chain was restored from, or nil on a
// fresh start. Its NextOffset is where the chain must read from.
func (t *Task) Restored() *Checkpoint { return t.restored }

// Barriers delivers barriers for the chain. The chain selects on it beside
// its records and calls Checkpoint for each barrier it takes.
func (t *Task) Barriers() <-chan *Barrier { return t.barriers }

// SetLag records the partition's consumer lag for the lag metric.
func (t *Task) SetLag(lag int64) {
	t.mu.Lock()
	t.lag, t.haveLag = lag, true
	t.mu.Unlock()
}

// barrier returns the pending barrier, or sends a new one.
func (t *Task) barrier() *Barrier {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending != nil {
		return t.pending
	}
	b := &Barrier{done: make(chan struct{})}
	if t.detached {
		b.finish(&Error{Partition: t.p, Op: "snapshot", Err: ErrChainStopped})
		return b
	}
	t.pending = b
	t.barriers <- b // never blocks: pending was nil, so the buffer is empty
	return b
}

// Checkpoint takes checkpoint lastID+1 of the chain at nextOffset, the
// offset of the first record after the barrier. It runs the protocol:
//
//  1. Snapshot every participant (a sink flushes here).
//  2. Write the checkpoint atomically to the Store.
//  3. commit(ctx, nextOffset), if commit is not nil: the source moves the
//     consumer group's offset, only while its generation is current. A
//     commit error is logged and counted, not returned: the checkpoint, not
//     the group offset, is the truth.
//  4. Notify every participant with CheckpointCompleted.
//
// A failure in 1 or 2 aborts: nothing more is written, no offset moves,
// and the returned *Error reaches the barrier's Trigger caller too. A
// failure in 4 is returned after the checkpoint completed.
//
// b is the barrier taken from Barriers, or nil for a checkpoint the chain
// decides on itself (at the end of a bounded input, in tests).
func (t *Task) Checkpoint(ctx context.Context, b *Barrier, nextOffset int64, meta Meta, commit func(context.Context, int64) error) error {
	t.mu.Lock()
	if t.pending == b {
		t.pending = nil
	}
	t.mu.Unlock()
	err := t.checkpoint(ctx, nextOffset, meta, commit)
	if b != nil {
		b.finish(err)
	}
	return err
}

func (t *Task) checkpoint(ctx context.Context, nextOffset int64, meta Meta, commit func(context.Context, int64) error) error {
	c := t.c
	start := c.now()
	t.lastID++
	id := t.lastID
	at := metric.WithAttributeSet(t.attrs)
	fail := func(e *Error) error {
		c.failures.Add(ctx, 1, at)
		return e
	}
	cp := &Checkpoint{
		ID: id, Partition: t.p, NextOffset: nextOffset, Created: start,
		States: make(map[string][]byte, len(t.names)), Generation: meta.Generation, Member: meta.Member,
	}
	for _, o := range t.objects {
		o.gen.Store(max(meta.Generation, 0))
	}
	for _, name := range t.names {
		state, err := t.participants[name].Snapshot(ctx, id)
		if errors.Is(err, ErrDeclined) {
			c.declines.Add(ctx, 1, at)
			return &Error{Partition: t.p, ID: id, Participant: name, Op: "snapshot", Err: err}
		}
		if err != nil {
			return fail(&Error{Partition: t.p, ID: id, Participant: name, Op: "snapshot", Err: err})
		}
		cp.States[name] = state
		if o := t.objects[name]; o != nil {
			refs, err := t.participants[name].(ObjectParticipant).References(state)
			if err != nil {
				return fail(&Error{Partition: t.p, ID: id, Participant: name, Op: "snapshot", Err: err})
			}
			for _, r := range refs {
				cp.Objects = append(cp.Objects, o.ref(r))
			}
		}
	}
	slices.Sort(cp.Objects)
	cp.Duration = c.now().Sub(start)
	// A chain whose ownership ended while it snapshotted must not write:
	// the partition's next owner may already have restored. This does not
	// rely on the Storage checking ctx.
	if err := ctx.Err(); err != nil {
		return fail(&Error{Partition: t.p, ID: id, Op: "save", Err: err})
	}
	size, err := c.store.Save(ctx, cp)
	if err != nil {
		return fail(&Error{Partition: t.p, ID: id, Op: "save", Err: err})
	}
	end := c.now()
	c.duration.Record(ctx, end.Sub(start).Seconds(), at)
	c.size.Record(ctx, int64(size), at)
	t.mu.Lock()
	t.lastCompleted = start
	t.mu.Unlock()
	if commit != nil {
		if err := commit(ctx, nextOffset); err != nil {
			c.commits.Add(ctx, 1, at)
			c.log.WarnContext(ctx, "checkpoint: offset commit failed after completed checkpoint",
				"partition", t.p.String(), "id", id, "next_offset", nextOffset, "err", err)
		}
	}
	for name, o := range t.objects {
		var refs []string
		for _, r := range cp.Objects {
			if rest, ok := strings.CutPrefix(r, name+"/"); ok {
				refs = append(refs, rest)
			}
		}
		o.saved(refs)
	}
	for _, name := range t.names {
		if err := t.participants[name].CheckpointCompleted(ctx, id); err != nil {
			return &Error{Partition: t.p, ID: id, Participant: name, Op: "notify", Err: err}
		}
	}
	if t.objects != nil {
		// After the notifications: the checkpoint is complete, and an
		// object only older checkpoints referenced may go once Keep newer
		// ones exist.
		c.store.collectObjects(ctx, t.p, func(ref string) bool {
			name, obj, _ := strings.Cut(ref, "/")
			o := t.objects[name]
			return o != nil && o.isPending(obj)
		})
	}
	return nil
}

// Detach unregisters the chain: later triggers skip it and a barrier not yet
// taken fails with ErrChainStopped. It is safe to call twice.
func (t *Task) Detach() {
	t.c.mu.Lock()
	delete(t.c.tasks, t)
	t.c.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.detached {
		return
	}
	t.detached = true
	if t.pending != nil {
		select {
		case <-t.barriers:
		default:
		}
		t.pending.finish(&Error{Partition: t.p, Op: "snapshot", Err: ErrChainStopped})
		t.pending = nil
	}
}
