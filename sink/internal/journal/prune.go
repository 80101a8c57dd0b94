// Pruning: the prune point lives in the owner record and moves only by
// compare-and-swap, so a fenced owner can neither raise it nor delete.

package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
)

// Prune makes through, the position covered by the oldest checkpoint that
// is still kept, the journal's prune point, and then deletes the entries
// (and acks) that end at or before the prune point. The point is raised in
// the owner record by compare-and-swap before anything is deleted, so a
// restore from a checkpoint older than a deletion fails with
// ErrStaleCheckpoint (see Pruned), and an owner fenced by a later Claim gets
// sink.ErrFenced and neither moves the point nor deletes anything. A point at or
// before the current one changes nothing but retries earlier deletes.
//
// Pruning only saves space: a failed write of the point or a failed delete
// loses nothing (Load filters entries by position anyway) and returns an
// error wrapping sink.ErrPruneDeferred, which callers should report and go on
// from; the entries are deleted by a later Prune.
func (j *Journal) Prune(ctx context.Context, through sink.Position) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.epoch == 0 {
		return errors.New("sink: journal: Prune before Claim")
	}
	if cur := j.owner.Pruned; cur == nil || through.Compare(*cur) > 0 {
		rec := j.owner
		rec.Pruned = &through
		out, _ := json.Marshal(rec)
		nv, err := j.store.Replace(ctx, j.prefix+"owner", out, j.version)
		if err != nil && !errors.Is(err, checkpoint.ErrConflict) {
			// Unknown outcome: read back what the record holds.
			got, gv, gerr := j.store.GetVersion(ctx, j.prefix+"owner")
			switch {
			case gerr != nil:
				return fmt.Errorf("%w: %s: write prune point %s: %v", sink.ErrPruneDeferred, j.prefix, through, err)
			case string(got) == string(out):
				nv, err = gv, nil
			case gv == j.version:
				return fmt.Errorf("%w: %s: write prune point %s: %v", sink.ErrPruneDeferred, j.prefix, through, err)
			default:
				err = checkpoint.ErrConflict
			}
		}
		if errors.Is(err, checkpoint.ErrConflict) {
			return fmt.Errorf("%w (%s: prune point not moved, epoch %d claimed by another instance)", sink.ErrFenced, j.src, j.epoch)
		}
		j.owner, j.version = rec, nv
	}
	point := *j.owner.Pruned
	keep := j.known[:0]
	var errs []error
	for _, e := range j.known {
		if e.last.Compare(point) <= 0 {
			err := j.store.Delete(ctx, e.name)
			if err == nil {
				continue
			}
			errs = append(errs, err)
		}
		keep = append(keep, e)
	}
	j.known = keep
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s: %d deletes failed, retried at the next prune: %w", sink.ErrPruneDeferred, j.prefix, len(errs), errs[0])
	}
	return nil
}

// Pruned returns the journal's prune point, if any: entries that end at or
// before it may have been deleted. It is read from the owner record, which
// only an owner that was still owner at that instant could raise.
func (j *Journal) Pruned(ctx context.Context) (sink.Position, bool, error) {
	b, err := j.store.Get(ctx, j.prefix+"owner")
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return sink.Position{}, false, nil
	case err != nil:
		return sink.Position{}, false, fmt.Errorf("sink: journal %s: read owner: %w", j.prefix, err)
	}
	var rec ownerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return sink.Position{}, false, fmt.Errorf("%w: owner record: %v", sink.ErrCorrupt, err)
	}
	if rec.Pruned == nil {
		return sink.Position{}, false, nil
	}
	return *rec.Pruned, true, nil
}
