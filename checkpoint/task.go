package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/internal/meter"
)

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
	known      map[string]bool // the checkpoint names listed at Attach
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
// starts empty. Before restoring any participant, Attach calls Resolve of
// every Resolver with its state: a checkpoint whose output a Resolver
// reports lost (ErrOutputLost) is passed over for the next older retained
// one, and every participant is restored from the checkpoint chosen; when
// no retained checkpoint is left, the error wraps ErrOutputLost. Any other
// Resolve error, and a participant's Restore error, is returned as is:
// restore does not fall back to an older checkpoint for it, since the
// error may be transient. Last, Attach calls Start of every Starter,
// restored or fresh (a transactional sink fences earlier owners there);
// its error fails Attach too.
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
	cp, err := t.resolved(ctx)
	switch {
	case errors.Is(err, ErrNotFound):
		c.log.InfoContext(ctx, "checkpoint: no checkpoint, fresh start", "partition", p.String())
	case err != nil:
		return nil, err
	default:
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
	for _, name := range t.names {
		s, ok := participants[name].(Starter)
		if !ok {
			continue
		}
		if err := s.Start(ctx); err != nil {
			var id ID
			if t.restored != nil {
				id = t.restored.ID
			}
			return nil, &Error{Partition: p, ID: id, Participant: name, Op: "start", Err: err}
		}
	}
	c.mu.Lock()
	c.tasks[t] = struct{}{}
	c.mu.Unlock()
	return t, nil
}

// resolved returns the newest intact checkpoint of the chain's partition
// that every Resolver accepts, falling back past checkpoints whose output
// was lost (ErrOutputLost), or an error wrapping ErrNotFound when the
// partition has no checkpoint at all.
func (t *Task) resolved(ctx context.Context) (*Checkpoint, error) {
	c, p := t.c, t.p
	var lost error         // the newest checkpoint's lost output, if any
	var oldest *Checkpoint // the oldest checkpoint passed over
	var before *entry
	for {
		cp, e, listed, err := c.store.latestBefore(ctx, p, before)
		if t.known == nil {
			// What the partition held at Attach: a later generation's
			// checkpoint among it (passed over, or a group created anew)
			// does not make this chain's saves superseded.
			t.known = listed
		}
		if errors.Is(err, ErrNotFound) && lost != nil {
			// A chain that started fresh wrote the oldest lost checkpoint
			// (a version 1 file does not say: only ID 1 is taken for
			// one): a fresh start is what came before it.
			if oldest.Parent == 0 && (!oldest.ParentUnknown || oldest.ID == 1) {
				c.log.WarnContext(ctx, "checkpoint: the output of a checkpoint descending from a fresh start was lost; fresh start",
					"partition", p.String(), "id", oldest.ID)
				return nil, err
			}
			// The checkpoint it descends from was pruned: a fresh start
			// would skip or repeat input, so say so instead.
			parent := "an unknown checkpoint (a version 1 file)"
			if !oldest.ParentUnknown {
				parent = fmt.Sprintf("checkpoint %d", oldest.Parent)
			}
			return nil, fmt.Errorf("checkpoint: attach %s: no older retained checkpoint to fall back to: checkpoint %d descends from %s, which is not retained: %w",
				p, oldest.ID, parent, lost)
		}
		if err != nil {
			return nil, err
		}
		for name := range cp.States {
			if _, ok := t.participants[name]; !ok {
				return nil, fmt.Errorf("checkpoint: attach %s: checkpoint %d: %q: %w", p, cp.ID, name, ErrUnknownState)
			}
		}
		err = nil
		for _, name := range t.names {
			r, ok := t.participants[name].(Resolver)
			if !ok {
				continue
			}
			if err = r.Resolve(ctx, cp.States[name]); err != nil {
				err = &Error{Partition: p, ID: cp.ID, Participant: name, Op: "restore", Err: err}
				break
			}
		}
		if err == nil {
			return cp, nil
		}
		if !errors.Is(err, ErrOutputLost) {
			return nil, err
		}
		c.fallback.Add(ctx, 1, metric.WithAttributeSet(t.attrs))
		c.log.WarnContext(ctx, "checkpoint: checkpoint's output was lost; falling back to an older one, whose replay writes it again",
			"partition", p.String(), "id", cp.ID, "err", err)
		if lost == nil {
			lost = err
		}
		oldest, before = cp, e
	}
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
