package chsink

// Replay: rows that fall into batches journaled before a crash are
// re-cut into exactly those batches and resolved one by one. Which row
// goes where is journal.NextStep's decision; this file does what it says.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/repair"
)

// finishReplay resolves pending[0] with the rows buffered for it. It runs
// synchronously, after the batch in flight (rows buffered before pending[0])
// is settled: replays are rare, and their order of acks and inserts then
// stays the plain one.
//
// stalled says Run's timer finishes a replay that came up short (see Run):
// the batch's other rows may still come, because the replay was slow rather
// than short, and they must not be lost. The batch is then cut at the last
// row buffered, its journal entry superseded by one that ends there, so the
// rows after it are a batch of their own; unless ClickHouse already held the
// journaled batch and MismatchKeepFirst keeps it: then its later rows are
// dropped as part of that version (see Sink.settled).
func (s *Sink[T]) finishReplay(ctx context.Context, stalled bool) error {
	if err := s.wait(); err != nil {
		return err
	}
	start := time.Now()
	p := s.pending[0]
	var h uint64
	if s.n > 0 {
		var err error
		if h, _, err = s.buf.seal(); err != nil {
			return err
		}
	}
	match := s.n == p.Rows && h == p.Hash && (s.n == 0 || s.last == p.Last)
	if !match {
		mis := &sink.ContentMismatchError{Intent: p, Rows: s.n, Hash: h, Last: s.last}
		switch {
		case s.opts.OnMismatch == MismatchFail:
			return mis
		case s.opts.OnMismatch == MismatchReinsert && s.n > 0:
			s.opts.Logger.Warn("chsink: replayed batch differs from the journal; inserting the new version under a fresh token", "err", mis, "stalled", stalled)
			last := p.Last
			if stalled {
				last = s.last
			}
			return s.reinsert(ctx, p, h, last, start)
		}
		if s.opts.OnMismatch == MismatchReinsert {
			// Nothing replayed where the journal has rows: nothing to insert.
			s.opts.Logger.Warn("chsink: replayed batch has no rows where the journal has some; under MismatchReinsert the journaled version stands",
				"policy", "MismatchReinsert", "err", mis, "stalled", stalled)
		} else {
			s.opts.Logger.Warn("chsink: replayed batch differs from the journal; keeping the first version, as MismatchKeepFirst says",
				"policy", "MismatchKeepFirst", "err", mis, "stalled", stalled)
		}
	}
	through := p.Last // ClickHouse holds the batch through here once settled
	switch {
	case p.Acked:
		// Already in ClickHouse: the replayed rows are dropped here.
	case s.n == 0:
		// KeepFirst with nothing replayed: the old version landed or nothing did.
	default:
		skip, err := s.guardWindow(ctx, p)
		if err != nil {
			return err
		}
		if !skip { // skipped by the operator's WindowSkip: settled as it is
			if err := s.journal.CheckOwner(ctx); err != nil {
				return err
			}
			if stalled && !match && !s.info.replicated {
				return s.cutShort(ctx, p, h, start)
			}
			rows := repair.AsJournaled
			switch {
			case stalled && !match:
				rows = repair.PrefixOf
			case !match:
				rows = repair.DiffersFrom
			}
			dups, err := s.insert(ctx, s.buf.sealed, p, true, rows, s.beforeInsert)
			if err != nil {
				return err
			}
			// A cut entry's token may hold a longer, earlier version.
			through, _ = heldEarlier(dups, p.Earlier, p.Last)
			if stalled && s.info.replicated {
				// A replicated table logs no duplicate parts to tell by:
				// the batch is settled as if it had landed.
				s.opts.Logger.Warn("chsink: a stalled replay of a batch was finished on a replicated table, which cannot tell whether it held the batch; later rows of the batch are dropped",
					"source", s.src.String(), "first", p.First.String(), "last", p.Last.String())
			}
		}
	}
	return s.ackReplayed(ctx, p, stalled, through)
}

// ackReplayed moves past pending[0], p, whose rows are in ClickHouse: it acks p
// (through a later position when ClickHouse held an earlier, longer version
// of it) and, when keep, drops the later rows up to through as part of the
// version ClickHouse holds (see Sink.settled).
func (s *Sink[T]) ackReplayed(ctx context.Context, p sink.Intent, keep bool, through sink.Position) error {
	switch {
	case through.Compare(p.Last) > 0:
		if err := s.journal.AckHeld(ctx, &p, through); err != nil {
			return err
		}
		keep = true
	case !p.Acked:
		if err := s.journal.Ack(ctx, &p); err != nil {
			return err
		}
	}
	s.pending = s.pending[1:]
	s.covered, s.hasCovered = p.Last, true
	if keep {
		last := p.Last
		s.settled = &last
	}
	s.resetBuffer()
	return nil
}

// heldEarlier reports whether ClickHouse dropped an insert as a duplicate of
// an earlier version of the batch (see sink.Intent.Earlier) and returns the
// last position of the version it holds; last (the entry's own) otherwise.
// dups lists the parts of the table it dropped the insert against, named by
// their first block: the oldest version whose insert began after that block
// cannot be it. Without earlier versions, any duplicate is of the batch as
// journaled (an earlier attempt of this very insert).
func heldEarlier(dups []string, earlier []sink.Prior, last sink.Position) (sink.Position, bool) {
	held := false
	for _, part := range dups {
		held = true
		_, lo, _, ok := repair.PartBlocks(part)
		for _, e := range earlier {
			if !ok || lo <= e.Block {
				return e.Last, true
			}
		}
	}
	return last, held
}

// cutShort ends the journaled batch p, whose replay stalled (see
// finishReplay), at the last buffered row: an entry over p.First..s.last
// with p's token supersedes p, so the rest of p's positions is free for the
// rows still to come. The entry is journaled before its insert, like every
// batch: killed in between, the next owner replays the entry, not p. It
// lists p among its earlier versions with the table's block counter read
// just before, because ClickHouse may hold p already under that token (the
// insert before the crash landed): the insert is then dropped against a
// part at or below the counter, p's rows are kept whole as MismatchKeepFirst
// says, and an ack says so (Journal.AckHeld), so the rest of p's rows are
// dropped as in it, in this process and after any crash.
func (s *Sink[T]) cutShort(ctx context.Context, p sink.Intent, h uint64, start time.Time) error {
	since, err := s.blockNumber(ctx)
	if err != nil {
		return err
	}
	in := sink.Intent{
		First: p.First, Last: s.last, Rows: s.n, Hash: h,
		Token: p.Token, Supersedes: p.Token,
		Created: s.opts.Now(), Block: since, Boot: s.runID(),
		Earlier: append(slices.Clone(p.Earlier), sink.Prior{Block: since, Last: p.Last}),
	}
	if err := s.journal.Record(ctx, &in); err != nil {
		return err
	}
	dups, err := s.insert(ctx, s.buf.sealed, in, true, repair.PrefixOf, s.beforeInsert)
	if err != nil {
		return err
	}
	if through, held := heldEarlier(dups, in.Earlier, in.Last); through.Compare(in.Last) > 0 {
		return s.ackReplayed(ctx, in, held, through)
	}
	s.journal.AckLater(&in)
	s.pending = s.pending[1:]
	s.written(in, time.Since(start))
	s.resetBuffer()
	return nil
}

// reinsert writes the buffered rows, replayed into pending[0]'s positions
// with a different content hash h, as a new journaled batch through last
// (p.Last, or the last buffered row when a stalled replay is cut short) that
// supersedes it, under a token derived from the old token and h. The
// deduplication window does not matter here: the token is new, unless this
// very content was reinserted before, and then the superseding entry is what
// the journal returns and what matched. The new batch is acknowledged like
// any other (see flush); until then a replay re-inserts it with its token.
// Like finishReplay, it inserts synchronously.
func (s *Sink[T]) reinsert(ctx context.Context, p sink.Intent, h uint64, last sink.Position, start time.Time) error {
	return s.supersede(ctx, p, sink.ReinsertToken(p.Token, h), last, h, true, start)
}

// supersede journals the buffered rows, content hash h, as the batch
// p.First..last under token, superseding p; inserts them first if insert
// (after the entry, so a crash replays it); and moves past p.
func (s *Sink[T]) supersede(ctx context.Context, p sink.Intent, token string, last sink.Position, h uint64, insert bool, start time.Time) error {
	in := sink.Intent{
		First: p.First, Last: last, Rows: s.n, Hash: h,
		Token: token, Supersedes: p.Token,
		Created: s.opts.Now(), Boot: s.runID(),
	}
	var err error
	if in.Block, err = s.blockLowerBound(ctx); err != nil {
		return err
	}
	if err := s.journal.Record(ctx, &in); err != nil {
		return err
	}
	if insert {
		if _, err := s.insert(ctx, s.buf.sealed, in, true, repair.AsJournaled, s.beforeInsert); err != nil {
			return err
		}
	}
	s.journal.AckLater(&in)
	s.pending = s.pending[1:]
	s.written(in, time.Since(start))
	s.resetBuffer()
	return nil
}

// ensureInit claims the journal and loads the batches to replay.
func (s *Sink[T]) ensureInit(ctx context.Context) error {
	if s.inited {
		return nil
	}
	if err := s.journal.Claim(ctx); err != nil {
		return err
	}
	pruned, ok, err := s.journal.Pruned(ctx)
	if err != nil {
		return err
	}
	var after *sink.Position
	switch {
	case s.hasCovered:
		after = &s.covered
		if ok && s.covered.Compare(pruned) < 0 {
			return fmt.Errorf("%w: restored at %s, journal pruned through %s", sink.ErrStaleCheckpoint, s.covered, pruned)
		}
	case ok && s.restored:
		return fmt.Errorf("%w: restored before any row, journal pruned through %s", sink.ErrStaleCheckpoint, pruned)
	case ok && !s.opts.AllowFreshStart:
		return fmt.Errorf("%w: %s: journal pruned through %s", sink.ErrPrunedJournal, s.src, pruned)
	}
	pending, err := s.journal.Load(ctx, after)
	if err != nil {
		return err
	}
	if e := s.expect; s.restored && e.Count > 0 {
		// Entries before the first one the snapshot expects were journaled
		// after it: every entry past the restore point that existed then is
		// one it expects. A replay's rows that come before its head batch
		// (a Tick-driven flush moves them between owners) are a batch of
		// their own (see journal.NextStep), journaled ahead of it.
		from := slices.IndexFunc(pending, func(in sink.Intent) bool { return in.First.Compare(e.First) >= 0 })
		expected := pending[max(from, 0):]
		// A batch cut short after the snapshot (see cutShort) ends before the
		// range the snapshot saw, and the rows after the cut may not have been
		// journaled yet: a superseding entry excuses an earlier end.
		short := func() bool {
			return expected[len(expected)-1].Last.Compare(e.Last) < 0 &&
				!slices.ContainsFunc(expected, func(in sink.Intent) bool { return in.Supersedes != "" })
		}
		if from < 0 || len(expected) < e.Count || expected[0].First != e.First || short() {
			return fmt.Errorf("%w: snapshot expects %d batches %s..%s, journal has %d from there", sink.ErrJournalMissing, e.Count, e.First, e.Last, len(expected))
		}
	}
	s.pending = pending
	s.inited = true
	return nil
}
