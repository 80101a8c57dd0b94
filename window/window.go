package window

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrInvalidOptions reports a Spec or Options that New refuses.
	ErrInvalidOptions = errors.New("window: invalid options")
	// ErrInvalidEvent reports an event the operator cannot place in time
	// (a zero time, or one outside about the years 1770 to 2170). The
	// event is not aggregated and the operator's state is unchanged; the
	// caller decides what to do with it.
	ErrInvalidEvent = errors.New("window: invalid event")
	// ErrCorrupt reports a snapshot or an accumulator state that is
	// truncated, fails its checksum or is otherwise malformed. Restore
	// loads nothing when it returns this error.
	ErrCorrupt = errors.New("window: corrupt state")
	// ErrUnsupportedVersion reports a snapshot written by a newer format.
	ErrUnsupportedVersion = errors.New("window: unsupported snapshot version")
	// ErrIncompatible reports a snapshot taken by an operator with another
	// window Spec: its windows would not line up. (Other options may
	// differ: see Operator.Restore.)
	ErrIncompatible = errors.New("window: snapshot from an incompatible operator")
)

// CorruptError is the error for a malformed snapshot: it wraps ErrCorrupt
// and says at which byte offset decoding failed.
type CorruptError struct {
	Offset int
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("window: corrupt snapshot at byte %d: %s", e.Offset, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Spec describes which windows an event belongs to. Build one with
// Tumbling, Hopping or Session.
//
// Windows are half-open intervals [Start, End) of Size, starting at every
// multiple of Slide after Offset (relative to the Unix epoch). An event at
// time t belongs to every window with Start <= t < End: one window when
// Slide equals Size (tumbling), Size/Slide of them (rounded up) when Slide
// is smaller (hopping).
type Spec struct {
	Size   time.Duration
	Slide  time.Duration
	Offset time.Duration
	// Gap, when set, makes session windows (and Size, Slide and Offset
	// must be zero): see Session.
	Gap time.Duration
}

// Tumbling returns back-to-back windows of the given size: every event is
// in exactly one window.
func Tumbling(size time.Duration) Spec { return Spec{Size: size, Slide: size} }

// Hopping returns windows of the given size starting every slide, which
// overlap when slide < size. slide must not exceed size: that would leave
// gaps in which events belong to no window.
func Hopping(size, slide time.Duration) Spec { return Spec{Size: size, Slide: slide} }

func (s Spec) validate() error {
	if s.Gap != 0 {
		if s.Gap < 0 {
			return fmt.Errorf("%w: Spec.Gap is %v: a session gap must be positive", ErrInvalidOptions, s.Gap)
		}
		return s.validateSession()
	}
	switch {
	case s.Size <= 0:
		return fmt.Errorf("%w: Spec.Size is %v: a window size must be positive (window.Tumbling(size), window.Hopping(size, slide))", ErrInvalidOptions, s.Size)
	case s.Slide <= 0 || s.Slide > s.Size:
		return fmt.Errorf("%w: Spec.Slide is %v: want more than 0 and at most Size (%v)", ErrInvalidOptions, s.Slide, s.Size)
	case s.Offset < 0 || s.Offset >= s.Slide:
		return fmt.Errorf("%w: Spec.Offset is %v: want 0 or more and less than Slide (%v)", ErrInvalidOptions, s.Offset, s.Slide)
	case s.Size > maxSize:
		return fmt.Errorf("%w: Spec.Size is %v: the largest window accepted is %v", ErrInvalidOptions, s.Size, time.Duration(maxSize))
	case s.Size/s.Slide > maxWindowsPerEvent:
		return fmt.Errorf("%w: Spec.Size / Spec.Slide is above %d: each event would be in that many windows; use a longer Slide", ErrInvalidOptions, maxWindowsPerEvent)
	}
	return nil
}

// Bounds on a Spec: the fan-out of a hopping window, and a size that keeps
// window arithmetic far from overflow.
const (
	maxWindowsPerEvent = 1024
	maxSize            = 1 << 58 // about 9 years
)

// lastStart returns the start of the latest window containing t (nanoseconds).
func (s Spec) lastStart(t int64) int64 {
	slide, off := int64(s.Slide), int64(s.Offset)
	r := (t - off) % slide
	if r < 0 {
		r += slide
	}
	return t - r
}

// Event is one input of the operator.
type Event[In any] struct {
	// Input names the input the event arrived on, for example its Kafka
	// partition. Each input has its own watermark.
	Input int
	// Key groups events: each key has its own windows.
	Key string
	// Time is the event time that places the event in windows.
	Time time.Time
	// Value is handed to the aggregator.
	Value In
}

// Row is one emission of a window's result: the plain record written to a
// ReplacingMergeTree(Version) table ordered by (Key, Start, End); session
// rows, (Key, Start) with End a column, in a ReplacingMergeTree(Version,
// Deleted) (see the package documentation).
//
// A window is emitted when the watermark passes its End, and again for
// every event accepted within the allowed lateness. Version is the number
// of events folded into the window so far, so it grows with every
// re-emission and the newest (most complete) row wins when the table
// deduplicates; writing a row again, for example after a restore, writes
// the same bytes, which the table collapses.
type Row[Out any] struct {
	Key   string
	Start time.Time // inclusive, UTC
	End   time.Time // exclusive, UTC
	// Version is the number of events aggregated into this window.
	Version uint64
	// Valid is false when the aggregator reports no result (an average of
	// no samples): store NULL, not Result.
	Valid  bool
	Result Out
	// Early is true for a partial result emitted before the window fired
	// (see EarlyFiring). The window's final row replaces it in the table.
	Early bool
	// Deleted is set only by session windows: it retracts the row of a
	// session whose Start moved when a late event merged it into an
	// earlier one. Its Version beats every row written for (Key, Start),
	// so a ReplacingMergeTree(Version, Deleted) read with FINAL no longer
	// shows it. Result is empty and Valid false.
	Deleted bool
}

// LateEvent is an event that arrived after a window it belongs to was
// closed (watermark past End plus the allowed lateness). It is not
// aggregated into that window; it is handed to the caller instead of being
// dropped. A hopping event can be late for some of its windows only: there
// is one LateEvent per window it missed.
type LateEvent[In any] struct {
	Event      Event[In]
	Start, End time.Time // the window the event missed
	Watermark  time.Time // the operator watermark when it arrived
}

// Output collects what the operator produces. Methods append to it; the
// caller drains and resets it (Reset keeps the capacity).
type Output[In, Out any] struct {
	Rows []Row[Out]
	Late []LateEvent[In]
}

// Reset empties o, keeping its capacity.
func (o *Output[In, Out]) Reset() {
	clear(o.Rows)
	clear(o.Late)
	o.Rows, o.Late = o.Rows[:0], o.Late[:0]
}

// Defaults for Options.
const (
	DefaultMaxOutOfOrderness = 5 * time.Second
	DefaultIdleTimeout       = 30 * time.Second
)

// Options configures an Operator. The zero value is valid. New refuses
// durations above about nine years (the largest window size), which would
// overflow the operator's time arithmetic.
type Options struct {
	// MaxOutOfOrderness is how far behind the newest event time of an input
	// an event may arrive and still be on time: an input's watermark is its
	// maximum event time minus this bound. Larger values delay every
	// emission by as much; smaller ones make more events late. Zero means
	// DefaultMaxOutOfOrderness; negative means no out-of-orderness at all.
	MaxOutOfOrderness time.Duration

	// AllowedLateness keeps a window open after it fired: an event arriving
	// within this much of watermark past End is still added, and the
	// window is emitted again with a higher Version. Later events go to
	// Output.Late. The cost is memory: windows live this much longer.
	// Default 0: a window closes when it fires.
	AllowedLateness time.Duration

	// IdleTimeout is how long (by Now) an input may go without events
	// before it stops holding the watermark back. See the package
	// documentation for the rule. Zero means DefaultIdleTimeout; negative
	// disables idleness, so a silent input holds every window back until it
	// speaks again.
	IdleTimeout time.Duration

	// Early emits partial results of windows that have not fired yet, for
	// dashboards that show the current window as it fills. Default: none,
	// a window is emitted when it fires. See EarlyFiring.
	Early EarlyFiring

	// Inputs lists inputs known before their first event. A listed input
	// holds the watermark back from the start (until it is idle), so that
	// the first events of one partition cannot close windows before the
	// others have spoken. Inputs not listed join at their first event.
	Inputs []int

	// Now is the processing-time clock used for idleness and watermark lag.
	// Default time.Now.
	Now func() time.Time

	// Logger receives debug records about idleness changes. Default
	// discards.
	Logger *slog.Logger

	// MeterProvider creates the operator's instruments. Default noop.
	MeterProvider metric.MeterProvider

	// Name tells apart operators in metrics (attribute "exactlyonce.window.operator").
	// Default "window".
	Name string
}

// EarlyFiring configures early (partial) emissions of windows that have not
// fired yet. Either field, or both, may be set; the zero value emits
// nothing early.
//
// An early row is an ordinary Row with Early set: keyed by (Key, Start,
// End) and versioned by the number of events folded in, so in a
// ReplacingMergeTree(Version) table the window's final row, with at least
// as many events, replaces every early row of it, and a read with FINAL
// returns the partial result until the window fires and the final result
// after. An early row and a final row of the same Version hold the same
// result: store Version and the result, not Early, so that the table has
// nothing to choose between them.
type EarlyFiring struct {
	// Interval emits, every Interval of processing time (Options.Now), the
	// partial result of each window that has not fired and changed since
	// its last emission. It is checked on every Add and Tick, and NextTick
	// names the time of the next one. Like idleness, it depends on the
	// clock, so a replay may emit partial rows at other points of the
	// input; the final rows do not depend on it.
	Interval time.Duration
	// Every emits the partial result of a window each time its event count
	// reaches a multiple of Every, while it has not fired. These rows
	// depend on the input only, and a replay emits them again identically.
	Every uint64
}

// Event times are kept as Unix nanoseconds. maxAbsTime bounds every time a
// snapshot may hold; Add accepts event times within maxEventTime of the
// epoch (about the years 1770 to 2170), leaving room for a window's size
// and allowed lateness (each at most maxSize) so that no time the operator
// derives from an accepted event, and so no time it writes to a snapshot,
// overflows or falls outside what Restore accepts.
const (
	maxAbsTime   = 3 << 61 // about 219 years
	maxEventTime = maxAbsTime - 2*maxSize
)
