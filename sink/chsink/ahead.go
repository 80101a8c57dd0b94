package chsink

// Flushing ahead of the barrier (see Options.NoFlushAhead): the sink
// learns the barriers' cadence from its Snapshot calls and starts the
// insert of a large buffer shortly before the next barrier is due.

import "time"

// aheadAt returns when to flush ahead of the next barrier, if the sink
// expects one and has not flushed ahead of it yet (see
// Options.NoFlushAhead). The flush must be acknowledged before the barrier
// comes, or the barrier waits for the rest of it, and barriers come early
// or late by the time the chain takes to reach them: it starts twice the
// time the last ones took (cadence/10 before any was measured) plus twice
// the intervals' mean deviation before the barrier is due, and never
// earlier than half an interval before it nor later than a twentieth.
func (s *Sink[T]) aheadAt() (time.Time, bool) {
	if s.opts.NoFlushAhead || s.async || s.cadence <= 0 || s.aheadDone || s.barrierAt.IsZero() {
		return time.Time{}, false
	}
	took := s.aheadTook
	if took == 0 {
		took = s.cadence / 20
	}
	lead := min(max(2*took+2*s.jitter, s.cadence/20), s.cadence/2)
	return s.barrierAt.Add(s.cadence - lead), true
}

// barrier notes that a barrier reached the sink now: it updates the
// expected cadence and its jitter (moving averages over the intervals, as
// TCP estimates a round trip, so one late barrier moves them by a quarter)
// and re-arms the flush ahead of the next one.
func (s *Sink[T]) barrier(now time.Time) {
	if !s.barrierAt.IsZero() {
		iv := now.Sub(s.barrierAt)
		if s.cadence == 0 {
			s.cadence, s.jitter = iv, 0
		} else {
			dev := iv - s.cadence
			s.jitter += (max(dev, -dev) - s.jitter) / 4
			s.cadence += dev / 4
		}
	}
	s.barrierAt, s.aheadDone = now, false
}
