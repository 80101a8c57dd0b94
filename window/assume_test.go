package window

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Property: a run shows sessions early by Ticks (Early.Interval), its rows
// reach the table, and it dies before its next checkpoint; the replay
// from that checkpoint has its Ticks elsewhere, or none. With
// AssumeWritten on while the replay covers what the dead run processed,
// the table read with FINAL holds exactly the sessions of the events: a
// session the dead run showed and the replay merges away is retracted
// although the replay never showed it. Without it, some seeds leave such a
// session in the table: the breach this guards against.
func TestAssumeWrittenRetractsWhatADeadRunShowed(t *testing.T) {
	const gap, bound, lateness = 10 * time.Second, 5 * time.Second, 20 * time.Second
	ctx := context.Background()
	breaches, assumed := 0, 0
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 41))
		evs := sessionStream(seed, 60, bound+lateness)
		opts := Options{MaxOutOfOrderness: bound, AllowedLateness: lateness, IdleTimeout: -1,
			Early: EarlyFiring{Interval: time.Second, Every: seed % 3}}
		cp := r.IntN(len(evs))                // the checkpoint, before evs[cp]
		crash := cp + 1 + r.IntN(len(evs)-cp) // the dead run processed evs[:crash]

		clk := &fakeClock{t: t0}
		opts.Now = clk.Now
		dead, err := New(Session(gap), Stats{}, opts)
		require.NoError(t, err)
		var written Output[float64, Summary] // every row the dead run wrote
		var snap []byte
		for i, e := range evs[:crash] {
			if i == cp {
				snap, err = dead.Snapshot(ctx, 1)
				require.NoError(t, err)
			}
			require.NoError(t, dead.Add(e, &written))
			if r.IntN(3) == 0 {
				clk.Advance(time.Second)
				dead.Tick(&written)
			}
		}

		replay := func(assume bool) map[rowKey]Row[Summary] {
			op, err := New(Session(gap), Stats{}, opts)
			require.NoError(t, err)
			require.NoError(t, op.Restore(ctx, snap))
			op.AssumeWritten(assume)
			out := Output[float64, Summary]{Rows: append([]Row[Summary](nil), written.Rows...)}
			rr := rand.New(rand.NewPCG(seed, 7))
			for i := cp; i < len(evs); i++ {
				if i == crash {
					op.AssumeWritten(false) // past what the dead run processed
				}
				require.NoError(t, op.Add(evs[i], &out))
				if rr.IntN(5) == 0 {
					clk.Advance(time.Second)
					op.Tick(&out)
				}
			}
			op.EndInput(&out)
			require.Empty(t, out.Late, "seed %d", seed)
			for _, r := range out.Rows[len(written.Rows):] {
				if r.Deleted && assume {
					assumed++
				}
			}
			return table(out.Rows)
		}
		want := bruteSessions(evs, gap)
		require.Equal(t, want, replay(true), "seed %d: checkpoint before event %d, crash after event %d", seed, cp, crash-1)
		if !assert.ObjectsAreEqual(want, replay(false)) {
			breaches++
		}
	}
	assert.NotZero(t, breaches, "some seeds merge away a session only the dead run showed")
	assert.NotZero(t, assumed, "deletions come from what was assumed written")
}

// AssumeWritten marks the sessions held and those created while it is on,
// not those created after; Restore turns it off; window operators ignore
// it.
func TestAssumeWrittenMarks(t *testing.T) {
	ctx := context.Background()
	const gap = 10 * time.Second
	op := newSession(t, gap, Options{MaxOutOfOrderness: time.Hour, IdleTimeout: -1})
	var out Output[float64, Summary]
	require.NoError(t, op.Add(ev("a", 0, 1), &out)) // a [0, 10): held when turned on
	op.AssumeWritten(true)
	require.NoError(t, op.Add(ev("b", 0, 1), &out)) // b [0, 10): created while on
	op.AssumeWritten(false)
	require.NoError(t, op.Add(ev("c", 0, 1), &out)) // c [0, 10): created after
	require.Empty(t, out.Rows)
	for _, k := range []string{"a", "b", "c"} {
		require.NoError(t, op.Add(ev(k, -5*time.Second, 1), &out)) // moves each start back
	}
	del := func(k string) Row[Summary] {
		return Row[Summary]{Key: k, Start: at(0), End: at(gap), Version: 2, Deleted: true}
	}
	early := func(k string) Row[Summary] {
		return Row[Summary]{Key: k, Start: at(-5 * time.Second), End: at(gap), Version: 2, Valid: true, Early: true,
			Result: Summary{Count: 2, Sum: 2, Min: 1, Max: 1, Avg: 1}}
	}
	assert.Equal(t, []Row[Summary]{del("a"), early("a"), del("b"), early("b")}, out.Rows, "c was never written")

	snap, err := op.Snapshot(ctx, 1)
	require.NoError(t, err)
	op.AssumeWritten(true)
	require.NoError(t, op.Restore(ctx, snap))
	out.Reset()
	require.NoError(t, op.Add(ev("d", 0, 1), &out))
	require.NoError(t, op.Add(ev("d", -5*time.Second, 1), &out))
	assert.Empty(t, out.Rows, "Restore turned it off")

	win, err := New(Tumbling(time.Minute), Stats{}, Options{MaxOutOfOrderness: time.Hour, IdleTimeout: -1, Now: (&fakeClock{t: t0}).Now})
	require.NoError(t, err)
	win.AssumeWritten(true)
	require.NoError(t, win.Add(ev("a", 0, 1), &out))
	require.NoError(t, win.Add(ev("a", time.Second, 1), &out))
	assert.Empty(t, out.Rows, "windows are never retracted")
}
