package journal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
)

// Load returns the entries whose last position is after `after` (all
// entries when after is nil), ordered by position. Overlapping entries are
// reconciled: an entry that supersedes another (same first position and
// the same or an earlier last one, Supersedes naming its token, newer
// epoch) replaces it, unless the superseded entry was
// acknowledged by a still newer epoch (then the superseding one was written
// by a fenced owner and never inserted); an unacknowledged entry of an older
// epoch that overlaps a newer epoch's entry was written by a fenced owner
// after the takeover and never inserted, so it is dropped; any other overlap
// is sink.ErrCorrupt. An unacknowledged entry that spans after (starts at or
// before it, ends past it) is dropped too: only a fenced owner can have
// written it, since a checkpoint never falls inside a batch of its own
// lineage.
func (j *Journal) Load(ctx context.Context, after *sink.Position) ([]sink.Intent, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	names, err := j.store.List(ctx, j.prefix)
	if err != nil {
		return nil, fmt.Errorf("sink: journal %s: list: %w", j.prefix, err)
	}
	var all []sink.Intent
	var acks []ackRecord
	var ackNames []string
	known := j.known[:0]
	for _, name := range names {
		base := name[len(j.prefix):]
		isAck := strings.HasPrefix(base, "a-")
		if !isAck && !strings.HasPrefix(base, "b-") {
			continue
		}
		b, err := j.store.Get(ctx, name)
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue // pruned concurrently
		}
		if err != nil {
			return nil, fmt.Errorf("sink: journal %s: read %s: %w", j.prefix, name, err)
		}
		if isAck {
			var a ackRecord
			if err := json.Unmarshal(b, &a); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", sink.ErrCorrupt, name, err)
			}
			acks, ackNames = append(acks, a), append(ackNames, name)
			continue
		}
		var in sink.Intent
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", sink.ErrCorrupt, name, err)
		}
		if in.Version != sink.IntentVersion {
			return nil, fmt.Errorf("%w: %s: intent version %d, this build reads %d", sink.ErrUnsupportedVersion, name, in.Version, sink.IntentVersion)
		}
		if in.Last.Compare(in.First) < 0 {
			return nil, fmt.Errorf("%w: %s: version %d, range %s..%s", sink.ErrCorrupt, name, in.Version, in.First, in.Last)
		}
		known = append(known, entryRef{name: name, last: in.Last})
		all = append(all, in)
	}
	// Ack records of replayed batches, written by later owners.
	for k, a := range acks {
		last := a.First
		for i := range all {
			e := &all[i]
			if e.First == a.First && e.Epoch == a.Epoch {
				e.Acked, e.AckEpoch = true, max(e.AckEpoch, a.AckEpoch)
				if a.Through != nil && a.Through.Compare(e.Last) > 0 {
					e.Last = *a.Through
				}
				last = e.Last
			}
		}
		known = append(known, entryRef{name: ackNames[k], last: last})
	}
	j.known = known
	j.reach = reach(all, after)
	// Acks carried by later intents of the same epoch and owner. Only
	// entries that end before the carrier begins: an intent never
	// acknowledges itself or a batch cut over its own positions.
	for i := range all {
		a := &all[i]
		if a.AckedThrough == nil {
			continue
		}
		for k := range all {
			e := &all[k]
			if !e.Acked && e.Epoch == a.Epoch && e.Owner == a.Owner &&
				e.Last.Compare(*a.AckedThrough) <= 0 && e.Last.Compare(a.First) < 0 {
				e.Acked, e.AckEpoch = true, e.Epoch
			}
		}
	}
	// A superseded entry goes before the filter by position: an entry that
	// cut it short may end before the restore point while it spans it.
	superseded := make([]bool, len(all))
	for i, prev := range all {
		for _, in := range all {
			if supersedes(in, prev) && !(prev.Acked && prev.AckEpoch > in.Epoch) {
				superseded[i] = true
			}
		}
	}
	i := 0
	all = slices.DeleteFunc(all, func(sink.Intent) bool { i++; return superseded[i-1] })
	all = slices.DeleteFunc(all, func(in sink.Intent) bool {
		if after == nil {
			return false
		}
		if in.Last.Compare(*after) <= 0 {
			return true // durable before the restore point
		}
		// An unacknowledged batch across the restore point was written by an
		// owner already fenced, and never inserted: no checkpoint falls inside
		// a batch of the lineage that took it (Snapshot flushes, and a
		// barrier inside a batch being replayed is declined), and a batch
		// journaled before that lineage's Claim was loaded and replayed
		// whole by it. Replaying it would cut the rows differently and stop
		// the sink on every restart.
		return !in.Acked && in.First.Compare(*after) <= 0
	})
	slices.SortFunc(all, func(a, b sink.Intent) int {
		if c := a.First.Compare(b.First); c != 0 {
			return c
		}
		return cmp.Compare(a.Epoch, b.Epoch)
	})
	out := all[:0]
	for _, in := range all {
		if n := len(out); n > 0 && in.First.Compare(out[n-1].Last) <= 0 {
			prev := out[n-1]
			switch {
			case supersedes(in, prev) && !(prev.Acked && prev.AckEpoch > in.Epoch):
				out[n-1] = in
			case supersedes(in, prev) && !in.Acked:
				// Written by an owner fenced before the superseded batch was
				// acknowledged by a later one: never inserted.
			case prev.Epoch < in.Epoch && !prev.Acked:
				out[n-1] = in
			case in.Epoch < prev.Epoch && !in.Acked:
			default:
				return nil, fmt.Errorf("%w: overlapping batches %s..%s (epoch %d) and %s..%s (epoch %d)",
					sink.ErrCorrupt, prev.First, prev.Last, prev.Epoch, in.First, in.Last, in.Epoch)
			}
			continue
		}
		out = append(out, in)
	}
	return out, nil
}

// supersedes reports whether in replaces prev: a newer epoch's entry naming
// prev's token, over prev's positions or a prefix of them (a replay that
// stalled was cut short at its last row; the rest of prev's positions then
// belong to the batches after in).
func supersedes(in, prev sink.Intent) bool {
	return in.Supersedes != "" && in.Supersedes == prev.Token && in.Epoch > prev.Epoch &&
		in.First == prev.First && in.Last.Compare(prev.Last) <= 0
}

// Reach returns the last position named by an entry that the last Load
// read past its restore point, superseded entries and the earlier
// versions of a batch cut short included (Load returns neither), and false
// when there is none. ClickHouse may hold rows at positions up to it that
// a state restored at the restore point does not account for: what an
// owner that died before its next checkpoint inserted.
func (j *Journal) Reach() (sink.Position, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.reach == nil {
		return sink.Position{}, false
	}
	return *j.reach, true
}

// reach returns the last position named by entries (their ends, as
// extended by acks, and their earlier versions) after after, nil if none.
func reach(entries []sink.Intent, after *sink.Position) *sink.Position {
	var r *sink.Position
	for _, in := range entries {
		r = maxPos(r, in.Last)
		for _, e := range in.Earlier {
			r = maxPos(r, e.Last)
		}
	}
	if r == nil || after != nil && r.Compare(*after) <= 0 {
		return nil
	}
	return r
}
