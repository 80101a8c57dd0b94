package window

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// noWatermark is the watermark before any input has one.
const noWatermark = math.MinInt64

// Operator assigns keyed events to event-time windows, aggregates them and
// emits a Row per window when the watermark passes the window's end.
//
// An Operator is owned by one goroutine (one partition chain) and is not
// safe for concurrent use. It starts no goroutines and needs no Close.
type Operator[In, Acc, Out any] struct {
	spec     Spec
	agg      Checkpointable[In, Acc, Out]
	bound    int64 // MaxOutOfOrderness, ns
	lateness int64 // AllowedLateness, ns
	idle     int64 // IdleTimeout, ns; < 0 disables
	now      func() time.Time
	log      *slog.Logger
	inst     instruments

	declared []int   // Options.Inputs
	inputs   []input // few (one per partition of the chain): searched linearly
	wm       int64   // operator watermark, ns; noWatermark until the first

	// Every window of one start has the same end, so windows are grouped by
	// start: a group fires and closes as a whole, in start order.
	groups map[int64]*group[Acc]
	starts []int64 // keys of groups, ascending
	last   *group[Acc]
	open   int // windows held

	// Session windows (spec.Gap > 0): each key's sessions, sorted by start
	// and apart; due holds, for every session, an entry at or before
	// the watermark at which it fires or closes (and stale entries, which
	// cost a look at their key), so firing visits only the keys due;
	// forget holds when a key without sessions can be dropped (its floor
	// refuses nothing any more), apart from due so that NextTick does not
	// wake the owner for it. floor0 is the floor of every key not held
	// (noWatermark but after restoring a version 2 snapshot). unfired
	// counts the sessions that have not fired.
	sessions map[string]keySessions[Acc]
	due      dueHeap
	forget   dueHeap
	floor0   int64
	unfired  int

	// Early firings: every > 0 emits a pane at every multiple of every
	// events; interval > 0 emits changed panes every interval of processing
	// time, next at nextEarly, when pending says a pane changed since.
	every     uint64
	interval  int64
	nextEarly int64
	pending   bool

	emitted, late uint64
	keys          []string // scratch for sorting
}

type input struct {
	id          int
	maxTs       int64 // newest event time, ns
	hasTs       bool
	lastArrival int64 // processing time of the last event, ns
	idle        bool
}

// group holds the windows [start, end) of every key.
type group[Acc any] struct {
	start, end int64
	fired      bool
	panes      map[string]*pane[Acc]
	slab       []pane[Acc] // panes are carved from here, freed with the group
}

// pane is the state of one window of one key.
type pane[Acc any] struct {
	n     uint64 // events folded in: the Version of the next row
	shown uint64 // n at the last emission; not in a snapshot
	acc   Acc
}

const slabSize = 256

func (g *group[Acc]) newPane() *pane[Acc] {
	if len(g.slab) == cap(g.slab) {
		g.slab = make([]pane[Acc], 0, min(slabSize, max(8, len(g.panes))))
	}
	g.slab = g.slab[:len(g.slab)+1]
	return &g.slab[len(g.slab)-1]
}

// New returns an operator for the windows of spec aggregated with agg. It
// validates spec and opts and returns an error wrapping ErrInvalidOptions
// when they are unusable.
func New[In, Acc, Out any](spec Spec, agg Checkpointable[In, Acc, Out], opts Options) (*Operator[In, Acc, Out], error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if agg == nil {
		return nil, fmt.Errorf("%w: agg is nil: pass an aggregator such as window.Count, window.Sum or window.Stats", ErrInvalidOptions)
	}
	if opts.AllowedLateness < 0 {
		return nil, fmt.Errorf("%w: Options.AllowedLateness is %v: want 0 (no lateness) or a positive duration up to %v", ErrInvalidOptions, opts.AllowedLateness, time.Duration(maxSize))
	}
	if opts.Early.Interval < 0 {
		return nil, fmt.Errorf("%w: Options.Early.Interval is %v: want 0 (no early firings by time) or a positive duration up to %v", ErrInvalidOptions, opts.Early.Interval, time.Duration(maxSize))
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"MaxOutOfOrderness", opts.MaxOutOfOrderness}, {"AllowedLateness", opts.AllowedLateness}, {"IdleTimeout", opts.IdleTimeout}, {"Early.Interval", opts.Early.Interval}} {
		if d.d > maxSize {
			return nil, fmt.Errorf("%w: Options.%s is %v: the largest accepted is %v", ErrInvalidOptions, d.name, d.d, time.Duration(maxSize))
		}
	}
	o := &Operator[In, Acc, Out]{
		spec:     spec,
		agg:      agg,
		bound:    int64(opts.MaxOutOfOrderness),
		lateness: int64(opts.AllowedLateness),
		idle:     int64(opts.IdleTimeout),
		now:      opts.Now,
		log:      opts.Logger,
		wm:       noWatermark,
		groups:   make(map[int64]*group[Acc]),
		sessions: make(map[string]keySessions[Acc]),
		floor0:   noWatermark,
		every:    opts.Early.Every,
		interval: int64(opts.Early.Interval),
	}
	switch {
	case o.bound == 0:
		o.bound = int64(DefaultMaxOutOfOrderness)
	case o.bound < 0:
		o.bound = 0
	}
	if o.idle == 0 {
		o.idle = int64(DefaultIdleTimeout)
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.log == nil {
		o.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	name := opts.Name
	if name == "" {
		name = "window"
	}
	var err error
	if o.inst, err = newInstruments(mp, name); err != nil {
		return nil, err
	}
	o.declared = slices.Clone(opts.Inputs)
	now := o.now().UnixNano()
	o.inputs = declaredInputs(o.declared, nil, now)
	o.nextEarly = satAdd(now, o.interval)
	return o, nil
}

// declaredInputs adds the declared inputs missing from ins, as having just
// spoken, and returns them sorted by id.
func declaredInputs(declared []int, ins []input, now int64) []input {
	for _, id := range declared {
		if !slices.ContainsFunc(ins, func(in input) bool { return in.id == id }) {
			ins = append(ins, input{id: id, lastArrival: now})
		}
	}
	slices.SortFunc(ins, func(a, b input) int { return cmp.Compare(a.id, b.id) })
	return ins
}

// Compile-time check that the operator is a checkpoint participant.
var _ checkpoint.Participant = (*Operator[float64, StatsAcc, Summary])(nil)

// Add feeds one event, in input (offset) order, and appends to out the rows
// and late events it causes: re-emissions of windows it updates within the
// allowed lateness, the late events it is too late for, and the windows its
// watermark advance closes.
//
// An event with a zero Time, or one outside about the years 1770 to 2170,
// returns an error wrapping ErrInvalidEvent and changes nothing.
func (o *Operator[In, Acc, Out]) Add(ev Event[In], out *Output[In, Out]) error {
	if y := ev.Time.Year(); ev.Time.IsZero() || y < 1700 || y > 2200 {
		return fmt.Errorf("%w: time %v out of range", ErrInvalidEvent, ev.Time)
	}
	t := ev.Time.UnixNano() // defined for these years
	if t < -maxEventTime || t > maxEventTime {
		return fmt.Errorf("%w: time %v out of range", ErrInvalidEvent, ev.Time)
	}
	now := o.now().UnixNano()
	i := slices.IndexFunc(o.inputs, func(in input) bool { return in.id == ev.Input })
	if i < 0 {
		o.inputs = append(o.inputs, input{id: ev.Input})
		slices.SortFunc(o.inputs, func(a, b input) int { return cmp.Compare(a.id, b.id) })
		i = slices.IndexFunc(o.inputs, func(in input) bool { return in.id == ev.Input })
	}
	in := &o.inputs[i]
	in.lastArrival = now
	if in.idle {
		in.idle = false
		o.log.Debug("window: input active again", "input", ev.Input)
	}
	if !in.hasTs || t > in.maxTs {
		in.maxTs, in.hasTs = t, true
	}

	if o.spec.Gap > 0 {
		o.addSession(ev, t, out)
		o.advance(now, out)
		o.early(now, out)
		return nil
	}
	size := int64(o.spec.Size)
	for s := o.spec.lastStart(t); s > t-size; s -= int64(o.spec.Slide) {
		end := s + size
		if o.wm != noWatermark && end+o.lateness <= o.wm {
			o.late++
			o.inst.late.Add(context.Background(), 1, o.inst.add...)
			out.Late = append(out.Late, LateEvent[In]{
				Event:     ev,
				Start:     time.Unix(0, s).UTC(),
				End:       time.Unix(0, end).UTC(),
				Watermark: time.Unix(0, o.wm).UTC(),
			})
			continue
		}
		g := o.group(s)
		p := g.panes[ev.Key]
		if p == nil {
			p = g.newPane()
			p.acc = o.agg.Identity()
			g.panes[ev.Key] = p
			o.open++
			o.inst.open.Add(context.Background(), 1, o.inst.add...)
		}
		p.acc = o.agg.Add(p.acc, ev.Value)
		p.n++
		switch {
		case g.fired:
			o.emit(g, ev.Key, p, false, out) // late but allowed: re-emit with a higher version
		case o.every > 0 && p.n%o.every == 0:
			o.emit(g, ev.Key, p, true, out)
		default:
			o.pending = true
		}
	}
	o.advance(now, out)
	o.early(now, out)
	return nil
}

// group returns the group of windows starting at s, creating it.
func (o *Operator[In, Acc, Out]) group(s int64) *group[Acc] {
	if o.last != nil && o.last.start == s {
		return o.last
	}
	g := o.groups[s]
	if g == nil {
		g = &group[Acc]{start: s, end: s + int64(o.spec.Size), panes: make(map[string]*pane[Acc])}
		// A group created behind the watermark (an allowed late event)
		// fires at once: the watermark will not pass its end again.
		g.fired = o.wm != noWatermark && g.end <= o.wm
		o.groups[s] = g
		i, _ := slices.BinarySearch(o.starts, s)
		o.starts = slices.Insert(o.starts, i, s)
	}
	o.last = g
	return g
}

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

// Watermark returns the operator's watermark: no event with an earlier time
// is expected any more. It is false before the first watermark.
func (o *Operator[In, Acc, Out]) Watermark() (time.Time, bool) {
	if o.wm == noWatermark {
		return time.Time{}, false
	}
	return time.Unix(0, o.wm).UTC(), true
}

// Spec returns the windows the operator computes.
func (o *Operator[In, Acc, Out]) Spec() Spec { return o.spec }
