package chsink

import (
	"context"
	"time"
)

// Run flushes a non-empty batch MaxDelay after its first row, so a quiet
// stream still reaches ClickHouse (later while two batches are still being
// inserted: it waits for one to end rather than hold the sink's lock). It returns nil after Close, ctx.Err()
// when ctx ends (the chain's generation ended: no insert starts after), or
// the error of a failed flush or of a batch that failed in the background
// (journaling or inserting it), which also breaks the sink. kafkasource runs
// it for every chain the sink is a participant of; a second Run while one
// is running returns nil at once, so code that also starts it itself gets
// one flush timer, not two.
func (s *Sink[T]) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return nil
	}
	defer s.running.Store(false)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil
		}
		if s.err == nil {
			_ = s.collect() // a batch that failed in the background is news here too
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return err
		}
		wait := time.Hour
		if s.replaying && s.opts.OnMismatch != MismatchFail && ctx.Err() == nil {
			// A replay that came up short: processing that is not
			// byte-for-byte deterministic produced fewer rows in the
			// journaled batch's positions, and on a quiet partition no row
			// past it comes to finish it. MaxDelay after the last row, the
			// replay is finished with what is buffered, as the policy says;
			// should it only have stalled, the rest of its rows still land
			// (see finishReplay).
			wait = s.opts.MaxDelay - time.Since(s.lastRow)
			if wait <= 0 {
				if err := s.finishReplay(ctx, true); err != nil {
					s.err = err
					s.mu.Unlock()
					return err
				}
				wait = time.Hour
			}
		} else if s.n > 0 && !s.replaying && ctx.Err() == nil {
			wait = s.opts.MaxDelay - time.Since(s.bufSince)
			if w, ok := s.barrierDue(); ok && w > wait {
				wait = w
			}
			ahead := false
			if at, ok := s.aheadAt(); ok {
				if w := time.Until(at); w < wait {
					wait, ahead = w, true
				}
			}
			if wait <= 0 && len(s.flights) >= maxFlights {
				// The flush would wait for the oldest insert with the lock
				// held, and hold up the chain's Add and barrier meanwhile:
				// wait for a batch to end instead (fly kicks Run).
				wait = time.Hour
			} else if wait <= 0 {
				if ahead {
					s.aheadDone = true
				}
				if !ahead || s.n >= s.opts.FlushAheadMinRows {
					if err := s.flush(ctx); err != nil {
						// Sticky even when ctx ended: the batch's intent may be
						// journaled, so it must never be re-cut differently.
						s.err = err
						s.mu.Unlock()
						return err
					}
					if n := len(s.flights); ahead && n > 0 {
						s.flights[n-1].ahead = true
						s.m.ahead.Add(context.Background(), 1, s.m.attrs)
					}
				}
				// Rows may have come in meanwhile (or stay, when the flush
				// ahead was passed up): compute their deadline afresh.
				s.mu.Unlock()
				continue
			}
		}
		s.mu.Unlock()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closeCh:
			return nil
		case <-s.kick:
		case <-t.C:
		}
	}
}

// Close stops Run and the batch in flight, and releases the connection.
// Buffered rows are not flushed and an insert still running is cancelled:
// neither is acknowledged, so the checkpoint that covers them cannot have
// completed, and a replay restores them (the cancelled batch with its
// journaled token, so ClickHouse keeps one copy if it landed). When the
// batch in flight had already failed and no call returned its error yet,
// Close returns it. No goroutine of the sink runs after Close returns. Close
// is safe to call more than once.
func (s *Sink[T]) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.closeCh)
	var err error
	ended := true
	for _, f := range s.flights {
		select {
		case <-f.done:
		default:
			ended = false
		}
	}
	if ended {
		err = s.wait() // ended before Close: a failure is news
	} else {
		s.abandon() // cancelled by Close: their errors say nothing
	}
	s.dropConn()
	return err
}
