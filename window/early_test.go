package window

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func earlyRow(key string, start, end time.Duration, version, result uint64) Row[uint64] {
	r := row(key, start, end, version, result)
	r.Early = true
	return r
}

func TestEarlyFiringEveryN(t *testing.T) {
	op, _ := newCount(t, Tumbling(time.Minute), Options{MaxOutOfOrderness: -1, Early: EarlyFiring{Every: 2}})
	var out Output[float64, uint64]
	for _, e := range []Event[float64]{
		ev("a", 1*time.Second, 1),
		ev("a", 2*time.Second, 1), // a: 2 events
		ev("b", 3*time.Second, 1),
		ev("a", 4*time.Second, 1),
		ev("b", 5*time.Second, 1), // b: 2 events
		ev("a", 6*time.Second, 1), // a: 4 events
		ev("a", 61*time.Second, 1),
	} {
		require.NoError(t, op.Add(e, &out))
	}
	assert.Equal(t, []Row[uint64]{
		earlyRow("a", 0, time.Minute, 2, 2),
		earlyRow("b", 0, time.Minute, 2, 2),
		earlyRow("a", 0, time.Minute, 4, 4),
		row("a", 0, time.Minute, 4, 4), // the final row: same version and result
		row("b", 0, time.Minute, 2, 2),
	}, out.Rows)
}

func TestEarlyFiringInterval(t *testing.T) {
	op, clk := newCount(t, Tumbling(time.Minute), Options{
		MaxOutOfOrderness: -1,
		IdleTimeout:       -1,
		Early:             EarlyFiring{Interval: 10 * time.Second},
	})
	var out Output[float64, uint64]
	_, ok := op.NextTick()
	assert.False(t, ok, "nothing to emit early")

	require.NoError(t, op.Add(ev("a", 1*time.Second, 1), &out))
	require.NoError(t, op.Add(ev("b", 2*time.Second, 1), &out))
	next, ok := op.NextTick()
	require.True(t, ok)
	assert.Equal(t, t0.Add(10*time.Second), next)
	clk.t = next.Add(-time.Nanosecond)
	op.Tick(&out)
	assert.Empty(t, out.Rows)
	clk.t = next
	op.Tick(&out)
	assert.Equal(t, []Row[uint64]{earlyRow("a", 0, time.Minute, 1, 1), earlyRow("b", 0, time.Minute, 1, 1)}, out.Rows)
	out.Reset()
	_, ok = op.NextTick()
	assert.False(t, ok, "nothing changed since")

	// Only the window that changed is emitted at the next interval, and an
	// Add past the due time emits without waiting for a Tick.
	require.NoError(t, op.Add(ev("a", 3*time.Second, 1), &out))
	clk.Advance(10 * time.Second)
	require.NoError(t, op.Add(ev("a", 4*time.Second, 1), &out))
	assert.Equal(t, []Row[uint64]{earlyRow("a", 0, time.Minute, 3, 3)}, out.Rows)
	out.Reset()

	require.NoError(t, op.Add(ev("a", 5*time.Second, 1), &out))
	require.NoError(t, op.Add(ev("c", 70*time.Second, 1), &out)) // fires [0, 1m)
	assert.Equal(t, []Row[uint64]{row("a", 0, time.Minute, 4, 4), row("b", 0, time.Minute, 1, 1)}, out.Rows)
	_, ok = op.NextTick()
	assert.True(t, ok, "c's window is pending")
	out.Reset()
	op.EndInput(&out)
	assert.Equal(t, []Row[uint64]{row("c", time.Minute, 2*time.Minute, 1, 1)}, out.Rows)
	_, ok = op.NextTick()
	assert.False(t, ok, "every window fired: no early firing is due")
}

// versioned is a model of a ReplacingMergeTree(Version) table ordered by
// (Key, Start, End), read with FINAL: the row of the highest version.
type versioned map[string]Row[Summary]

func (v versioned) insert(t *testing.T, rows []Row[Summary]) {
	for _, r := range rows {
		k := fmt.Sprint(r.Key, r.Start.UnixNano(), r.End.UnixNano())
		old, ok := v[k]
		r.Early = false // not a column: see EarlyFiring
		if ok && old.Version == r.Version {
			// Equal versions: the table keeps either, so they must agree.
			require.Equal(t, old, r, k)
		}
		if !ok || r.Version >= old.Version {
			v[k] = r
		}
	}
}

// Whatever the early firings and whenever the clock ticks, the table read
// with FINAL holds exactly the rows of an operator without early firings,
// and partial rows were there before the windows fired.
func TestEarlyFiringsFinalTableIsExact(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			evs := randomStream(seed, 1500)
			run := func(early EarlyFiring) (versioned, int) {
				clk := &fakeClock{t: t0}
				op, err := New(Hopping(time.Minute, 30*time.Second), Stats{}, Options{
					MaxOutOfOrderness: 5 * time.Second,
					AllowedLateness:   20 * time.Second,
					IdleTimeout:       -1,
					Early:             early,
					Now:               clk.Now,
				})
				require.NoError(t, err)
				var out Output[float64, Summary]
				for _, e := range evs {
					require.NoError(t, op.Add(e, &out))
					if early.Interval > 0 {
						clk.Advance(time.Duration(r.IntN(1000)) * time.Millisecond)
						if r.IntN(5) == 0 {
							op.Tick(&out)
						}
					}
				}
				op.EndInput(&out)
				table := versioned{}
				table.insert(t, out.Rows)
				n := 0
				for _, row := range out.Rows {
					if row.Early {
						n++
					}
				}
				return table, n
			}
			want, none := run(EarlyFiring{})
			require.Zero(t, none)
			for _, early := range []EarlyFiring{
				{Every: uint64(1 + r.IntN(5))},
				{Interval: time.Duration(1+r.IntN(10)) * time.Second},
				{Every: 3, Interval: 2 * time.Second},
			} {
				got, n := run(early)
				assert.Positive(t, n, "%+v: early rows", early)
				assert.Equal(t, want, got, "%+v", early)
			}
		})
	}
}

func TestEndInputFiresEveryWindow(t *testing.T) {
	ctx := context.Background()
	op, _ := newCount(t, Hopping(time.Minute, 30*time.Second), Options{MaxOutOfOrderness: time.Minute, AllowedLateness: time.Hour, IdleTimeout: -1})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(ev("a", 10*time.Second, 1), &out))
	require.NoError(t, op.Add(ev("b", 40*time.Second, 1), &out))
	require.Empty(t, out.Rows)
	op.EndInput(&out)
	assert.Equal(t, []Row[uint64]{
		row("a", -30*time.Second, 30*time.Second, 1, 1),
		row("a", 0, time.Minute, 1, 1),
		row("b", 0, time.Minute, 1, 1),
		row("b", 30*time.Second, 90*time.Second, 1, 1),
	}, out.Rows)
	assert.Zero(t, op.Counters().OpenWindows, "every window closed, lateness or not")
	_, ok := op.NextTick()
	assert.False(t, ok)

	// The final watermark survives a checkpoint; every later event is late.
	snap, err := op.Snapshot(ctx, 1)
	require.NoError(t, err)
	again, _ := newCount(t, Hopping(time.Minute, 30*time.Second), Options{AllowedLateness: time.Hour})
	require.NoError(t, again.Restore(ctx, snap))
	out.Reset()
	require.NoError(t, again.Add(ev("c", 2*time.Hour, 1), &out))
	assert.Empty(t, out.Rows)
	assert.Len(t, out.Late, 2)
}

// An input that leaves stops holding the watermark back: with idleness off,
// nothing else would ever release it.
func TestRemoveInputReleasesTheWatermark(t *testing.T) {
	op, _ := newCount(t, Tumbling(time.Minute), Options{MaxOutOfOrderness: -1, IdleTimeout: -1, Inputs: []int{0, 1, 2}})
	var out Output[float64, uint64]
	require.NoError(t, op.Add(Event[float64]{Input: 0, Key: "a", Time: at(2 * time.Minute)}, &out))
	require.NoError(t, op.Add(Event[float64]{Input: 1, Key: "a", Time: at(30 * time.Second)}, &out))
	require.NoError(t, op.Add(Event[float64]{Input: 2, Key: "b", Time: at(90 * time.Second)}, &out))
	wm, _ := op.Watermark()
	require.Equal(t, at(30*time.Second), wm)
	require.Empty(t, out.Rows)

	op.RemoveInput(1, &out)
	wm, _ = op.Watermark()
	assert.Equal(t, at(90*time.Second), wm, "the minimum over inputs 0 and 2")
	assert.Equal(t, []Row[uint64]{row("a", 0, time.Minute, 1, 1)}, out.Rows, "input 1's event stays in its window")

	// A snapshot no longer lists the input, and a restore does not bring a
	// removed declared input back.
	ctx := context.Background()
	snap, err := op.Snapshot(ctx, 1)
	require.NoError(t, err)
	op.RemoveInput(2, &out)
	require.NoError(t, op.Restore(ctx, snap))
	out.Reset()
	require.NoError(t, op.Add(Event[float64]{Input: 0, Key: "a", Time: at(3 * time.Minute)}, &out))
	wm, _ = op.Watermark()
	assert.Equal(t, at(90*time.Second), wm, "input 2, restored, holds the watermark")
	op.RemoveInput(2, &out)
	wm, _ = op.Watermark()
	assert.Equal(t, at(3*time.Minute), wm)
	assert.Len(t, out.Rows, 2)

	op.RemoveInput(0, &out)
	wm, _ = op.Watermark()
	assert.Equal(t, at(3*time.Minute), wm, "no input left: the watermark stays")
}

// A snapshot written by format version 1 (before early firings, by the
// code of commit 9c7ed52) still restores, and the restored operator goes on
// exactly as one that never stopped.
func TestRestoreVersion1Snapshot(t *testing.T) {
	ctx := context.Background()
	v1, err := os.ReadFile("testdata/v1-hopping-stats.snap")
	require.NoError(t, err)
	evs := randomStream(11, 400)

	restored := newStats(t)
	require.NoError(t, restored.Restore(ctx, v1))
	fresh := newStats(t)
	var out Output[float64, Summary]
	for _, e := range evs[:200] {
		require.NoError(t, fresh.Add(e, &out))
	}
	snap, err := fresh.Snapshot(ctx, 1)
	require.NoError(t, err)
	golden.Check(t, "v1-hopping-stats.snap", snap)

	// The same bytes with a later version number are refused as such, and
	// load nothing.
	v2 := slices.Clone(v1)
	v2[len(snapshotMagic)] = snapshotVersion + 1
	other := newStats(t)
	assert.ErrorIs(t, other.Restore(ctx, v2), ErrUnsupportedVersion)
	_, ok := other.Watermark()
	assert.False(t, ok, "a refused snapshot loaded a watermark")

	var a, b Output[float64, Summary]
	for _, e := range evs[200:] {
		require.NoError(t, restored.Add(e, &a))
		require.NoError(t, fresh.Add(e, &b))
	}
	assert.Equal(t, b, a)
	assert.NotEmpty(t, a.Rows)
}
