// Early firings, end of input and the removal of an input: the ways a window
// fires other than by the watermark passing its end plus lateness.

package window

import "slices"

// early emits, when the early-firing interval is due at processing time
// now, the partial result of every unfired window that changed since its
// last emission, by start then key.
func (o *Operator[In, Acc, Out]) early(now int64, out *Output[In, Out]) {
	if o.interval == 0 || now < o.nextEarly {
		return
	}
	o.nextEarly = satAdd(now, o.interval)
	if !o.pending {
		return
	}
	o.pending = false
	if o.spec.Gap > 0 {
		o.earlySessions(out)
		return
	}
	for _, s := range o.starts {
		g := o.groups[s]
		if g.fired {
			continue
		}
		keys := o.keys[:0]
		for k, p := range g.panes {
			if p.n != p.shown {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for j, k := range keys {
			o.emit(g, k, g.panes[k], true, out)
			keys[j] = ""
		}
		o.keys = keys[:0]
	}
}

// EndInput declares that no event will follow on any input, as Flink's
// final watermark does at the end of a bounded input: the watermark moves
// past every window, every open window fires (appending its rows to out)
// and closes. Use it at the end of a backfill or replay of a bounded
// range, and in tests. Every event added afterwards is late. The final
// watermark is in the operator's snapshots, so a restored operator keeps
// it.
func (o *Operator[In, Acc, Out]) EndInput(out *Output[In, Out]) {
	o.wm = maxAbsTime // past every window's end plus lateness: see maxEventTime
	o.fire(out)
}

// RemoveInput forgets an input: it no longer holds the watermark back, and
// the watermark advances to what the remaining inputs allow, appending the
// rows of the windows that closes to out. Call it when an input leaves for
// good, for example a partition revoked from an operator that spans
// partitions (see the package documentation for when that is). Events the
// input already delivered stay in their windows; an event it delivers
// later makes it an input again. Removing the last input leaves the
// watermark where it is. Like Add, it is part of the operator's input: a
// replay must call it at the same point to emit the same rows.
func (o *Operator[In, Acc, Out]) RemoveInput(id int, out *Output[In, Out]) {
	o.inputs = slices.DeleteFunc(o.inputs, func(in input) bool { return in.id == id })
	o.declared = slices.DeleteFunc(o.declared, func(d int) bool { return d == id })
	now := o.now().UnixNano()
	o.advance(now, out)
	o.early(now, out)
}
