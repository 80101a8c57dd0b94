package window

import (
	"context"
)

// restoreSessions reads the sessions of a version 2 or 3 snapshot, after
// its inputs, and loads the whole state when it is valid.
func (o *Operator[In, Acc, Out]) restoreSessions(d *decoder, version byte, wm int64, inputs []input, now int64) error {
	if version < 2 {
		d.fail("a version 1 snapshot holds no sessions")
	}
	gap := int64(o.spec.Gap)
	n := d.count(6)
	sessions := make(map[string]keySessions[Acc])
	prevKey, prevEnd := "", int64(0)
	unfired := 0
	for i := 0; i < n && d.err == nil; i++ {
		key, start, end := string(d.bytes()), d.varint(), d.varint()
		flags := d.byte()
		cnt := d.uvarint()
		accOff, raw := d.off, d.bytes()
		if d.err != nil {
			break
		}
		// Version 2 kept sessions that touch apart; version 3 merges them.
		apart := start < prevEnd || version >= 3 && start == prevEnd
		switch {
		case start > maxAbsTime || start < -maxAbsTime || end > maxAbsTime || end < start+gap:
			d.fail("session bounds out of range")
		case flags > 1:
			d.fail("bad session flags")
		case cnt == 0:
			d.fail("session without events")
		case i > 0 && (key < prevKey || key == prevKey && apart):
			d.fail("sessions not ascending and apart")
		}
		acc, err := o.agg.ParseState(raw)
		if err != nil && d.err == nil {
			d.err = &CorruptError{Offset: accOff, Reason: err.Error()}
		}
		if d.err != nil {
			break
		}
		s := &session[Acc]{
			start: start, end: end, n: cnt, acc: acc, emitted: flags == 1,
			fired: wm != noWatermark && end <= wm,
		}
		if !s.fired {
			unfired++
		}
		ks := sessions[key]
		ks.ss = append(ks.ss, s)
		sessions[key] = ks
		prevKey, prevEnd = key, end
	}
	floor0 := int64(noWatermark)
	if version >= 3 {
		floor0 = d.varint()
		nf := d.count(2)
		prevKey = ""
		for i := 0; i < nf && d.err == nil; i++ {
			key, floor := string(d.bytes()), d.varint()
			ks, ok := sessions[key]
			switch {
			case d.err != nil:
			case i > 0 && key <= prevKey:
				d.fail("floors not ascending")
			case floor != noWatermark && (floor > maxAbsTime || floor < -maxAbsTime):
				d.fail("floor out of range")
			case ok && floor >= ks.ss[0].start:
				d.fail("a session starts at or before its key's floor")
			}
			ks.floor = floor // a key without sessions is a tombstone
			sessions[key] = ks
			prevKey = key
		}
		if d.err == nil && len(sessions) != nf {
			d.fail("a key with sessions has no floor")
		}
		if d.err == nil && floor0 != noWatermark && (floor0 > maxAbsTime || floor0 < -maxAbsTime) {
			d.fail("floor out of range")
		}
	} else if wm != noWatermark {
		// Version 2 kept no floors: every session it forgot ended at or
		// before wm - lateness, and before its key's first session.
		floor0 = wm - o.lateness
		for k, ks := range sessions {
			ks.floor = min(floor0, ks.ss[0].start-1)
			sessions[k] = ks
		}
	} else {
		for k, ks := range sessions {
			ks.floor = noWatermark
			sessions[k] = ks
		}
	}
	if d.err == nil && d.off != len(d.b) {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return d.err
	}
	o.inst.open.Add(context.Background(), int64(n-o.open), o.inst.add...)
	o.inputs = declaredInputs(o.declared, inputs, now)
	o.wm, o.sessions, o.open, o.unfired, o.floor0 = wm, sessions, n, unfired, floor0
	o.assume = false // the sink says again what the table may hold (AssumeWritten)
	// What early firings emitted is not in the snapshot: the next one
	// emits every unfired session again (the same rows, if it was shown).
	o.pending, o.nextEarly = unfired > 0, satAdd(now, o.interval)
	// Rebuild due and forget, and drop sessions past their lateness
	// (possible when AllowedLateness shrank); they fired before the
	// snapshot.
	o.due, o.forget = o.due[:0], o.forget[:0]
	for k, ks := range sessions {
		for _, s := range ks.ss {
			o.due.push(dueEntry{at: s.nextDue(o.lateness), key: k})
		}
		if len(ks.ss) == 0 {
			o.forget.push(dueEntry{at: min(satAdd(ks.floor, o.lateness+gap), maxAbsTime), key: k})
		}
	}
	var discard Output[In, Out]
	o.fireSessions(&discard)
	return nil
}
