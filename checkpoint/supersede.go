package checkpoint

import (
	"context"
	"fmt"
	"slices"
)

// How a revoked owner of a partition is kept from the partition's
// checkpoints. An owner that is revoked without knowing it (a process
// paused past its consumer-group session, cut off from the group
// coordinator) goes on: it can save a checkpoint after the partition's next
// owner restored, even after that owner's first checkpoint, and under a
// larger ID (its declined barriers used IDs too), so the newest file by ID
// is not the newest owner's. Restoring it would go back behind output the
// next owner already committed.
//
// Two facts decide, read from the checkpoint names (ID and generation) and
// the Parent each checkpoint records: consumer-group generations grow, and
// a chain's checkpoints descend from what the chain restored. Call a
// checkpoint's lineage start the Parent of its oldest retained ancestor of
// its own generation (following Parent through checkpoints of that
// generation: the chains of one owner, restarted or not), and for a chain
// that saves, the checkpoint it restored. A checkpoint C of generation g is
// superseded when the partition holds a checkpoint D of a higher
// generation with start(C) < D.ID <= C.ID: D is not in C's lineage, and
// D's generation began after g had ended, so C was saved by a revoked
// owner (or is one an owner of D's generation passed over at restore: its
// output lost, or it was unreadable). Restore skips such a C; a Save that
// would write one is refused with ErrSuperseded, for any ID above the
// chain's start. Following the lineage matters: a revoked owner whose
// racing save landed would otherwise go on from it, each checkpoint's
// Parent its own last one.
//
// A consumer group deleted and created again starts its generations at 1
// anew. Its first chain restores the old group's newest checkpoint, so its
// checkpoints start there and are not superseded by the old ones; the
// passed-over checkpoints its Attach saw do not refuse its saves either
// (Task keeps their names). What stays wrong in that case: a checkpoint
// of the new group that the old group's passed-over checkpoint sorts
// between (its lineage start below it, its ID above) is skipped at
// restore, which then replays from further back.

// supersededBy returns a checkpoint among es (a partition's entries) of a
// generation above gen with an ID in (start, id], skipping the names known
// holds; ok is false when there is none.
func supersededBy(es []entry, gen int64, start ID, id uint64, known map[string]bool) (d entry, ok bool) {
	for _, e := range es {
		if e.gen > gen && e.id > uint64(start) && e.id <= id && !known[e.name] {
			return e, true
		}
	}
	return entry{}, false
}

// lineageStart returns the lineage start of cp, the checkpoint of entry e
// (see above): the Parent of its oldest ancestor of e's generation among
// es, read through Parent. An ancestor that cannot be read ends the walk.
func (s *Store) lineageStart(ctx context.Context, es []entry, e entry, cp *Checkpoint) ID {
	start := cp.Parent
	for range es { // a bound: Parents go down, but a corrupt file may say anything
		if start == 0 {
			return 0
		}
		i := slices.IndexFunc(es, func(a entry) bool { return a.id == uint64(start) && a.gen == e.gen })
		if i < 0 {
			return start
		}
		data, err := s.storage.Get(ctx, es[i].name)
		if err != nil {
			return start
		}
		parent, err := Decode(data)
		if err != nil || parent.ParentUnknown || parent.Parent >= start {
			return start
		}
		start = parent.Parent
	}
	return start
}

// checkOwner returns an error wrapping ErrSuperseded when the partition of
// cp holds a checkpoint of a later generation with an ID above start (the
// checkpoint the saving chain restored, or cp's Parent), other than those
// named in known: cp's chain no longer owns the partition and must not
// save. Any ID above start counts, also one above cp's, since a later
// owner's checkpoint of any ID means the same.
func (s *Store) checkOwner(ctx context.Context, cp *Checkpoint, start ID, known map[string]bool) error {
	es, err := s.entries(ctx, cp.Partition)
	if err != nil {
		return err
	}
	if d, ok := supersededBy(es, max(cp.Generation, 0), start, ^uint64(0), known); ok {
		return fmt.Errorf("%w: %s holds checkpoint %d of generation %d, saved after checkpoint %d by a later owner; this chain's generation is %d",
			ErrSuperseded, cp.Partition, d.id, d.gen, start, cp.Generation)
	}
	return nil
}
