package dedup

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Snapshot implements checkpoint.Participant: it returns the live entries and
// the clock in the format described in the package documentation. The same
// state always gives the same bytes. "Live" is judged at the deduplicator's
// clock, which only Observe and (with ProcessingTime) Cleanup move: a
// snapshot of a processing-time deduplicator that has been idle keeps the
// keys that expired since, which is safe (the next Observe reads Now and
// finds them expired) but larger than needed; call Cleanup before the
// checkpoint to leave them out.
//
// With Options.Incremental, once the coordinator gave the deduplicator its
// objects (UseObjects), Snapshot writes the keys written since the last
// snapshot as a delta object and returns a manifest naming the base and the
// deltas; see Options.Incremental. Two snapshots of one state then name
// the same objects unless a compaction finished in between: they restore
// the same state either way.
func (d *Deduplicator) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	if d.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.publish()
	if d.incrementalOn() {
		return d.snapshotIncremental(ctx, id)
	}
	return d.encodeSnapshot(), nil
}

// SnapshotAsync implements checkpoint.AsyncParticipant. With Incremental
// (and the coordinator's objects), it hands the writes since the last
// checkpoint over at the barrier and writes them as a delta in the returned
// part, while the chain goes on observing: the barrier holds the chain only
// for swapping two buffers. The first checkpoint writes the base, which
// reads the table, at the barrier. A full snapshot (no Incremental) is
// encoded at the barrier and the part returns it. A part whose delta was
// not written (its checkpoint failed or was aborted) hands its writes back
// to the next snapshot.
func (d *Deduplicator) SnapshotAsync(ctx context.Context, id checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	if d.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.publish()
	if d.incrementalOn() {
		return d.snapshotIncrementalAsync(ctx, id)
	}
	b := d.encodeSnapshot()
	return func(context.Context) ([]byte, error) { return b, nil }, nil
}

// Restore implements checkpoint.Participant: it replaces the state with one
// returned by Snapshot. A truncated, corrupt or unknown snapshot is rejected
// with an error wrapping ErrCorrupt, ErrUnsupportedVersion,
// ErrIncompatible or ErrFull, and the state is left unchanged.
func (d *Deduplicator) Restore(ctx context.Context, state []byte) error {
	if d.closed {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(state) >= 10 && string(state[:8]) == snapshotMagic && binary.LittleEndian.Uint16(state[8:]) == manifestVersion {
		if err := d.restoreIncremental(ctx, state); err != nil {
			return err
		}
		d.cursor = 0
		d.noneExpiredBefore = 0
		d.publish()
		return nil
	}
	t, clock, err := decodeSnapshot(state, d.opts.ExactKeys, d.opts.ExpectedKeys)
	if err != nil {
		return err
	}
	if d.opts.MaxKeys > 0 && t.count > d.opts.MaxKeys {
		return fmt.Errorf("%w: snapshot holds %d keys, MaxKeys is %d", ErrFull, t.count, d.opts.MaxKeys)
	}
	d.t = t
	d.clock = clock
	// A full snapshot: the next incremental snapshot writes a new base.
	d.inc.valid, d.inc.fresh, d.inc.log, d.inc.unwritten = false, false, nil, nil
	d.inc.gen++
	d.cursor = 0
	d.noneExpiredBefore = 0
	d.publish()
	return nil
}

// CheckpointCompleted implements checkpoint.Participant. There is nothing to
// do: a full snapshot holds the whole state, and the objects of incremental
// snapshots that no retained checkpoint needs are deleted by the
// coordinator.
func (d *Deduplicator) CheckpointCompleted(context.Context, checkpoint.ID) error {
	return nil
}
