package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/metric"
)

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
	// Every part is waited for; of several that failed, the error names the
	// first in the chain's order, not the first to finish, so the same
	// failures always read the same (the simulation replays by its trace).
	errs := map[string]error{}
	for range pending {
		r := <-results
		if r.err != nil {
			errs[r.name] = r.err
		}
		cp.States[r.name] = r.state
	}
	for _, name := range t.names {
		if err := errs[name]; err != nil {
			return fail(&Error{Partition: t.p, ID: id, Participant: name, Op: "snapshot", Err: err})
		}
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
	// Last: a snapshot that expires (a transaction near its timeout) must
	// still be good when the file is durable and the commit follows.
	for _, name := range t.names {
		e, ok := t.participants[name].(Expirer)
		if !ok {
			continue
		}
		if err := e.Expired(ctx, id); err != nil {
			if !errors.Is(err, ErrExpired) {
				err = fmt.Errorf("%w: %w", ErrExpired, err)
			}
			c.expired.Add(ctx, 1, at)
			return fail(&Error{Partition: t.p, ID: id, Participant: name, Op: "save", Err: err})
		}
	}
	var start ID
	if t.restored != nil {
		start = t.restored.ID
	}
	size, err := c.store.save(ctx, cp, start, t.known)
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
	// The group offset moves after the notifications, as Kafka's own
	// exactly-once moves it inside the transaction: a two-phase-commit
	// sink (kafkasink) has committed the checkpoint's output by now. The
	// other order left a window (a pause between the commit and the
	// notification, past the transaction's timeout) in which the group
	// offset passed output the broker then aborted; the restore falls
	// back past that checkpoint, and the offset went backwards.
	if commit != nil {
		if err := commit(ctx, cp.NextOffset); err != nil {
			c.commits.Add(ctx, 1, at)
			c.log.WarnContext(ctx, "checkpoint: offset commit failed after completed checkpoint",
				"partition", t.p.String(), "id", id, "next_offset", cp.NextOffset, "err", err)
		}
	}
	if t.objects != nil {
		// After the notifications: the checkpoint is complete, and an
		// object only older checkpoints referenced may go once Keep newer
		// ones exist.
		c.store.collectObjects(ctx, t.p, cp.Parent, func(ref string) bool {
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
