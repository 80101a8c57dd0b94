// Session windows: per key, events less than the gap apart form one
// session; a late event that bridges two sessions merges them.

package window

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Session returns session windows with the given gap: per key, events at
// most gap apart belong to one session [first event, last event + gap),
// which fires when the watermark reaches its End (gap of inactivity
// passed). Two events exactly gap apart are in one session, as Flink
// merges windows that touch. See the package documentation for merges and
// their rows.
func Session(gap time.Duration) Spec { return Spec{Gap: gap} }

// keySessions holds the sessions of one key.
type keySessions[Acc any] struct {
	// ss is sorted by start; its sessions neither overlap nor touch (each
	// ends before the next starts).
	ss []*session[Acc]
	// floor is at or after the end of every session of the key that closed
	// and was forgotten: a session may not start at or before it, or it
	// would overlap (or touch) a session whose row can no longer be
	// retracted. A key without sessions stays (a tombstone) while its floor
	// can still refuse an event: until the watermark passes floor +
	// lateness + gap, after which the check that the merged session is not
	// late refuses every event the floor would.
	floor int64
}

// session is one session of one key.
type session[Acc any] struct {
	start, end int64 // end = last event + gap
	n          uint64
	shown      uint64 // n at the last emission; not in a snapshot
	fired      bool   // watermark reached end; derived from it on Restore
	// emitted says the table may hold a row for (key, start): one was
	// emitted, or AssumeWritten said so. A merge that moves the start
	// retracts it. In the snapshot.
	emitted bool
	acc     Acc
}

// newKeyFloor returns the floor of a key the operator holds nothing of:
// its forgotten sessions, if any, end at or before the floor its
// tombstone had when dropped, which is at most wm - lateness - gap (or at
// floor0 after restoring a version 2 snapshot, which kept no floors).
func (o *Operator[In, Acc, Out]) newKeyFloor() int64 {
	if o.wm == noWatermark {
		return noWatermark
	}
	return max(o.floor0, o.wm-o.lateness-int64(o.spec.Gap))
}

// addSession places an event at t in the sessions of its key, merging the
// sessions it overlaps, touches or bridges.
func (o *Operator[In, Acc, Out]) addSession(ev Event[In], t int64, out *Output[In, Out]) {
	gap := int64(o.spec.Gap)
	ks, ok := o.sessions[ev.Key]
	if !ok {
		ks.floor = o.newKeyFloor()
	}
	ss := ks.ss
	// Sessions are sorted and apart: those that [t, t+gap] overlaps or
	// touches are contiguous, from i to j (exclusive).
	i := firstWhere(ss, func(s *session[Acc]) bool { return s.end >= t })
	j := i
	for j < len(ss) && ss[j].start <= t+gap {
		j++
	}
	// Lateness is judged on the merged session, as Flink does: an event
	// behind the watermark that joins an open session is kept. It is late
	// when the merged session would have closed already, or when it would
	// start at or before the floor (reach a session closed and forgotten,
	// whose row could then not be retracted: Flink keeps such an event and
	// emits a session overlapping the old one).
	start, end := t, t+gap
	if j > i {
		start, end = min(t, ss[i].start), max(end, ss[j-1].end)
	}
	if o.wm != noWatermark && (end+o.lateness <= o.wm || start <= ks.floor) {
		o.late++
		o.inst.late.Add(context.Background(), 1, o.inst.add...)
		out.Late = append(out.Late, LateEvent[In]{
			Event:     ev,
			Start:     time.Unix(0, t).UTC(),
			End:       time.Unix(0, t+gap).UTC(),
			Watermark: time.Unix(0, o.wm).UTC(),
		})
		return
	}
	// The merged session: the event's own [t, t+gap) and the sessions it
	// reaches, folded into the first of them when there is one (in place:
	// the common case, an event extending a session, allocates nothing).
	var m *session[Acc]
	var most uint64 // the most events of a session merged, before the event
	if j > i {
		m = ss[i]
		most = m.n
	} else {
		m = &session[Acc]{start: t, end: t + gap, acc: o.agg.Identity()}
	}
	first := *m // before the merge; its acc may be reused by Merge and Add
	unfired := 0
	for _, s := range ss[i:j] {
		if !s.fired {
			unfired++
		}
	}
	for _, s := range ss[min(i+1, j):j] {
		m.acc = o.agg.Merge(m.acc, s.acc)
		m.n += s.n
		most = max(most, s.n)
	}
	m.start, m.end = start, end
	m.acc = o.agg.Add(m.acc, ev.Value)
	m.n++
	// Retract the rows of merged sessions whose start moved: their (Key,
	// Start) is never a session start again (the merged session holds an
	// event there and starts before it), and the deletion's version beats
	// every row written for it. The merged session is then shown at once,
	// as are sessions that had fired and are open again, so that the table
	// never holds the parts of a session beside the whole.
	show := false
	if j > i && first.emitted && first.start != m.start {
		o.emitSession(ev.Key, &first, m.n, rowDeleted, out)
		show = true // the merged session is emitted below, under its new start
	}
	for _, s := range ss[min(i+1, j):j] {
		if s.emitted {
			o.emitSession(ev.Key, s, m.n, rowDeleted, out)
			show = true
		}
	}
	// A session that keeps its bounds keeps its entry in due.
	needDue := j == i || first.start != m.start || first.end != m.end
	if j == i {
		ss = slices.Insert(ss, i, m)
		o.open++
		o.inst.open.Add(context.Background(), 1, o.inst.add...)
	} else if j > i+1 {
		clear(ss[i+1 : j])
		ss = slices.Delete(ss, i+1, j)
		o.open -= j - i - 1
		o.inst.open.Add(context.Background(), -int64(j-i-1), o.inst.add...)
	}
	ks.ss = ss
	o.sessions[ev.Key] = ks
	fired := m.fired
	m.fired = o.wm != noWatermark && m.end <= o.wm
	o.unfired -= unfired
	if !m.fired {
		o.unfired++
	}
	switch {
	case m.fired:
		o.emitSession(ev.Key, m, m.n, rowFinal, out) // late but allowed: re-emit
	case show || fired:
		o.emitSession(ev.Key, m, m.n, rowEarly, out)
	case o.every > 0 && m.n/o.every > most/o.every:
		// The count reached a multiple of Every, by this event or by a
		// merge that jumped past one (3 + 3 + 1 under Every 4).
		o.emitSession(ev.Key, m, m.n, rowEarly, out)
	default:
		o.pending = true
	}
	if needDue {
		o.due.push(dueEntry{at: m.nextDue(o.lateness), key: ev.Key})
	}
	if o.assume {
		m.emitted = true // a dead run may have shown it as it is now
	}
}

// AssumeWritten says whether the table may hold rows of sessions that the
// operator did not emit. On, every session the operator holds, and every
// session it creates or changes until it is turned off, counts as having
// a row under its (Key, Start): a merge that moves that start retracts the
// row with a deletion and emits the merged session at once, as for a
// session it emitted. Off, the default, only the sessions it emitted,
// marked while it was on, or restored as written count.
//
// A sink turns it on after a restore, while the input replays the
// positions at which a run that died before its next checkpoint may have
// written rows that the replay does not emit again: rows that depend on
// the clock (early rows by Early.Interval, sessions closed by idleness),
// which the dead run may have emitted for any session it held. Package
// sink/chsink/windowsink does, from the sink's journal. The marks stay
// after it is turned off, and are in snapshots; the setting itself is not,
// and Restore turns it off.
// Window operators (Tumbling, Hopping) ignore it: their rows are never
// retracted.
func (o *Operator[In, Acc, Out]) AssumeWritten(on bool) {
	if on && !o.assume {
		for _, ks := range o.sessions {
			for _, s := range ks.ss {
				s.emitted = true
			}
		}
	}
	o.assume = on
}

// nextDue returns the watermark at which s fires, or closes if it fired.
func (s *session[Acc]) nextDue(lateness int64) int64 {
	if s.fired {
		return s.end + lateness
	}
	return s.end
}

type rowKind int

const (
	rowFinal rowKind = iota
	rowEarly
	rowDeleted
)

func (o *Operator[In, Acc, Out]) emitSession(key string, s *session[Acc], version uint64, kind rowKind, out *Output[In, Out]) {
	r := Row[Out]{
		Key:     key,
		Start:   time.Unix(0, s.start).UTC(),
		End:     time.Unix(0, s.end).UTC(),
		Version: version,
		Early:   kind == rowEarly,
		Deleted: kind == rowDeleted,
	}
	if kind != rowDeleted {
		r.Result, r.Valid = o.agg.Result(s.acc)
		s.shown, s.emitted = s.n, true
	}
	out.Rows = append(out.Rows, r)
	o.emitted++
	o.inst.emissions.Add(context.Background(), 1, o.inst.add...)
}

// fireSessions emits the sessions whose end the watermark reached, by key
// then start, and forgets those past their allowed lateness.
func (o *Operator[In, Acc, Out]) fireSessions(out *Output[In, Out]) {
	keys := o.keys[:0]
	for len(o.due) > 0 && o.due[0].at <= o.wm {
		keys = append(keys, o.due.pop().key)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	gap := int64(o.spec.Gap)
	for ki, k := range keys {
		keys[ki] = ""
		ks, ok := o.sessions[k]
		if !ok {
			continue // a stale entry
		}
		ss := ks.ss
		n := 0 // kept
		for _, s := range ss {
			if !s.fired && s.end <= o.wm {
				s.fired = true
				o.unfired--
				o.emitSession(k, s, s.n, rowFinal, out)
				if s.end+o.lateness > o.wm {
					o.due.push(dueEntry{at: s.end + o.lateness, key: k})
				}
			}
			if s.end+o.lateness <= o.wm {
				ks.floor = max(ks.floor, s.end)
				continue
			}
			ss[n] = s
			n++
		}
		o.open -= len(ss) - n
		o.inst.open.Add(context.Background(), -int64(len(ss)-n), o.inst.add...)
		clear(ss[n:])
		ks.ss = ss[:n]
		if n == 0 {
			ks.ss = nil
			o.forget.push(dueEntry{at: min(satAdd(ks.floor, o.lateness+gap), maxAbsTime), key: k})
		}
		o.sessions[k] = ks
	}
	o.keys = keys[:0]
	// Drop the tombstones whose floor refuses nothing any more.
	for len(o.forget) > 0 && o.forget[0].at <= o.wm {
		k := o.forget.pop().key
		if ks, ok := o.sessions[k]; ok && len(ks.ss) == 0 && (satAdd(ks.floor, o.lateness+gap) <= o.wm || o.wm >= maxAbsTime) {
			delete(o.sessions, k)
		}
	}
	if o.floor0 != noWatermark && (satAdd(o.floor0, o.lateness+gap) <= o.wm || o.wm >= maxAbsTime) {
		o.floor0 = noWatermark
	}
	if o.unfired == 0 {
		o.pending = false // every session fired: nothing to emit early
	}
}

// earlySessions emits the partial result of every unfired session that
// changed since its last emission, by key then start.
func (o *Operator[In, Acc, Out]) earlySessions(out *Output[In, Out]) {
	keys := o.keys[:0]
	for k := range o.sessions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		for _, s := range o.sessions[k].ss {
			if !s.fired && s.n != s.shown {
				o.emitSession(k, s, s.n, rowEarly, out)
			}
		}
		keys[i] = ""
	}
	o.keys = keys[:0]
}

func (s Spec) validateSession() error {
	switch {
	case s.Size != 0 || s.Slide != 0 || s.Offset != 0:
		return fmt.Errorf("%w: Spec has a Gap and a Size, Slide or Offset: a session spec is window.Session(gap) alone", ErrInvalidOptions)
	case s.Gap > maxSize:
		return fmt.Errorf("%w: Spec.Gap is %v: the largest session gap accepted is %v", ErrInvalidOptions, s.Gap, time.Duration(maxSize))
	}
	return nil
}
