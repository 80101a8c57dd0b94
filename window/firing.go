package window

import (
	"context"
	"math"
	"slices"
	"time"
)

// Tick re-evaluates idleness against the clock and appends the rows of the
// windows that closes. Call it when no events arrive, at the latest at
// NextTick: the operator has no timer of its own.
func (o *Operator[In, Acc, Out]) Tick(out *Output[In, Out]) {
	now := o.now().UnixNano()
	o.advance(now, out)
	o.early(now, out)
	if o.wm != noWatermark {
		o.inst.lag.Record(context.Background(), time.Duration(now-o.wm).Seconds(), o.inst.record...)
	}
}

// NextTick returns the processing time at which Tick would next change
// something without new events (an input turning idle, or, when all inputs
// are idle, the next window closing, or the next early firing of windows
// that changed), and false when nothing is pending.
func (o *Operator[In, Acc, Out]) NextTick() (time.Time, bool) {
	next := int64(math.MaxInt64)
	if o.interval > 0 && o.pending {
		next = o.nextEarly
	}
	if o.idle < 0 || len(o.inputs) == 0 {
		if next == math.MaxInt64 {
			return time.Time{}, false
		}
		return time.Unix(0, next).UTC(), true
	}
	allIdle := true
	for _, in := range o.inputs {
		if !in.idle {
			allIdle = false
			next = min(next, in.lastArrival+o.idle)
		}
	}
	if allIdle && o.wm != noWatermark {
		// The idle watermark follows the clock: the next group is due after
		// the gap between its end (or its end plus the lateness) and that
		// watermark, which may still be behind o.wm (an input spoke behind
		// it and fell silent again).
		now := o.now().UnixNano()
		if due, ok := o.nextDue(); ok {
			if wm, ok := o.idleWatermark(now); ok {
				next = min(next, satAdd(now, max(satAdd(due, -wm), 0)))
			}
		}
	}
	if next == math.MaxInt64 {
		return time.Time{}, false
	}
	return time.Unix(0, next).UTC(), true
}

// advance recomputes the watermark at processing time now and fires what
// it passes.
func (o *Operator[In, Acc, Out]) advance(now int64, out *Output[In, Out]) {
	wm := o.candidate(now)
	if wm > o.wm {
		o.wm = wm
		o.fire(out)
		o.inst.lag.Record(context.Background(), time.Duration(now-o.wm).Seconds(), o.inst.record...)
	}
}

// candidate returns the watermark the inputs allow at processing time now:
// the minimum over active inputs of (max event time - bound); when every
// input is idle, the newest event time over all inputs advanced by the time
// spent idle beyond IdleTimeout.
func (o *Operator[In, Acc, Out]) candidate(now int64) int64 {
	wm, active := int64(math.MaxInt64), false
	for i := range o.inputs {
		in := &o.inputs[i]
		if o.idle >= 0 && now-in.lastArrival >= o.idle {
			if !in.idle {
				in.idle = true
				o.log.Debug("window: input idle", "input", in.id)
			}
		} else {
			active = true
			if !in.hasTs {
				wm = noWatermark
			} else {
				wm = min(wm, in.maxTs-o.bound)
			}
		}
	}
	if active {
		return wm
	}
	if wm, ok := o.idleWatermark(now); ok {
		return wm
	}
	return noWatermark
}

// idleWatermark returns the watermark that all inputs being idle allows at
// processing time now: the newest event time over all inputs, advanced by
// the time spent idle beyond IdleTimeout, and at most maxAbsTime (a time a
// snapshot can hold, past every window end and lateness). It is false
// before any event.
func (o *Operator[In, Acc, Out]) idleWatermark(now int64) (int64, bool) {
	latestArrival, newest, any := int64(math.MinInt64), int64(math.MinInt64), false
	for _, in := range o.inputs {
		latestArrival = max(latestArrival, in.lastArrival)
		if in.hasTs {
			newest, any = max(newest, in.maxTs), true
		}
	}
	if !any {
		return 0, false
	}
	return min(satAdd(newest, max(now-latestArrival-o.idle, 0)), maxAbsTime), true
}

// satAdd returns a+b, saturated at the int64 bounds.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}

// nextDue returns the earliest watermark at which a group fires or closes:
// the earlier of the first unfired group's end and the first fired group's
// end plus the lateness. (Fired groups come first, since groups fire in
// start order; with a lateness longer than the slide, later groups fire
// before the first one closes.)
func (o *Operator[In, Acc, Out]) nextDue() (int64, bool) {
	if o.spec.Gap > 0 {
		if len(o.due) == 0 {
			return 0, false
		}
		return o.due[0].at, true
	}
	due, ok := int64(math.MaxInt64), false
	for i, s := range o.starts {
		g := o.groups[s]
		if !g.fired {
			return min(due, g.end), true
		}
		if i == 0 {
			due, ok = g.end+o.lateness, true
		}
	}
	return due, ok
}

// fire emits the windows whose end the watermark passed, ordered by start
// then key, and drops those past their allowed lateness.
func (o *Operator[In, Acc, Out]) fire(out *Output[In, Out]) {
	if o.spec.Gap > 0 {
		o.fireSessions(out)
		return
	}
	n := 0 // leading groups dropped
	for i, s := range o.starts {
		g := o.groups[s]
		if g.end > o.wm {
			break
		}
		if !g.fired {
			g.fired = true
			keys := o.keys[:0]
			for k := range g.panes {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for j, k := range keys {
				o.emit(g, k, g.panes[k], false, out)
				keys[j] = ""
			}
			o.keys = keys[:0]
		}
		if g.end+o.lateness <= o.wm && i == n {
			n++
			delete(o.groups, s)
			o.open -= len(g.panes)
			o.inst.open.Add(context.Background(), -int64(len(g.panes)), o.inst.add...)
			if o.last == g {
				o.last = nil
			}
		}
	}
	if n > 0 {
		o.starts = slices.Delete(o.starts, 0, n)
	}
	if len(o.starts) == 0 || o.groups[o.starts[len(o.starts)-1]].fired {
		o.pending = false // every window fired: nothing to emit early
	}
}

func (o *Operator[In, Acc, Out]) emit(g *group[Acc], key string, p *pane[Acc], early bool, out *Output[In, Out]) {
	res, ok := o.agg.Result(p.acc)
	p.shown = p.n
	out.Rows = append(out.Rows, Row[Out]{
		Key:     key,
		Start:   time.Unix(0, g.start).UTC(),
		End:     time.Unix(0, g.end).UTC(),
		Version: p.n,
		Valid:   ok,
		Result:  res,
		Early:   early,
	})
	o.emitted++
	o.inst.emissions.Add(context.Background(), 1, o.inst.add...)
}
