package window

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every event time Add accepts must give a snapshot that Restore accepts:
// otherwise one odd timestamp makes every later checkpoint unrestorable.
func TestExtremeTimesSnapshotRestores(t *testing.T) {
	ctx := context.Background()
	spec := Hopping(time.Duration(maxSize), time.Duration(maxSize)/2)
	for _, tm := range []time.Time{
		time.Unix(0, maxEventTime).UTC(),
		time.Unix(0, -maxEventTime).UTC(),
		time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1800, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		t.Run(tm.String(), func(t *testing.T) {
			clk := &fakeClock{t: t0}
			opts := Options{
				MaxOutOfOrderness: time.Duration(maxSize),
				AllowedLateness:   time.Duration(maxSize),
				IdleTimeout:       time.Second,
				Now:               clk.Now,
			}
			op, err := New[float64](spec, Count[float64]{}, opts)
			require.NoError(t, err)
			var out Output[float64, uint64]
			require.NoError(t, op.Add(Event[float64]{Key: "k", Time: tm}, &out))
			// All inputs idle for a very long time: the watermark follows
			// the clock, but stays a time a snapshot can hold.
			clk.Advance(100 * 365 * 24 * time.Hour)
			op.Tick(&out)
			snap, err := op.Snapshot(ctx, 1)
			require.NoError(t, err)
			again, err := New[float64](spec, Count[float64]{}, opts)
			require.NoError(t, err)
			require.NoError(t, again.Restore(ctx, snap))
		})
	}
}

func TestAddRejectsTimesOutOfRange(t *testing.T) {
	op, _ := newCount(t, Tumbling(time.Minute), Options{})
	var out Output[float64, uint64]
	for _, tm := range []time.Time{
		time.Unix(0, maxEventTime+1),
		time.Unix(0, -maxEventTime-1),
		time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		assert.ErrorIs(t, op.Add(Event[float64]{Key: "k", Time: tm}, &out), ErrInvalidEvent, tm)
	}
	assert.Equal(t, Counters{}, op.Counters())
}

// Durations whose sum with an event time would overflow are refused.
func TestNewRejectsDurationsTooLong(t *testing.T) {
	tooLong := time.Duration(maxSize) + 1
	for name, opts := range map[string]Options{
		"out-of-orderness": {MaxOutOfOrderness: tooLong},
		"lateness":         {AllowedLateness: tooLong},
		"idle timeout":     {IdleTimeout: tooLong},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New[float64](Tumbling(time.Minute), Count[float64]{}, opts)
			assert.ErrorIs(t, err, ErrInvalidOptions)
		})
	}
}

// When every input is idle again after one of them spoke behind the
// watermark, NextTick still names the time the next window fires: ticking
// only then must fire it then, not one NextTick period after another.
func TestNextTickAfterIdleInputReturns(t *testing.T) {
	op, clk := newCount(t, Tumbling(time.Hour), Options{MaxOutOfOrderness: 5 * time.Second, IdleTimeout: 10 * time.Second})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(ev("a", 50*time.Second, 1), &out))
	clk.Advance(10 * time.Second)
	op.Tick(&out) // idle: watermark 50s, then follows the clock
	clk.Advance(30 * time.Minute)
	op.Tick(&out)
	wm, _ := op.Watermark()
	require.Equal(t, at(30*time.Minute+50*time.Second), wm)

	// The input speaks again, behind the watermark but inside the window,
	// and falls silent: the watermark now follows the clock from 60s.
	require.NoError(t, op.Add(ev("a", 60*time.Second, 1), &out))
	require.Empty(t, out.Rows)
	var ticks []time.Duration
	for range 10 {
		next, ok := op.NextTick()
		require.True(t, ok)
		clk.t = next
		ticks = append(ticks, next.Sub(t0))
		op.Tick(&out)
		if len(out.Rows) > 0 {
			break
		}
	}
	require.Equal(t, []Row[uint64]{row("a", 0, time.Hour, 2, 2)}, out.Rows)
	// The input turns idle at 30m20s (10s after its event at 30m10s) with
	// newest event time 60s: the window's end is 59m later. NextTick names
	// exactly these two times, with no wake-up in between.
	assert.Equal(t, []time.Duration{30*time.Minute + 20*time.Second, 89*time.Minute + 20*time.Second}, ticks)
}

// With AllowedLateness longer than the slide and every input idle, NextTick
// names the earlier of the next unfired window's end and the next fired
// window's end plus lateness: a caller ticking exactly at NextTick gets the
// next window on time, not when an already-fired window's lateness ends.
func TestNextTickUnfiredWindowBeforeFiredWindowsLateness(t *testing.T) {
	op, clk := newCount(t, Tumbling(time.Minute), Options{
		MaxOutOfOrderness: -1,
		AllowedLateness:   10 * time.Minute,
		IdleTimeout:       10 * time.Second,
	})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(ev("a", 30*time.Second, 1), &out))
	require.NoError(t, op.Add(ev("a", 90*time.Second, 1), &out)) // fires [0, 1m)
	require.Equal(t, []Row[uint64]{row("a", 0, time.Minute, 1, 1)}, out.Rows)
	out.Reset()

	var ticks []time.Duration
	for range 10 {
		next, ok := op.NextTick()
		require.True(t, ok)
		clk.t = next
		ticks = append(ticks, next.Sub(t0))
		op.Tick(&out)
		if len(out.Rows) > 0 {
			break
		}
	}
	// The input turns idle at 10s with newest event time 90s; [1m, 2m)
	// ends 30s of idle watermark later, at 40s, long before [0, 1m)'s
	// lateness ends (11m of event time).
	assert.Equal(t, []time.Duration{10 * time.Second, 40 * time.Second}, ticks)
	assert.Equal(t, []Row[uint64]{row("a", time.Minute, 2*time.Minute, 1, 1)}, out.Rows)

	// Then the next thing due is the end of [0, 1m)'s lateness.
	next, ok := op.NextTick()
	require.True(t, ok)
	assert.Equal(t, t0.Add(40*time.Second+(11*time.Minute-2*time.Minute)), next)
}
