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
	assume   bool // AssumeWritten: every session held may have a row

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
