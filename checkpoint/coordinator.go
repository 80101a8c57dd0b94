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

	restored   *Checkpoint
	lastID     ID
	notifiedID ID        // the last completed checkpoint the synchronous participants were told of
	flight     *inflight // the checkpoint Begin started last
	failures   chan error

	mu            sync.Mutex
	pending       *Barrier  // sent, not yet taken
	busy          *inflight // the checkpoint whose asynchronous part runs, nil if none
	completedID   ID        // the last completed checkpoint
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
		barriers: make(chan *Barrier, 1), failures: make(chan error, 1),
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
		t.completedID, t.notifiedID = cp.ID, cp.ID
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

// barrier returns the pending barrier, or sends a new one. An interval
// barrier is skipped (nil) while the chain's previous checkpoint is still
// pending, so that the chain never waits for it.
func (t *Task) barrier(interval bool) *Barrier {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending != nil {
		return t.pending
	}
	if interval && t.busy != nil {
		t.c.skips.Add(context.Background(), 1, metric.WithAttributeSet(t.attrs))
		return nil
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
// offset of the first record after the barrier, and waits until it
// completed: Begin, then Wait. A chain that must not stop for the
// checkpoint's durable part calls Begin (kafkasource does); Checkpoint is
// for checkpoints a chain decides on itself (at the end of a bounded input,
// in tests). Participants without SnapshotAsync get their
// CheckpointCompleted before it returns, as the chain's goroutine.
//
// b is the barrier taken from Barriers, or nil.
func (t *Task) Checkpoint(ctx context.Context, b *Barrier, nextOffset int64, meta Meta, commit func(context.Context, int64) error) error {
	if err := t.Begin(ctx, b, nextOffset, meta, commit); err != nil {
		return err
	}
	if err := t.Wait(ctx); err != nil {
		return err
	}
	return t.notifySync(ctx)
}

// Begin takes checkpoint lastID+1 of the chain at nextOffset, the offset of
// the first record after the barrier, and returns as soon as its
// synchronous part is taken, so that the chain goes on with the next
// records. It runs the protocol:
//
//  1. In the chain's goroutine, at the barrier: if the previous checkpoint
//     is still pending, wait for it (one is pending at a time; Run skips a
//     barrier meanwhile instead, see Options); notify the participants
//     without SnapshotAsync of the last completed checkpoint; then call
//     SnapshotAsync of every AsyncParticipant and Snapshot of every other
//     participant (a synchronous sink flushes here). Begin returns.
//  2. In a goroutine of the task: wait for every PendingSnapshot (an
//     asynchronous sink's last insert), then write the checkpoint
//     atomically to the Store (fsyncs included).
//  3. commit(ctx, nextOffset), if commit is not nil: the source moves the
//     consumer group's offset, only while its generation is current. A
//     commit error is logged and counted, not returned: the checkpoint, not
//     the group offset, is the truth.
//  4. Notify the AsyncParticipants with CheckpointCompleted; the others
//     are notified in step 1 of the next checkpoint (or by Checkpoint).
//     Then delete objects no retained checkpoint needs.
//
// A failure in 1 or 2 aborts: nothing is written, no offset moves. A
// failure in step 1 is returned by Begin; one in 2 (or 4) is returned by
// Wait, sent on Failures and reaches the barrier's Trigger caller; the next
// Begin returns it too. Either way the chain must restart from its last
// completed checkpoint. An error wrapping ErrDeclined skips the checkpoint
// and the chain goes on. When ctx ends (the partition was revoked) before
// step 2 writes, nothing is written.
//
// b is the barrier taken from Barriers, or nil for a checkpoint the chain
// decides on itself.
func (t *Task) Begin(ctx context.Context, b *Barrier, nextOffset int64, meta Meta, commit func(context.Context, int64) error) error {
	c := t.c
	start := c.now()
	at := metric.WithAttributeSet(t.attrs)
	defer func() { c.hold.Record(ctx, c.now().Sub(start).Seconds(), at) }()
	t.mu.Lock()
	if t.pending == b {
		t.pending = nil
	}
	t.mu.Unlock()
	err := t.begin(ctx, b, start, nextOffset, meta, commit)
	if err != nil && b != nil {
		b.finish(err)
	}
	if err == nil && c.sync {
		if err = t.Wait(ctx); err == nil {
			err = t.notifySync(ctx)
		}
	}
	return err
}

// Wait waits for the checkpoint Begin started last to complete or fail and
// returns its error (nil when none was started). Cancelling ctx stops the
// wait, not the checkpoint.
func (t *Task) Wait(ctx context.Context) error {
	f := t.flight
	if f == nil {
		return nil
	}
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return fmt.Errorf("checkpoint: wait: %w", ctx.Err())
	}
}

// Failures delivers the error of a checkpoint whose asynchronous part
// failed after Begin returned. The chain selects on it beside its records
// and barriers and restarts from its last completed checkpoint when one
// arrives (kafkasource does).
func (t *Task) Failures() <-chan error { return t.failures }

// inflight is a checkpoint whose synchronous part was taken and whose
// asynchronous part runs in a goroutine of the task (see Begin).
type inflight struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // valid once done is closed
}

func (t *Task) begin(ctx context.Context, b *Barrier, start time.Time, nextOffset int64, meta Meta, commit func(context.Context, int64) error) error {
	c := t.c
	at := metric.WithAttributeSet(t.attrs)
	if f := t.flight; f != nil {
		select {
		case <-f.done:
		default:
			c.waits.Add(ctx, 1, at)
			<-f.done
		}
		t.flight = nil
		if f.err != nil {
			return f.err // reported once more: the chain must restart
		}
	}
	if err := t.notifySync(ctx); err != nil {
		return err
	}
	t.lastID++
	id := t.lastID
	cp := &Checkpoint{
		ID: id, Partition: t.p, NextOffset: nextOffset, Created: start,
		States: make(map[string][]byte, len(t.names)), Generation: meta.Generation, Member: meta.Member,
	}
	for _, o := range t.objects {
		o.gen.Store(max(meta.Generation, 0))
	}
	pending := map[string]PendingSnapshot{}
	release := func() {
		// The checkpoint is aborted: let the pending parts go.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		for _, p := range pending {
			_, _ = p(cctx)
		}
	}
	for _, name := range t.names {
		var state []byte
		var err error
		if ap, ok := t.participants[name].(AsyncParticipant); ok && !c.sync {
			var p PendingSnapshot
			if p, err = ap.SnapshotAsync(ctx, id); err == nil {
				pending[name] = p
			}
		} else {
			state, err = t.participants[name].Snapshot(ctx, id)
		}
		if err != nil {
			release()
			e := &Error{Partition: t.p, ID: id, Participant: name, Op: "snapshot", Err: err}
			if errors.Is(err, ErrDeclined) {
				c.declines.Add(ctx, 1, at)
			} else {
				c.failures.Add(ctx, 1, at)
			}
			return e
		}
		if _, async := pending[name]; !async {
			cp.States[name] = state
		}
	}
	fctx, cancel := context.WithCancel(ctx)
	f := &inflight{cancel: cancel, done: make(chan struct{})}
	t.flight = f
	t.mu.Lock()
	t.busy = f
	t.mu.Unlock()
	go func() {
		defer close(f.done)
		defer cancel()
		f.err = t.complete(fctx, cp, pending, commit)
		t.mu.Lock()
		t.busy = nil
		t.mu.Unlock()
		if f.err != nil {
			select {
			case t.failures <- f.err:
			default:
			}
		}
		if b != nil {
			b.finish(f.err)
		}
	}()
	return nil
}

// complete is the asynchronous part of checkpoint cp (see Begin, steps 2
// to 4), in the task's goroutine.
func (t *Task) complete(ctx context.Context, cp *Checkpoint, pending map[string]PendingSnapshot, commit func(context.Context, int64) error) error {
	c := t.c
	id := cp.ID
	at := metric.WithAttributeSet(t.attrs)
	fail := func(e *Error) error {
		c.failures.Add(ctx, 1, at)
		return e
	}
	type result struct {
		name  string
		state []byte
		err   error
	}
	results := make(chan result, len(pending))
	for name, p := range pending {
		go func() {
			state, err := p(ctx)
			results <- result{name, state, err}
		}()
	}
	var first *Error
	for range pending {
		r := <-results
		if r.err != nil && first == nil {
			first = &Error{Partition: t.p, ID: id, Participant: r.name, Op: "snapshot", Err: r.err}
		}
		cp.States[r.name] = r.state
	}
	if first != nil {
		return fail(first)
	}
	for _, name := range t.names {
		o := t.objects[name]
		if o == nil {
			continue
		}
		refs, err := t.participants[name].(ObjectParticipant).References(cp.States[name])
		if err != nil {
			return fail(&Error{Partition: t.p, ID: id, Participant: name, Op: "snapshot", Err: err})
		}
		for _, r := range refs {
			cp.Objects = append(cp.Objects, o.ref(r))
		}
	}
	slices.Sort(cp.Objects)
	cp.Duration = c.now().Sub(cp.Created)
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
	c.duration.Record(ctx, end.Sub(cp.Created).Seconds(), at)
	c.size.Record(ctx, int64(size), at)
	t.mu.Lock()
	t.lastCompleted = cp.Created
	t.completedID = id
	t.mu.Unlock()
	if commit != nil {
		if err := commit(ctx, cp.NextOffset); err != nil {
			c.commits.Add(ctx, 1, at)
			c.log.WarnContext(ctx, "checkpoint: offset commit failed after completed checkpoint",
				"partition", t.p.String(), "id", id, "next_offset", cp.NextOffset, "err", err)
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
	for name := range pending {
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

// notifySync calls CheckpointCompleted of the participants without
// SnapshotAsync for the newest completed checkpoint they have not been told
// of, in the chain's goroutine.
func (t *Task) notifySync(ctx context.Context) error {
	t.mu.Lock()
	id := t.completedID
	t.mu.Unlock()
	if id <= t.notifiedID {
		return nil
	}
	t.notifiedID = id
	for _, name := range t.names {
		p := t.participants[name]
		if _, async := p.(AsyncParticipant); async && !t.c.sync {
			continue
		}
		if err := p.CheckpointCompleted(ctx, id); err != nil {
			return &Error{Partition: t.p, ID: id, Participant: name, Op: "notify", Err: err}
		}
	}
	return nil
}

// Detach unregisters the chain: later triggers skip it and a barrier not yet
// taken fails with ErrChainStopped. A checkpoint still pending is aborted
// (unless its file is already written) and Detach waits for its goroutine,
// so no goroutine of the task runs afterwards. It is safe to call twice.
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
	if f := t.busy; f != nil {
		// The pending checkpoint's file is not written once its context
		// ended; its participants' parts return promptly then.
		f.cancel()
		t.mu.Unlock()
		<-f.done
		t.mu.Lock()
	}
}
