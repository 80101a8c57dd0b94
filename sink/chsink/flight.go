package chsink

// The background insert: a sealed batch is journaled, then inserted by a
// goroutine of the sink while the next batch fills (see Sink.flush).

import (
	"context"
	"time"

	"github.com/exactlyonce/exactlyonce/sink"
)

// flight is a sealed batch whose intent is journaled and whose insert runs
// in a goroutine started by launch. Until done is closed that goroutine
// alone touches cols (its encoded bytes included), Sink.conn, err and took;
// the sink's goroutines wait for done (Sink.wait) before they use any of
// them.
type flight[T any] struct {
	in     sink.Intent
	cols   *colSet[T]
	cancel context.CancelFunc
	done   chan struct{}
	err    error         // the insert's outcome
	took   time.Duration // from sealing to the insert's end
	ahead  bool          // flushed ahead of a barrier (see Sink.aheadAt)
}

// flush seals the buffered rows as a new batch: it journals the batch's
// intent, waits for the batch in flight, and starts the new batch's insert
// in the background (see launch). Callers that need the rows in ClickHouse
// call wait after it.
//
// The intent is written before this batch's insert can start, which is all
// a replay needs: after a crash the journal holds every batch that may have
// reached ClickHouse, cut as it was. Writing it while the previous batch is
// still being inserted is what keeps the journal's fsync off the critical
// path; that intent cannot carry the previous batch's ack yet, so the ack
// rides one intent later, and after a crash up to two batches (the one in
// flight and the one before it) are re-inserted and deduplicated by their
// tokens.
func (s *Sink[T]) flush(ctx context.Context) error {
	if s.n == 0 || s.replaying {
		return nil
	}
	start := time.Now()
	h, size, err := s.buf.seal()
	if err != nil {
		return err
	}
	if s.n > 0 {
		s.bytesPerRow = max(1, size/s.n)
	}
	in := sink.Intent{
		First: s.first, Last: s.last, Rows: s.n, Hash: h,
		Token:   s.journal.Token(s.first, s.last),
		Created: s.opts.Now(), Block: -1, Boot: s.runID(),
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if in.Block, err = s.blockLowerBound(ctx); err != nil {
		return err
	}
	if s.beforeRecord != nil {
		s.beforeRecord()
	}
	if err := s.journal.Record(ctx, &in); err != nil {
		return err
	}
	if err := s.wait(); err != nil {
		return err
	}
	s.launch(ctx, in, start)
	return nil
}

// launch hands the buffered rows, sealed as in, to a goroutine that
// inserts them, and swaps in the empty column set for the next batch. The
// insert belongs to the sink, not to the call that sealed the batch: it
// keeps ctx's values but not its cancellation (a caller may well cancel a
// per-call context as soon as Add returns), and it stops early only when
// Close or Restore abandons it. Only one batch is in flight: every caller
// waited for the previous one.
func (s *Sink[T]) launch(ctx context.Context, in sink.Intent, start time.Time) {
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &flight[T]{in: in, cols: s.buf, cancel: cancel, done: make(chan struct{})}
	hook := s.beforeInsert
	s.flight = f
	s.buf, s.spare = s.spare, s.buf
	s.m.buffered.Add(context.Background(), -int64(s.n&^1023), s.m.attrs)
	s.n = 0
	go func() {
		defer close(f.done)
		_, f.err = s.insert(ictx, f.cols.sealed, in, false, asJournaled, hook)
		f.took = time.Since(start)
	}()
}

// wait waits for the batch in flight, if any, and settles it: on success
// its rows count as covered and its ack is noted for the next intent; a
// failure breaks the sink and is returned. Afterwards the caller owns the
// connection again.
func (s *Sink[T]) wait() error {
	f := s.flight
	if f == nil {
		return nil
	}
	<-f.done
	f.cancel()
	s.flight = nil
	f.cols.reset()
	if f.err != nil {
		s.err = f.err
		return f.err
	}
	s.journal.AckLater(&f.in)
	s.written(f.in, f.took)
	if f.ahead {
		if s.aheadTook == 0 {
			s.aheadTook = f.took
		} else {
			s.aheadTook = (s.aheadTook + f.took) / 2
		}
	}
	return nil
}

// abandon cancels the batch in flight, if any, and waits for its goroutine
// to end. Its outcome is unknown and does not matter: its intent is in the
// journal, so a replay re-inserts it with its token.
func (s *Sink[T]) abandon() {
	if f := s.flight; f != nil {
		f.cancel()
		<-f.done
		s.flight = nil
		f.cols.reset()
	}
}

// written notes that in is in ClickHouse, took after it was sealed.
func (s *Sink[T]) written(in sink.Intent, took time.Duration) {
	s.covered, s.hasCovered = in.Last, true
	s.m.rows.Add(context.Background(), int64(in.Rows), s.m.attrs)
	s.m.batches.Add(context.Background(), 1, s.m.attrs)
	s.m.latency.Record(context.Background(), took.Seconds(), s.m.attrs)
	if s.afterWrite != nil {
		s.afterWrite(in.Rows)
	}
}
