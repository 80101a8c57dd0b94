package sim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// How the scheduler makes the coordinator's asynchronous part
// deterministic: every step that goroutine takes with an effect outside its
// process (a pending part, the checkpoint file's write, the offset commit,
// an asynchronous participant's CheckpointCompleted) first waits at a gate
// of its process. The scheduler runs the chain itself, in its own
// goroutine, and after each of its actions waits until every thread of the
// pending checkpoint is parked at a gate or finished (quiesce), so exactly
// one goroutine runs at a time and the seed alone decides what happens.

// errInjected is the error of a gate released with a failure.
var errInjected = errors.New("sim: injected failure")

type eventKind uint8

const (
	evArrive   eventKind = iota // a thread waits at a gate
	evReturned                  // a pending part returned: its thread ended
	evDone                      // the checkpoint's Trigger returned
)

type event struct {
	kind eventKind
	gate *gateWait
	err  error
}

// gateWait is a thread of a pending checkpoint parked at a gate.
type gateWait struct {
	name    string
	release chan bool // true: go on; false: fail with errInjected
}

type procKey struct{}

func procOf(ctx context.Context) *proc {
	p, _ := ctx.Value(procKey{}).(*proc)
	return p
}

// gate parks the calling thread of p's pending checkpoint until the
// scheduler releases it. A thread whose context ended (its process died or
// its checkpoint was aborted) passes no gate and has no effect.
func (p *proc) gate(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g := &gateWait{name: name, release: make(chan bool, 1)}
	p.events <- event{kind: evArrive, gate: g}
	select {
	case ok := <-g.release:
		if !ok {
			return errInjected
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gated puts gates in front of an AsyncParticipant's pending part and its
// CheckpointCompleted (called from the coordinator's goroutine).
type gated struct {
	p     *proc
	name  string
	inner checkpoint.AsyncParticipant
	// quietNotify passes CheckpointCompleted without a gate: the
	// coordinator notifies in map order, so of two gated notifications
	// the first would be chosen by the runtime, not the seed. Only one
	// participant may gate its notification; the others' must have no
	// effect outside the process and never fail.
	quietNotify bool
}

var _ checkpoint.AsyncParticipant = (*gated)(nil)

func (g *gated) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	return g.inner.Snapshot(ctx, id)
}

func (g *gated) Restore(ctx context.Context, state []byte) error { return g.inner.Restore(ctx, state) }

func (g *gated) SnapshotAsync(ctx context.Context, id checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	pend, err := g.inner.SnapshotAsync(ctx, id)
	if err != nil {
		return nil, err
	}
	g.p.parts++
	return func(ctx context.Context) ([]byte, error) {
		if ctx.Err() != nil {
			// Begin lets the parts of an aborted checkpoint go, in the
			// chain's goroutine: no gate, no thread.
			return pend(ctx)
		}
		defer func() { g.p.events <- event{kind: evReturned} }()
		if err := g.p.gate(ctx, "part:"+g.name); err != nil {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, _ = pend(cctx)
			return nil, err
		}
		return pend(ctx)
	}, nil
}

// Expired and Resolve pass the optional checkpoint.Expirer and
// checkpoint.Resolver of the fix of breach 1 through (no gate: Expired
// runs between the last part's return and the save's gate, Resolve in
// Attach, both while the scheduler waits).
func (g *gated) Expired(ctx context.Context, id checkpoint.ID) error {
	if e, ok := g.inner.(interface {
		Expired(context.Context, checkpoint.ID) error
	}); ok {
		return e.Expired(ctx, id)
	}
	return nil
}

func (g *gated) Resolve(ctx context.Context, state []byte) error {
	if r, ok := g.inner.(interface {
		Resolve(context.Context, []byte) error
	}); ok {
		return r.Resolve(ctx, state)
	}
	return nil
}

// Start passes the optional checkpoint.Starter through (no gate: Attach
// calls it while the scheduler waits).
func (g *gated) Start(ctx context.Context) error {
	if s, ok := g.inner.(checkpoint.Starter); ok {
		return s.Start(ctx)
	}
	return nil
}

func (g *gated) CheckpointCompleted(ctx context.Context, id checkpoint.ID) error {
	if g.quietNotify {
		return g.inner.CheckpointCompleted(ctx, id)
	}
	if err := g.p.gate(ctx, "notify:"+g.name); err != nil {
		return err
	}
	return g.inner.CheckpointCompleted(ctx, id)
}

// storage is the shared checkpoint Storage (a real checkpoint.MemoryStorage)
// with a gate before each checkpoint file's write, and the world's check
// of every checkpoint saved.
type storage struct {
	*checkpoint.MemoryStorage
	w *world
}

var _ checkpoint.StreamPutter = (*storage)(nil)

func (s *storage) PutStream(ctx context.Context, name string, write func(io.Writer) error) error {
	p := procOf(ctx)
	if p == nil || !strings.HasSuffix(name, ".ckpt") {
		return s.MemoryStorage.PutStream(ctx, name, write)
	}
	if err := p.gate(ctx, "save"); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	if err := s.MemoryStorage.Put(ctx, name, buf.Bytes()); err != nil {
		return err
	}
	s.w.saved(p, buf.Bytes())
	return nil
}
