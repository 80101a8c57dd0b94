package window

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// fakeClock is an injected processing-time clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

var t0 = time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)

// at returns t0 plus d: event times in tests.
func at(d time.Duration) time.Time { return t0.Add(d) }

func ev(key string, d time.Duration, v float64) Event[float64] {
	return Event[float64]{Key: key, Time: at(d), Value: v}
}

func newCount(t *testing.T, spec Spec, opts Options) (*Operator[float64, uint64, uint64], *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: t0}
	if opts.Now == nil {
		opts.Now = clk.Now
	}
	op, err := New[float64](spec, Count[float64]{}, opts)
	require.NoError(t, err)
	return op, clk
}

func row(key string, start, end time.Duration, version, result uint64) Row[uint64] {
	return Row[uint64]{Key: key, Start: at(start), End: at(end), Version: version, Valid: true, Result: result}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		opts Options
	}{
		{name: "zero size", spec: Spec{}},
		{name: "negative size", spec: Tumbling(-time.Second)},
		{name: "slide above size", spec: Hopping(time.Minute, 2*time.Minute)},
		{name: "zero slide", spec: Spec{Size: time.Minute}},
		{name: "offset not below slide", spec: Spec{Size: time.Minute, Slide: time.Minute, Offset: time.Minute}},
		{name: "fan-out too large", spec: Hopping(time.Hour, time.Millisecond)},
		{name: "negative lateness", spec: Tumbling(time.Minute), opts: Options{AllowedLateness: -1}},
		{name: "negative early interval", spec: Tumbling(time.Minute), opts: Options{Early: EarlyFiring{Interval: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New[float64](tt.spec, Count[float64]{}, tt.opts)
			assert.ErrorIs(t, err, ErrInvalidOptions)
		})
	}
}

func TestAddRejectsInvalidEvent(t *testing.T) {
	op, _ := newCount(t, Tumbling(time.Minute), Options{})
	var out Output[float64, uint64]
	for _, tm := range []time.Time{{}, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)} {
		err := op.Add(Event[float64]{Key: "k", Time: tm}, &out)
		assert.ErrorIs(t, err, ErrInvalidEvent)
	}
	assert.Equal(t, Counters{}, op.Counters())
}

func TestOutOfOrderEventsWithinBoundLandInTheirWindow(t *testing.T) {
	op, _ := newCount(t, Tumbling(time.Minute), Options{MaxOutOfOrderness: 10 * time.Second})
	var out Output[float64, uint64]
	for _, e := range []Event[float64]{
		ev("a", 50*time.Second, 1),
		ev("a", 65*time.Second, 1), // watermark 55s
		ev("a", 55*time.Second, 1), // out of order, within the bound: window [0,60)
		ev("b", 59*time.Second, 1),
		ev("a", 69*time.Second, 1), // watermark 59s: nothing fires yet
	} {
		require.NoError(t, op.Add(e, &out))
	}
	assert.Empty(t, out.Rows)
	require.NoError(t, op.Add(ev("a", 70*time.Second, 1), &out)) // watermark 60s
	assert.Equal(t, []Row[uint64]{
		row("a", 0, time.Minute, 2, 2),
		row("b", 0, time.Minute, 1, 1),
	}, out.Rows)
	assert.Empty(t, out.Late)
}

func TestAllowedLatenessReemitsThenLateOutput(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	op, _ := newCount(t, Tumbling(time.Minute), Options{
		MaxOutOfOrderness: -1,
		AllowedLateness:   30 * time.Second,
		MeterProvider:     sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(ev("a", 10*time.Second, 1), &out))
	require.NoError(t, op.Add(ev("a", 61*time.Second, 1), &out)) // fires [0,60)
	require.Equal(t, []Row[uint64]{row("a", 0, time.Minute, 1, 1)}, out.Rows)
	out.Reset()

	// Within lateness (watermark 61s < 60s+30s): re-emitted, version 2.
	require.NoError(t, op.Add(ev("a", 20*time.Second, 1), &out))
	assert.Equal(t, []Row[uint64]{row("a", 0, time.Minute, 2, 2)}, out.Rows)
	out.Reset()

	// Watermark 95s passes 60s+30s: the window closes without emitting.
	require.NoError(t, op.Add(ev("a", 95*time.Second, 1), &out))
	assert.Empty(t, out.Rows)
	late := ev("a", 30*time.Second, 1)
	require.NoError(t, op.Add(late, &out))
	assert.Empty(t, out.Rows)
	assert.Equal(t, []LateEvent[float64]{{Event: late, Start: at(0), End: at(time.Minute), Watermark: at(95 * time.Second)}}, out.Late)
	assert.Equal(t, Counters{OpenWindows: 1, Emitted: 2, Late: 1}, op.Counters())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok {
				got[m.Name] = s.DataPoints[0].Value
			}
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok {
				assert.Len(t, g.DataPoints, 1, m.Name)
				got[m.Name] = 1
			}
		}
	}
	assert.Equal(t, map[string]int64{
		"exactlyonce.window.open": 1, "exactlyonce.window.emissions": 2, "exactlyonce.window.late_events": 1, "exactlyonce.window.watermark_lag": 1,
	}, got)
}

func TestHoppingWindows(t *testing.T) {
	op, _ := newCount(t, Hopping(time.Minute, 20*time.Second), Options{MaxOutOfOrderness: -1})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(ev("a", 45*time.Second, 1), &out))
	require.NoError(t, op.Add(ev("a", 3*time.Minute, 1), &out))
	assert.Equal(t, []Row[uint64]{
		row("a", 0, time.Minute, 1, 1),
		row("a", 20*time.Second, 80*time.Second, 1, 1),
		row("a", 40*time.Second, 100*time.Second, 1, 1),
	}, out.Rows)
}

func TestHoppingEventLateForSomeWindowsOnly(t *testing.T) {
	op, _ := newCount(t, Hopping(time.Minute, 30*time.Second), Options{MaxOutOfOrderness: -1})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(ev("a", 70*time.Second, 1), &out)) // watermark 70s: [0,60) and [30,90) not fired
	require.NoError(t, op.Add(ev("b", 50*time.Second, 1), &out)) // [0,60) closed; [30,90) open
	require.Len(t, out.Late, 1)
	assert.Equal(t, at(0), out.Late[0].Start)
	require.NoError(t, op.Add(ev("a", 2*time.Minute, 1), &out))
	assert.Contains(t, out.Rows, row("b", 30*time.Second, 90*time.Second, 1, 1))
}

func TestWatermarkIsMinimumOverInputs(t *testing.T) {
	op, _ := newCount(t, Tumbling(time.Minute), Options{MaxOutOfOrderness: -1, Inputs: []int{0, 1}})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(Event[float64]{Input: 0, Key: "a", Time: at(2 * time.Minute)}, &out))
	_, ok := op.Watermark()
	assert.False(t, ok, "declared input 1 has not spoken: no watermark")
	require.NoError(t, op.Add(Event[float64]{Input: 1, Key: "a", Time: at(30 * time.Second)}, &out))
	wm, _ := op.Watermark()
	assert.Equal(t, at(30*time.Second), wm)
	assert.Empty(t, out.Rows)
	require.NoError(t, op.Add(Event[float64]{Input: 1, Key: "a", Time: at(90 * time.Second)}, &out))
	wm, _ = op.Watermark()
	assert.Equal(t, at(90*time.Second), wm)
	assert.Equal(t, []Row[uint64]{row("a", 0, time.Minute, 1, 1)}, out.Rows)
}

func TestIdleInputStopsHoldingTheWatermark(t *testing.T) {
	op, clk := newCount(t, Tumbling(time.Minute), Options{MaxOutOfOrderness: -1, IdleTimeout: 10 * time.Second})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(Event[float64]{Input: 1, Key: "a", Time: at(10 * time.Second)}, &out))
	require.NoError(t, op.Add(Event[float64]{Input: 0, Key: "a", Time: at(20 * time.Second)}, &out))
	// Input 0 keeps talking; input 1 goes silent at 10s of event time.
	clk.Advance(9 * time.Second)
	require.NoError(t, op.Add(Event[float64]{Input: 0, Key: "a", Time: at(2 * time.Minute)}, &out))
	wm, _ := op.Watermark()
	assert.Equal(t, at(10*time.Second), wm, "input 1 is not idle yet")
	clk.Advance(time.Second) // input 1 silent for exactly IdleTimeout
	op.Tick(&out)
	wm, _ = op.Watermark()
	assert.Equal(t, at(2*time.Minute), wm)
	assert.Equal(t, []Row[uint64]{row("a", 0, time.Minute, 2, 2)}, out.Rows)

	// Input 1 speaks again with old data: the watermark does not go back,
	// and its event is late rather than silently merged.
	out.Reset()
	require.NoError(t, op.Add(Event[float64]{Input: 1, Key: "a", Time: at(15 * time.Second)}, &out))
	wm, _ = op.Watermark()
	assert.Equal(t, at(2*time.Minute), wm)
	assert.Len(t, out.Late, 1)
}

// With every input silent, a window fires IdleTimeout after the input went
// quiet plus the event time still missing to the window's end: on time, and
// without waiting for a new record.
func TestAllInputsIdleWindowFiresOnTick(t *testing.T) {
	op, clk := newCount(t, Tumbling(time.Minute), Options{MaxOutOfOrderness: 5 * time.Second, IdleTimeout: 10 * time.Second})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(ev("a", 50*time.Second, 1), &out))
	next, ok := op.NextTick()
	require.True(t, ok)
	assert.Equal(t, t0.Add(10*time.Second), next, "the input turns idle")

	clk.t = next
	op.Tick(&out)
	assert.Empty(t, out.Rows)
	wm, _ := op.Watermark()
	assert.Equal(t, at(50*time.Second), wm, "idle: the out-of-orderness bound is released")
	next, ok = op.NextTick()
	require.True(t, ok)
	assert.Equal(t, t0.Add(20*time.Second), next, "the watermark follows the clock to the window end")

	clk.t = next.Add(-time.Nanosecond)
	op.Tick(&out)
	assert.Empty(t, out.Rows, "one nanosecond early")
	clk.t = next
	op.Tick(&out)
	assert.Equal(t, []Row[uint64]{row("a", 0, time.Minute, 1, 1)}, out.Rows)
	_, ok = op.NextTick()
	assert.False(t, ok, "nothing left to fire")
}

func TestIdlenessDisabledHoldsWindows(t *testing.T) {
	op, clk := newCount(t, Tumbling(time.Minute), Options{IdleTimeout: -1})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(ev("a", 50*time.Second, 1), &out))
	clk.Advance(24 * time.Hour)
	op.Tick(&out)
	assert.Empty(t, out.Rows)
	_, ok := op.NextTick()
	assert.False(t, ok)
}

// randomStream returns events over a few keys and inputs, mostly in order
// with some disorder and a few very late events.
func randomStream(seed uint64, n int) []Event[float64] {
	r := rand.New(rand.NewPCG(seed, seed))
	evs := make([]Event[float64], n)
	base := time.Duration(0)
	for i := range evs {
		base += time.Duration(r.IntN(2000)) * time.Millisecond
		d := base - time.Duration(r.IntN(8000))*time.Millisecond
		if r.IntN(50) == 0 {
			d -= 2 * time.Minute
		}
		evs[i] = Event[float64]{
			Input: r.IntN(3),
			Key:   fmt.Sprintf("k%d", r.IntN(7)),
			Time:  at(d),
			Value: float64(r.IntN(1000)),
		}
	}
	return evs
}

func newStats(t *testing.T) *Operator[float64, StatsAcc, Summary] {
	t.Helper()
	clk := &fakeClock{t: t0}
	op, err := New(Hopping(time.Minute, 30*time.Second), Stats{}, Options{
		MaxOutOfOrderness: 5 * time.Second,
		AllowedLateness:   20 * time.Second,
		Now:               clk.Now,
	})
	require.NoError(t, err)
	return op
}

func TestReplayAfterRestoreIsByteIdentical(t *testing.T) {
	ctx := context.Background()
	evs := randomStream(1, 3000)
	const barrier = 1700

	feed := func(op *Operator[float64, StatsAcc, Summary], evs []Event[float64]) []byte {
		var out Output[float64, Summary]
		for _, e := range evs {
			require.NoError(t, op.Add(e, &out))
		}
		b, err := json.Marshal(out)
		require.NoError(t, err)
		return b
	}

	first := newStats(t)
	feed(first, evs[:barrier])
	snap, err := first.Snapshot(ctx, 7)
	require.NoError(t, err)
	want := feed(first, evs[barrier:])
	require.Greater(t, len(want), 1000, "the tail emits rows and late events")
	wantSnap, err := first.Snapshot(ctx, 8)
	require.NoError(t, err)

	// A fresh operator, as in another process, restored from the checkpoint
	// and fed the same tail, twice over.
	for range 2 {
		second := newStats(t)
		require.NoError(t, second.Restore(ctx, snap))
		assert.Equal(t, want, feed(second, evs[barrier:]))
		gotSnap, err := second.Snapshot(ctx, 8)
		require.NoError(t, err)
		assert.Equal(t, wantSnap, gotSnap)
	}
}

func TestSnapshotIsDeterministic(t *testing.T) {
	ctx := context.Background()
	evs := randomStream(2, 500)
	var snaps [][]byte
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}} {
		// The same events per window, keys fed in another order: the
		// counts, and so the snapshots, are equal.
		op, _ := newCount(t, Tumbling(time.Hour), Options{IdleTimeout: -1})
		var out Output[float64, uint64]
		for _, k := range order {
			for _, e := range evs {
				if e.Input == k {
					e.Input = 0
					require.NoError(t, op.Add(e, &out))
				}
			}
		}
		s1, err := op.Snapshot(ctx, 1)
		require.NoError(t, err)
		s2, err := op.Snapshot(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, s1, s2)
		snaps = append(snaps, s1)
	}
	assert.Equal(t, snaps[0], snaps[1])
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	ctx := context.Background()
	src := newStats(t)
	var out Output[float64, Summary]
	for _, e := range randomStream(3, 200) {
		require.NoError(t, src.Add(e, &out))
	}
	good, err := src.Snapshot(ctx, 1)
	require.NoError(t, err)

	otherSpec, err := New(Tumbling(time.Minute), Stats{}, Options{})
	require.NoError(t, err)
	otherSnap, err := otherSpec.Snapshot(ctx, 1)
	require.NoError(t, err)
	newer := append([]byte(nil), good...)
	newer[4] = snapshotVersion + 1 // version 2 is the session format

	tests := []struct {
		name string
		give []byte
		want error
	}{
		{name: "empty", give: nil, want: ErrCorrupt},
		{name: "not a snapshot", give: []byte("hello, world"), want: ErrCorrupt},
		{name: "newer version", give: newer, want: ErrUnsupportedVersion},
		{name: "other spec", give: otherSnap, want: ErrIncompatible},
	}
	for i := range len(good) - 1 {
		tests = append(tests, struct {
			name string
			give []byte
			want error
		}{name: fmt.Sprintf("truncated to %d", i), give: good[:i], want: ErrCorrupt})
	}
	for i := 5; i < len(good); i += 7 {
		flipped := append([]byte(nil), good...)
		flipped[i] ^= 0x10
		tests = append(tests, struct {
			name string
			give []byte
			want error
		}{name: fmt.Sprintf("bit flip at %d", i), give: flipped, want: ErrCorrupt})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := newStats(t)
			var out Output[float64, Summary]
			require.NoError(t, op.Add(ev("x", 0, 1), &out))
			before, err := op.Snapshot(ctx, 1)
			require.NoError(t, err)

			err = op.Restore(ctx, tt.give)
			assert.ErrorIs(t, err, tt.want)
			after, err := op.Snapshot(ctx, 1)
			require.NoError(t, err)
			assert.Equal(t, before, after, "a failed restore loads nothing")
		})
	}
	var ce *CorruptError
	assert.True(t, errors.As(newStats(t).Restore(ctx, good[:len(good)-1]), &ce))
}

func FuzzRestore(f *testing.F) {
	ctx := context.Background()
	op := newStatsF(f)
	var out Output[float64, Summary]
	for _, e := range randomStream(4, 100) {
		_ = op.Add(e, &out)
	}
	snap, _ := op.Snapshot(ctx, 1)
	f.Add(snap)
	f.Add(snap[:len(snap)-4])
	f.Add([]byte("EOWN\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The raw input exercises the framing; the same input with a valid
		// checksum appended exercises the body decoder.
		sealed := binary.BigEndian.AppendUint32(append([]byte(nil), data...), crc32.Checksum(data, castagnoli))
		for _, give := range [][]byte{data, sealed} {
			op := newStatsF(t)
			if err := op.Restore(ctx, give); err != nil {
				continue
			}
			// Whatever restores snapshots, restores and snapshots again
			// to the same bytes, and keeps working.
			again, err := op.Snapshot(ctx, 1)
			require.NoError(t, err)
			op2 := newStatsF(t)
			require.NoError(t, op2.Restore(ctx, again))
			third, err := op2.Snapshot(ctx, 1)
			require.NoError(t, err)
			require.Equal(t, again, third)
			var out Output[float64, Summary]
			require.NoError(t, op.Add(ev("k", time.Hour, 1), &out))
		}
	})
}

func newStatsF(t testing.TB) *Operator[float64, StatsAcc, Summary] {
	op, err := New(Hopping(time.Minute, 30*time.Second), Stats{}, Options{AllowedLateness: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return op
}
