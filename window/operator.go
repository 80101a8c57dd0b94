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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
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

	declared []int // Options.Inputs
	inputs   map[int]*input
	wm       int64 // operator watermark, ns; noWatermark until the first

	panes  map[paneKey]*pane[Acc]
	timers map[int64][]*pane[Acc] // panes due at a time: fire at End, drop at End+lateness
	times  []int64                // the keys of timers, ascending

	emitted, late uint64
	scratch       []*pane[Acc]
}

type input struct {
	maxTs       int64 // newest event time, ns
	hasTs       bool
	lastArrival int64 // processing time of the last event, ns
	idle        bool
}

type paneKey struct {
	key   string
	start int64
}

// pane is the state of one window of one key.
type pane[Acc any] struct {
	key        string
	start, end int64
	n          uint64 // events folded in: the Version of the next row
	acc        Acc
}

// New returns an operator for the windows of spec aggregated with agg. It
// validates spec and opts and returns an error wrapping ErrInvalidOptions
// when they are unusable.
func New[In, Acc, Out any](spec Spec, agg Checkpointable[In, Acc, Out], opts Options) (*Operator[In, Acc, Out], error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if agg == nil {
		return nil, fmt.Errorf("%w: nil aggregator", ErrInvalidOptions)
	}
	if opts.AllowedLateness < 0 {
		return nil, fmt.Errorf("%w: negative allowed lateness %v", ErrInvalidOptions, opts.AllowedLateness)
	}
	o := &Operator[In, Acc, Out]{
		spec:     spec,
		agg:      agg,
		bound:    int64(opts.MaxOutOfOrderness),
		lateness: int64(opts.AllowedLateness),
		idle:     int64(opts.IdleTimeout),
		now:      opts.Now,
		log:      opts.Logger,
		inputs:   make(map[int]*input),
		wm:       noWatermark,
		panes:    make(map[paneKey]*pane[Acc]),
		timers:   make(map[int64][]*pane[Acc]),
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
	now := o.now().UnixNano()
	o.declared = slices.Clone(opts.Inputs)
	for _, id := range o.declared {
		o.inputs[id] = &input{lastArrival: now}
	}
	return o, nil
}

// Compile-time check that the operator is a checkpoint participant.
var _ checkpoint.Participant = (*Operator[float64, StatsAcc, Summary])(nil)

// Add feeds one event, in input (offset) order, and appends to out the rows
// and late events it causes: re-emissions of windows it updates within the
// allowed lateness, the late events it is too late for, and the windows its
// watermark advance closes.
//
// An event with a zero or out-of-range Time returns an error wrapping
// ErrInvalidEvent and changes nothing.
func (o *Operator[In, Acc, Out]) Add(ev Event[In], out *Output[In, Out]) error {
	if y := ev.Time.Year(); ev.Time.IsZero() || y < minYear || y > maxYear {
		return fmt.Errorf("%w: time %v out of range", ErrInvalidEvent, ev.Time)
	}
	t := ev.Time.UnixNano()
	now := o.now().UnixNano()
	in := o.inputs[ev.Input]
	if in == nil {
		in = &input{}
		o.inputs[ev.Input] = in
	}
	in.lastArrival = now
	if in.idle {
		in.idle = false
		o.log.Debug("window: input active again", "input", ev.Input)
	}
	if !in.hasTs || t > in.maxTs {
		in.maxTs, in.hasTs = t, true
	}

	size := int64(o.spec.Size)
	for s := o.spec.lastStart(t); s > t-size; s -= int64(o.spec.Slide) {
		end := s + size
		if o.wm != noWatermark && end+o.lateness <= o.wm {
			o.late++
			o.inst.late.Add(context.Background(), 1, o.inst.attrs)
			out.Late = append(out.Late, LateEvent[In]{
				Event:     ev,
				Start:     time.Unix(0, s).UTC(),
				End:       time.Unix(0, end).UTC(),
				Watermark: time.Unix(0, o.wm).UTC(),
			})
			continue
		}
		k := paneKey{key: ev.Key, start: s}
		p := o.panes[k]
		if p == nil {
			p = &pane[Acc]{key: ev.Key, start: s, end: end, acc: o.agg.Identity()}
			o.panes[k] = p
			o.inst.open.Add(context.Background(), 1, o.inst.attrs)
			if end > o.wm {
				o.schedule(end, p)
			} else {
				o.schedule(end+o.lateness, p)
			}
		}
		p.acc = o.agg.Add(p.acc, ev.Value)
		p.n++
		if end <= o.wm {
			o.emit(p, out) // late but allowed: re-emit with a higher version
		}
	}
	o.advance(now, out)
	return nil
}

// Tick re-evaluates idleness against the clock and appends the rows of the
// windows that closes. Call it when no events arrive, at the latest at
// NextTick: the operator has no timer of its own.
func (o *Operator[In, Acc, Out]) Tick(out *Output[In, Out]) {
	now := o.now().UnixNano()
	o.advance(now, out)
	if o.wm != noWatermark {
		o.inst.lag.Record(context.Background(), time.Duration(now-o.wm).Seconds(), o.inst.attrs)
	}
}

// NextTick returns the processing time at which Tick would next change
// something without new events (an input turning idle, or, when all inputs
// are idle, the next window closing), and false when nothing is pending.
func (o *Operator[In, Acc, Out]) NextTick() (time.Time, bool) {
	if o.idle < 0 || len(o.inputs) == 0 {
		return time.Time{}, false
	}
	next := int64(math.MaxInt64)
	allIdle, latest := true, int64(math.MinInt64)
	for _, in := range o.inputs {
		latest = max(latest, in.lastArrival)
		if !in.idle {
			allIdle = false
			next = min(next, in.lastArrival+o.idle)
		}
	}
	if allIdle && len(o.times) > 0 && o.wm != noWatermark {
		// The watermark follows the clock: the next timer is due after the
		// gap between it and the watermark.
		next = min(next, o.now().UnixNano()+max(o.times[0]-o.wm, 0))
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
		o.inst.lag.Record(context.Background(), time.Duration(now-o.wm).Seconds(), o.inst.attrs)
	}
}

// candidate returns the watermark the inputs allow at processing time now:
// the minimum over active inputs of (max event time - bound); when every
// input is idle, the newest event time over all inputs advanced by the time
// spent idle beyond IdleTimeout.
func (o *Operator[In, Acc, Out]) candidate(now int64) int64 {
	wm, active := int64(math.MaxInt64), false
	latestArrival, newest, any := int64(math.MinInt64), int64(math.MinInt64), false
	for id, in := range o.inputs {
		if o.idle >= 0 && now-in.lastArrival >= o.idle {
			if !in.idle {
				in.idle = true
				o.log.Debug("window: input idle", "input", id)
			}
		} else {
			active = true
			if !in.hasTs {
				wm = noWatermark
			} else {
				wm = min(wm, in.maxTs-o.bound)
			}
		}
		latestArrival = max(latestArrival, in.lastArrival)
		if in.hasTs {
			newest, any = max(newest, in.maxTs), true
		}
	}
	switch {
	case active:
		return wm
	case any:
		return newest + (now - latestArrival - o.idle)
	}
	return noWatermark
}

func (o *Operator[In, Acc, Out]) schedule(at int64, p *pane[Acc]) {
	if _, ok := o.timers[at]; !ok {
		i, _ := slices.BinarySearch(o.times, at)
		o.times = slices.Insert(o.times, i, at)
	}
	o.timers[at] = append(o.timers[at], p)
}

// fire emits the windows whose end the watermark passed and drops those
// past their allowed lateness, in order of time, then key, then start.
func (o *Operator[In, Acc, Out]) fire(out *Output[In, Out]) {
	for len(o.times) > 0 && o.times[0] <= o.wm {
		at := o.times[0]
		o.times = o.times[1:]
		due := o.timers[at]
		delete(o.timers, at)
		slices.SortFunc(due, func(a, b *pane[Acc]) int {
			if c := cmp.Compare(a.key, b.key); c != 0 {
				return c
			}
			return cmp.Compare(a.start, b.start)
		})
		for i, p := range due {
			due[i] = nil
			if p.end == at {
				o.emit(p, out)
			}
			if drop := p.end + o.lateness; drop > o.wm {
				o.schedule(drop, p)
				continue
			}
			delete(o.panes, paneKey{key: p.key, start: p.start})
			o.inst.open.Add(context.Background(), -1, o.inst.attrs)
		}
	}
	if len(o.times) == 0 {
		o.times = o.times[:0:0] // let a long-drained slice go
	}
}

func (o *Operator[In, Acc, Out]) emit(p *pane[Acc], out *Output[In, Out]) {
	res, ok := o.agg.Result(p.acc)
	out.Rows = append(out.Rows, Row[Out]{
		Key:     p.key,
		Start:   time.Unix(0, p.start).UTC(),
		End:     time.Unix(0, p.end).UTC(),
		Version: p.n,
		Valid:   ok,
		Result:  res,
	})
	o.emitted++
	o.inst.emissions.Add(context.Background(), 1, o.inst.attrs)
}

// Watermark returns the operator's watermark: no event with an earlier time
// is expected any more. It is false before the first watermark.
func (o *Operator[In, Acc, Out]) Watermark() (time.Time, bool) {
	if o.wm == noWatermark {
		return time.Time{}, false
	}
	return time.Unix(0, o.wm).UTC(), true
}

// Counters are the operator's running totals since it was created (they are
// not part of a snapshot).
type Counters struct {
	OpenWindows int    // windows held in state
	Emitted     uint64 // rows emitted
	Late        uint64 // late events handed to Output.Late
}

// Counters returns the operator's running totals.
func (o *Operator[In, Acc, Out]) Counters() Counters {
	return Counters{OpenWindows: len(o.panes), Emitted: o.emitted, Late: o.late}
}

type instruments struct {
	attrs     metric.MeasurementOption
	open      metric.Int64UpDownCounter
	emissions metric.Int64Counter
	late      metric.Int64Counter
	lag       metric.Float64Gauge
}

func newInstruments(mp metric.MeterProvider, name string) (instruments, error) {
	m := mp.Meter("github.com/exactlyonce/exactlyonce/window")
	i := instruments{attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String("window.operator", name)))}
	var err error
	if i.open, err = m.Int64UpDownCounter("window.open",
		metric.WithDescription("Windows held in state."), metric.WithUnit("{window}")); err != nil {
		return i, fmt.Errorf("window: metrics: %w", err)
	}
	if i.emissions, err = m.Int64Counter("window.emissions",
		metric.WithDescription("Rows emitted, re-emissions included."), metric.WithUnit("{row}")); err != nil {
		return i, fmt.Errorf("window: metrics: %w", err)
	}
	if i.late, err = m.Int64Counter("window.late_events",
		metric.WithDescription("Events later than the allowed lateness, handed to the late output (one per missed window)."),
		metric.WithUnit("{event}")); err != nil {
		return i, fmt.Errorf("window: metrics: %w", err)
	}
	if i.lag, err = m.Float64Gauge("window.watermark_lag",
		metric.WithDescription("Processing time minus the operator watermark."), metric.WithUnit("s")); err != nil {
		return i, fmt.Errorf("window: metrics: %w", err)
	}
	return i, nil
}
