package chsink

// checkpoint.Participant: the state a checkpoint keeps, and the journal
// pruning a completed checkpoint allows.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
)

var _ checkpoint.AsyncParticipant = (*Sink[struct{}])(nil)

type pendingRange struct {
	Count int           `json:"count"`
	First sink.Position `json:"first"`
	Last  sink.Position `json:"last"`
}

type snapshotState struct {
	Version    int           `json:"v"`
	Table      string        `json:"table"`
	Topic      string        `json:"topic"`
	Partition  int           `json:"partition"`
	HasCovered bool          `json:"has_covered"`
	Covered    sink.Position `json:"covered"`
	Pending    pendingRange  `json:"pending"`
	// Fed is the last row position the chain had fed, present only when it
	// lies before Covered: a short replay finished by the timer settled a
	// journaled batch the source has not re-read to its end, so the source
	// restarts inside that batch and its rows through Covered, which
	// ClickHouse holds, are dropped instead of refused as out of order.
	Fed *sink.Position `json:"fed,omitempty"`
}

const snapshotVersion = 1

// Snapshot flushes every buffered row and waits for ClickHouse to
// acknowledge it and the batch in flight, then returns the sink's state: the
// position through which rows are durable and the journaled batches still to
// be replayed. An error, including that of the batch inserted in the
// background, fails the checkpoint. A barrier inside a journaled batch being
// replayed returns sink.ErrReplayInProgress and leaves the sink usable. The
// coordinator calls SnapshotAsync instead, which does not wait.
func (s *Sink[T]) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	s.barrier(start)
	defer func() { s.m.snapshot.Record(context.Background(), time.Since(start).Seconds(), s.m.attrs) }()
	if err := s.cut(ctx); err != nil {
		return nil, err
	}
	if err := s.wait(); err != nil {
		return nil, err
	}
	return s.state(id, s.hasCovered, s.covered)
}

// SnapshotAsync is the barrier's part of a snapshot: it cuts the buffered
// rows as a batch and returns; rows added afterwards go into the next
// batch. The batch's goroutine seals it, journals its intent before its
// insert starts (as every flush does, so a crash replays the batch cut as
// it was; one cut and not yet journaled was not inserted either) and
// inserts it behind the batch in flight, if any: the barrier waits neither
// for the encoding, nor for the journal's fsync, nor for an earlier insert.
// The returned part waits for that insert and returns the state Snapshot
// would have returned at the barrier: every row through the cut covered.
// The checkpoint is written only after that insert was acknowledged;
// should it fail, the part returns its error and the sink is broken until
// Restore, as after any failed insert. The part does not take the sink's
// lock: the chain adds rows while it waits.
//
// A sink snapshotted this way does not flush ahead of the barrier (see
// Options.NoFlushAhead): its barrier no longer waits for the last insert,
// but it would wait for a flush ahead still in flight. For the same
// reason, while barriers come at least every 2*MaxDelay, the MaxDelay
// timer leaves the cut to the next barrier: it waits until half an
// interval past the expected barrier, never past 2*MaxDelay after the
// batch's first row.
func (s *Sink[T]) SnapshotAsync(ctx context.Context, id checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	s.barrier(start)
	s.async = true
	defer func() { s.m.snapshot.Record(context.Background(), time.Since(start).Seconds(), s.m.attrs) }()
	if err := s.cut(ctx); err != nil {
		return nil, err
	}
	// The last batch cut, if any, holds the last rows added, and it ends
	// only after the batches before it: once it is acknowledged every row
	// through s.pos is in ClickHouse.
	var f *flight[T]
	hasCovered, covered := s.hasCovered, s.covered
	if n := len(s.flights); n > 0 {
		f = s.flights[n-1]
		hasCovered, covered = true, f.last
	}
	state, err := s.state(id, hasCovered, covered)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) ([]byte, error) {
		if f == nil {
			return state, nil
		}
		// Only the flight's goroutine writes f.err, before it closes done;
		// the chain settles the flight (Sink.wait) at its next call.
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil {
			return nil, f.err
		}
		return state, nil
	}, nil
}

// cut seals the buffered rows at a barrier and starts their insert.
func (s *Sink[T]) cut(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if s.replaying {
		return fmt.Errorf("%w: %s..%s at %s", sink.ErrReplayInProgress, s.pending[0].First, s.pending[0].Last, s.pos)
	}
	if err := s.barrierFlush(ctx); err != nil {
		s.err = err
		return err
	}
	return nil
}

// state returns the checkpoint's state of the sink at barrier id, with every
// row through covered in ClickHouse, and notes it for CheckpointCompleted.
func (s *Sink[T]) state(id checkpoint.ID, hasCovered bool, covered sink.Position) ([]byte, error) {
	st := snapshotState{
		Version: snapshotVersion, Table: s.opts.Database + "." + s.table.Name, Topic: s.src.Topic, Partition: s.src.Partition,
		HasCovered: hasCovered || s.hasPos, Covered: covered,
	}
	if s.hasPos && s.pos.Compare(st.Covered) > 0 {
		st.Covered = s.pos
	} else if s.hasPos && s.pos.Compare(st.Covered) < 0 {
		fed := s.pos
		st.Fed = &fed
	}
	if n := len(s.pending); n > 0 {
		st.Pending = pendingRange{Count: n, First: s.pending[0].First, Last: s.pending[n-1].Last}
	}
	if st.HasCovered {
		s.snaps[id] = st.Covered
	}
	return json.Marshal(st)
}

// Restore replaces the sink's state with a snapshot's, claims the journal
// (fencing the previous owner) and loads the batches to replay.
func (s *Sink[T]) Restore(ctx context.Context, state []byte) error {
	st, err := decodeState(state)
	if err != nil {
		return err
	}
	table := s.opts.Database + "." + s.table.Name
	if st.Table != table || st.Topic != s.src.Topic || st.Partition != s.src.Partition {
		return fmt.Errorf("%w: state of %s %s/%d, this sink writes %s %s",
			ErrIncompatible, st.Table, st.Topic, st.Partition, table, s.src)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return sink.ErrClosed
	}
	s.abandon() // before Claim: the flight's goroutine reads the journal's epoch
	s.resetBuffer()
	s.err, s.inited, s.restored = nil, false, true
	s.hasCovered, s.covered = st.HasCovered, st.Covered
	s.hasPos, s.pos = st.HasCovered, st.Covered
	s.expect = st.Pending
	s.pending = nil
	clear(s.snaps)
	s.completed, s.settled = s.completed[:0], nil
	if st.Fed != nil && st.HasCovered && st.Fed.Compare(st.Covered) < 0 {
		settled := st.Covered
		s.pos, s.settled = *st.Fed, &settled
	}
	s.barrierAt = time.Time{} // the next barrier re-arms the flush ahead
	if err := s.ensureInit(ctx); err != nil {
		s.err = err
		return err
	}
	return nil
}

// CheckpointCompleted prunes the journal entries that no kept checkpoint
// needs: those through the oldest of the newest Options.KeepCheckpoints
// completed checkpoints, so restore can still fall back to any checkpoint
// the store keeps. It is idempotent; skipping it only lets the journal grow.
// A failed delete is logged and retried at the next completion, never
// returned; the error is sink.ErrFenced when another instance took the
// partition over.
func (s *Sink[T]) CheckpointCompleted(ctx context.Context, id checkpoint.ID) error {
	// The lock is not held while pruning: an asynchronous checkpoint
	// notifies the sink from the coordinator's goroutine, and the chain's
	// Add must not wait for the journal's deletes (the journal has a lock
	// of its own).
	s.mu.Lock()
	var through sink.Position
	found := false
	for sid, pos := range s.snaps {
		if sid <= id {
			if !found || pos.Compare(through) > 0 {
				through = pos
			}
			found = true
			delete(s.snaps, sid)
		}
	}
	if !found || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.completed = append(s.completed, through)
	if n := len(s.completed) - s.opts.KeepCheckpoints; n > 0 {
		s.completed = append(s.completed[:0], s.completed[n:]...)
	}
	if len(s.completed) < s.opts.KeepCheckpoints {
		s.mu.Unlock()
		return nil // an older checkpoint of an earlier owner may still be kept
	}
	oldest := s.completed[0]
	s.mu.Unlock()
	// A restore falls back at most to the oldest kept checkpoint: no replay
	// repairs a batch before it again (see repair.Repairer.DropStaging).
	s.repairer.DropStaging(ctx, oldest)
	err := s.journal.Prune(ctx, oldest)
	if errors.Is(err, sink.ErrPruneDeferred) {
		s.opts.Logger.Warn("chsink: journal pruning deferred", "source", s.src.String(), "err", err)
		return nil
	}
	return err
}

// decodeState parses a state written by Snapshot. The version is read
// first, leniently, so that a newer state with fields this build does not
// know is refused as ErrUnsupportedVersion rather than as corrupt; a state
// of this version must then decode exactly, with nothing unknown or left
// over.
func decodeState(b []byte) (snapshotState, error) {
	var v struct {
		Version *int `json:"v"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return snapshotState{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if v.Version == nil {
		return snapshotState{}, fmt.Errorf("%w: no version", ErrCorrupt)
	}
	if *v.Version != snapshotVersion {
		return snapshotState{}, fmt.Errorf("%w: state version %d, this sink reads %d", ErrUnsupportedVersion, *v.Version, snapshotVersion)
	}
	var st snapshotState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return snapshotState{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if dec.More() {
		return snapshotState{}, fmt.Errorf("%w: trailing data after the state", ErrCorrupt)
	}
	return st, nil
}
