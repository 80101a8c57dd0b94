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

// barrierDue returns how long the flush timer waits for the next barrier
// instead of flushing at MaxDelay, when the sink is snapshotted
// asynchronously and barriers come steadily: the barrier then cuts the
// batch itself, while a timer flush just before it would be a second,
// small insert, and a barrier's batch queued behind it.
// It waits until half an interval past the expected barrier, never past
// twice MaxDelay after the batch's first row, so a stalled chain's rows
// still reach ClickHouse.
func (s *Sink[T]) barrierDue() (time.Duration, bool) {
	if !s.async || s.cadence <= 0 || s.barrierAt.IsZero() || s.cadence > 2*s.opts.MaxDelay {
		return 0, false
	}
	due := s.barrierAt.Add(s.cadence + s.cadence/2)
	if limit := s.bufSince.Add(2 * s.opts.MaxDelay); due.After(limit) {
		due = limit
	}
	return time.Until(due), true
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
