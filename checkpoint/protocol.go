package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
)

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
//     asynchronous sink's last insert), ask every Expirer whether its
//     snapshot is still good (an error wrapping ErrExpired aborts), then
//     write the checkpoint atomically to the Store (fsyncs included).
//  3. Notify the AsyncParticipants with CheckpointCompleted (a kafkasink
//     commits its transaction); the others are notified in step 1 of the
//     next checkpoint (or by Checkpoint).
//  4. commit(ctx, nextOffset), if commit is not nil: the source moves the
//     consumer group's offset, only while its generation is current. A
//     commit error is logged and counted, not returned: the checkpoint, not
//     the group offset, is the truth. Then delete objects no retained
//     checkpoint needs.
//
// A failure in 1 or 2 aborts: nothing is written, no offset moves; one in
// 3 leaves the file written and the offset where it was. A failure in
// step 1 is returned by Begin; one in 2 (or 3) is returned by
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
	t.mu.Lock()
	// The previous checkpoint's notifications returned (else begin failed
	// above): its output is confirmed, and this one's state descends from it.
	parent := t.completedID
	t.mu.Unlock()
	cp := &Checkpoint{
		ID: id, Partition: t.p, NextOffset: nextOffset, Created: start,
		States: make(map[string][]byte, len(t.names)), Generation: meta.Generation, Member: meta.Member,
		Parent: parent,
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
