package chsink

// The background insert: a batch cut from the buffer is sealed, journaled
// and inserted by a goroutine of the sink while the next batch fills (see
// Sink.flush).

import (
	"context"
	"time"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/repair"
)

// maxFlights bounds the batches that a full buffer or the MaxDelay timer
// cuts while earlier ones are not settled: one being inserted and one
// queued behind it. A third such cut waits for the oldest batch
// (back-pressure: ClickHouse is slower than the input). A barrier's cut
// never waits: it may queue one more (see barrierFlights), so a barrier
// never waits for an insert, even when ClickHouse is behind. Each batch
// has a column set of its own beside the buffer being filled: four sets
// at most, the fourth only used while ClickHouse is behind at a barrier.
const maxFlights = 2

// barrierFlights bounds the batches unsettled after a barrier's cut. One
// checkpoint of a chain is pending at a time and its barrier's batch is
// the last it waits for, so at most one barrier batch is beyond maxFlights.
const barrierFlights = maxFlights + 1

// flight is a batch cut from the buffer, whose goroutine (see fly) seals
// it, journals its intent, waits for the batch before it and inserts it.
// Until done is closed that goroutine alone touches cols (its encoded bytes
// included) and, once the batch before it is done, Sink.conn; the sink's
// goroutines wait for done (Sink.wait) before they use them or the fields
// the goroutine writes.
type flight[T any] struct {
	// Set when the batch is cut, read-only afterwards.
	first, last sink.Position
	rows        int
	cols        *colSet[T]
	prev        *flight[T] // the batch cut before it, if not settled then
	probe       bool       // read the table's block counter for the intent (see blockLowerBound)
	start       time.Time
	cancel      context.CancelFunc
	recorded    chan struct{} // closed once the intent is journaled, or the flight gave up before
	done        chan struct{} // closed after prev's done: flights end in the order they were cut

	// Written by the goroutine: recErr before recorded is closed, the
	// rest before done is.
	recErr  error         // the intent could not be journaled (or prev's could not)
	in      sink.Intent   // as journaled
	size    int           // encoded bytes
	block   int64         // a block counter read for the intent, if blockAt is set
	blockAt time.Time     //
	err     error         // the batch's outcome: journaled and inserted, or why not
	took    time.Duration // from the cut to the insert's end

	ahead bool // flushed ahead of a barrier (see Sink.aheadAt); the chain's
}

// flush cuts the buffered rows as a new batch and hands it to a goroutine
// that seals, journals and inserts it (see fly); rows added afterwards go
// into the next batch. It waits only when maxFlights batches are unsettled
// already, for the oldest (barrierFlush: barrierFlights). Callers that
// need the rows in ClickHouse call wait after it.
//
// The intent is journaled before the batch's insert can start, which is all
// a replay needs: after a crash the journal holds every batch that may have
// reached ClickHouse, cut as it was. A batch cut but not journaled yet when
// the process dies was never inserted, and no checkpoint covers it (the
// barrier's part waits for its insert), so the replay cuts its rows anew.
// Intents are journaled in the order the batches were cut, and while the
// batch before is still being inserted: that intent cannot carry the
// previous batch's ack yet, so the ack rides a later intent, and after a
// crash up to maxFlights+1 batches (those in flight and the one before
// them) are re-inserted and deduplicated by their tokens.
func (s *Sink[T]) flush(ctx context.Context) error {
	return s.flushWithin(ctx, maxFlights)
}

// barrierFlush is flush at a barrier, which waits for no insert.
func (s *Sink[T]) barrierFlush(ctx context.Context) error {
	return s.flushWithin(ctx, barrierFlights)
}

func (s *Sink[T]) flushWithin(ctx context.Context, room int) error {
	if s.n == 0 || s.replaying {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for len(s.flights) >= room {
		if err := s.settleOldest(); err != nil {
			return err
		}
	}
	s.launch(ctx)
	return nil
}

// launch cuts the buffered rows as a batch, swaps in an empty column set
// for the next one and starts the batch's goroutine. The batch belongs to
// the sink, not to the call that cut it: its goroutine keeps ctx's values
// but not its cancellation (a caller may well cancel a per-call context as
// soon as Add returns), and it stops early only when Close or Restore
// abandons it.
func (s *Sink[T]) launch(ctx context.Context) {
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &flight[T]{
		first: s.first, last: s.last, rows: s.n, cols: s.buf, start: time.Now(),
		cancel: cancel, recorded: make(chan struct{}), done: make(chan struct{}),
	}
	in := sink.Intent{
		First: s.first, Last: s.last, Rows: s.n,
		Token:   s.journal.Token(s.first, s.last),
		Created: s.opts.Now(), Block: -1, Boot: s.runID(),
	}
	in.Block, f.probe = s.cachedBlock()
	if n := len(s.flights); n > 0 {
		f.prev = s.flights[n-1]
		if f.probe && f.prev.probe {
			f.probe = false // one reading per round of flights is enough
		}
	}
	if s.beforeRecord != nil {
		s.beforeRecord()
	}
	beforeJournal, beforeInsert := s.beforeJournal, s.beforeInsert
	s.flights = append(s.flights, f)
	s.buf, s.spare = s.spare[len(s.spare)-1], s.spare[:len(s.spare)-1]
	s.m.buffered.Add(context.Background(), -int64(s.n&^1023), s.m.attrs)
	s.n = 0
	go s.fly(ictx, f, in, beforeJournal, beforeInsert)
}

// fly is a batch's goroutine: seal, journal the intent once the batch
// before is journaled, insert once the batch before is inserted. A batch
// whose predecessor failed is neither journaled (if not yet) nor inserted
// and fails with the same error; the sink is then broken until Restore,
// which replays what the journal holds.
func (s *Sink[T]) fly(ctx context.Context, f *flight[T], in sink.Intent, beforeJournal, beforeInsert func()) {
	p := f.prev
	defer s.kickRun() // Run settles what ended (see Run)
	defer close(f.done)
	defer func() {
		if p != nil {
			<-p.done // done in order, even when this one gave up first
		}
	}()
	recorded := false
	defer func() {
		if !recorded {
			close(f.recorded)
		}
	}()
	giveUp := func(err error) {
		f.recErr, f.err = err, err
	}
	h, size, err := f.cols.seal()
	if err != nil {
		giveUp(err)
		return
	}
	in.Hash, f.size = h, size
	if p != nil {
		if f.probe {
			<-p.done // the probe needs the connection
		} else {
			<-p.recorded
		}
		if p.recErr != nil {
			giveUp(p.recErr)
			return
		}
	}
	if f.probe {
		if p == nil || p.err == nil {
			if b, err := s.blockNumber(ctx); err == nil {
				in.Block, f.block, f.blockAt = b, b, time.Now()
			}
		}
	}
	if beforeJournal != nil {
		beforeJournal()
	}
	if err := s.journal.Record(ctx, &in); err != nil {
		giveUp(err)
		return
	}
	f.in = in
	recorded = true
	close(f.recorded)
	if p != nil {
		<-p.done
		if p.err != nil {
			f.err = p.err
			return
		}
	}
	_, f.err = s.insert(ctx, f.cols.sealed, in, false, repair.AsJournaled, beforeInsert)
	f.took = time.Since(f.start)
}

// cachedBlock returns the block counter for a new intent from the last
// reading, and whether the batch's goroutine should read it afresh first
// (see blockLowerBound).
func (s *Sink[T]) cachedBlock() (int64, bool) {
	if s.blockAt.IsZero() {
		return -1, true
	}
	return s.block, time.Since(s.blockAt) >= blockProbeInterval
}

// wait waits for every batch in flight and settles them, oldest first (see
// settleOldest). Afterwards the caller owns the connection again.
func (s *Sink[T]) wait() error {
	for len(s.flights) > 0 {
		if err := s.settleOldest(); err != nil {
			return err
		}
	}
	return nil
}

// collect settles the batches that ended already, without waiting, so a
// failure stops the producer early.
func (s *Sink[T]) collect() error {
	for len(s.flights) > 0 {
		select {
		case <-s.flights[0].done:
		default:
			return nil
		}
		if err := s.settleOldest(); err != nil {
			return err
		}
	}
	return nil
}

// settleOldest waits for the oldest batch in flight and settles it: on
// success its rows count as covered and its ack is noted for the next
// intent; a failure breaks the sink, abandons the later batches (which
// insert nothing after it) and is returned.
func (s *Sink[T]) settleOldest() error {
	f := s.flights[0]
	<-f.done
	f.cancel()
	s.flights = append(s.flights[:0], s.flights[1:]...)
	f.cols.reset()
	s.spare = append(s.spare, f.cols)
	if !f.blockAt.IsZero() && f.blockAt.After(s.blockAt) {
		s.block, s.blockAt = f.block, f.blockAt
	}
	if f.err != nil {
		s.err = f.err
		s.abandon()
		return f.err
	}
	if f.rows > 0 {
		s.bytesPerRow = max(1, f.size/f.rows)
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

// abandon cancels the batches in flight, if any, and waits for their
// goroutines to end. Their outcome is unknown and does not matter: a batch
// journaled is replayed with its token, one not journaled was not
// inserted.
func (s *Sink[T]) abandon() {
	for _, f := range s.flights {
		f.cancel()
	}
	for _, f := range s.flights {
		<-f.done
		f.cols.reset()
		s.spare = append(s.spare, f.cols)
	}
	s.flights = s.flights[:0]
}

// written notes that in is in ClickHouse, took after it was cut.
func (s *Sink[T]) written(in sink.Intent, took time.Duration) {
	s.covered, s.hasCovered = in.Last, true
	s.m.rows.Add(context.Background(), int64(in.Rows), s.m.attrs)
	s.m.batches.Add(context.Background(), 1, s.m.attrs)
	s.m.latency.Record(context.Background(), took.Seconds(), s.m.attrs)
	if s.afterWrite != nil {
		s.afterWrite(in.Rows)
	}
}
