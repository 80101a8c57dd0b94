package window

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSession(t testing.TB, gap time.Duration, opts Options) *Operator[float64, StatsAcc, Summary] {
	t.Helper()
	clk := &fakeClock{t: t0}
	opts.Now = clk.Now
	op, err := New(Session(gap), Stats{}, opts)
	require.NoError(t, err)
	return op
}

type rowKey struct {
	key   string
	start time.Time
}

// table applies rows as a ReplacingMergeTree(Version, Deleted) read with
// FINAL does: per (Key, Start) the row of the highest version (the last
// written among equals), without the deleted ones.
func table(rows []Row[Summary]) map[rowKey]Row[Summary] {
	t := make(map[rowKey]Row[Summary])
	for _, r := range rows {
		k := rowKey{r.Key, r.Start}
		if old, ok := t[k]; !ok || r.Version >= old.Version {
			t[k] = r
		}
	}
	for k, r := range t {
		if r.Deleted {
			delete(t, k)
		}
	}
	return t
}

// bruteSessions computes the sessions of events from scratch: per key,
// sorted by time, split where two neighbours are more than gap apart.
func bruteSessions(evs []Event[float64], gap time.Duration) map[rowKey]Row[Summary] {
	byKey := map[string][]Event[float64]{}
	for _, e := range evs {
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	want := map[rowKey]Row[Summary]{}
	for k, es := range byKey {
		slices.SortFunc(es, func(a, b Event[float64]) int { return a.Time.Compare(b.Time) })
		for i := 0; i < len(es); {
			j, s := i+1, Summary{Count: 1, Sum: es[i].Value, Min: es[i].Value, Max: es[i].Value}
			for j < len(es) && es[j].Time.Sub(es[j-1].Time) <= gap {
				s.Count++
				s.Sum += es[j].Value
				s.Min, s.Max = min(s.Min, es[j].Value), max(s.Max, es[j].Value)
				j++
			}
			s.Avg = s.Sum / float64(s.Count)
			start := es[i].Time.UTC()
			want[rowKey{k, start}] = Row[Summary]{Key: k, Start: start, End: es[j-1].Time.Add(gap).UTC(), Version: s.Count, Valid: true, Result: s}
			i = j
		}
	}
	return want
}

// sessionStream returns events over a few keys, in bursts so that sessions
// form, in arrival order: each event is delayed by up to maxDelay, so that
// many arrive after their session fired and bridge sessions.
func sessionStream(seed uint64, n int, maxDelay time.Duration) []Event[float64] {
	r := rand.New(rand.NewPCG(seed, seed^0x5e55))
	type arr struct {
		e   Event[float64]
		due time.Time
	}
	evs := make([]arr, n)
	base := time.Duration(0)
	for i := range evs {
		base += time.Duration(r.IntN(4000)) * time.Millisecond
		if r.IntN(10) == 0 {
			base += 30 * time.Second
		}
		e := Event[float64]{Key: fmt.Sprintf("k%d", r.IntN(3)), Time: at(base), Value: float64(r.IntN(100))}
		evs[i] = arr{e, e.Time.Add(time.Duration(r.Int64N(int64(maxDelay) + 1)))}
	}
	slices.SortStableFunc(evs, func(a, b arr) int { return a.due.Compare(b.due) })
	out := make([]Event[float64], n)
	for i, a := range evs {
		out[i] = a.e
	}
	return out
}

// Property: whatever the arrival order (within out-of-orderness plus
// lateness, so that no event is late), the table holds exactly the
// sessions and aggregates a brute-force model computes from the sorted
// events, early firings or not.
func TestSessionsMatchBruteForce(t *testing.T) {
	const gap, bound, lateness = 10 * time.Second, 5 * time.Second, 20 * time.Second
	merges := 0
	for seed := range uint64(60) {
		evs := sessionStream(seed, 150, bound+lateness)
		op := newSession(t, gap, Options{
			MaxOutOfOrderness: bound,
			AllowedLateness:   lateness,
			Early:             EarlyFiring{Every: seed % 4},
		})
		var out Output[float64, Summary]
		for _, e := range evs {
			require.NoError(t, op.Add(e, &out))
		}
		op.EndInput(&out)
		require.Empty(t, out.Late, "seed %d: no event is beyond the lateness", seed)
		got := table(out.Rows)
		for _, r := range got {
			assert.False(t, r.Early, "seed %d: %v still early", seed, r)
		}
		require.Equal(t, bruteSessions(evs, gap), got, "seed %d", seed)
		for _, r := range out.Rows {
			if r.Deleted {
				merges++
			}
		}
		assert.Zero(t, op.open, "every session closed")
		assert.Zero(t, op.unfired, "every session fired")
		assert.Empty(t, op.sessions, "every key forgotten")
	}
	assert.NotZero(t, merges, "the streams make late events bridge emitted sessions")
}

// Property: with events beyond the lateness too, every event is either in
// the table or in Output.Late, and the table holds exactly the sessions of
// the accepted events: a late event is never half-merged, and an accepted
// one never overlaps a session already closed.
func TestSessionsWithLateEventsMatchBruteForce(t *testing.T) {
	const gap, bound, lateness = 10 * time.Second, 2 * time.Second, 5 * time.Second
	late := 0
	for seed := range uint64(60) {
		evs := sessionStream(seed, 150, 40*time.Second)
		op := newSession(t, gap, Options{MaxOutOfOrderness: bound, AllowedLateness: lateness})
		var out Output[float64, Summary]
		for _, e := range evs {
			require.NoError(t, op.Add(e, &out))
		}
		op.EndInput(&out)
		accepted := slices.Clone(evs)
		for _, l := range out.Late {
			i := slices.Index(accepted, l.Event)
			require.GreaterOrEqual(t, i, 0)
			accepted = slices.Delete(accepted, i, i+1)
		}
		late += len(out.Late)
		require.Equal(t, bruteSessions(accepted, gap), table(out.Rows), "seed %d", seed)
	}
	assert.NotZero(t, late)
}

// An event that would overlap a session already closed (forgotten) is late
// even though its own session [t, t+gap) would end after the watermark:
// otherwise the table would hold two overlapping sessions.
func TestSessionEventOverlappingClosedSessionIsLate(t *testing.T) {
	op := newSession(t, 10*time.Second, Options{MaxOutOfOrderness: -1})
	var out Output[float64, Summary]
	for _, e := range []Event[float64]{ev("a", 0, 1), ev("a", 5*time.Second, 1), ev("b", 20*time.Second, 1)} {
		require.NoError(t, op.Add(e, &out))
	}
	require.Len(t, out.Rows, 1, "[0s, 15s) fired and closed at watermark 20s")
	require.NoError(t, op.Add(ev("a", 12*time.Second, 1), &out))
	require.Len(t, out.Late, 1)
	assert.Len(t, out.Rows, 1)
}

// A late event that bridges two fired sessions merges them: the later
// session's row is retracted and the merged one is emitted with the sum
// of their events as its version. An event beyond the lateness is late.
func TestSessionLateEventBridgesTwo(t *testing.T) {
	op := newSession(t, 10*time.Second, Options{MaxOutOfOrderness: -1, AllowedLateness: time.Minute})
	var out Output[float64, Summary]
	for _, e := range []Event[float64]{ev("a", 0, 1), ev("a", 15*time.Second, 2), ev("a", 50*time.Second, 4)} {
		require.NoError(t, op.Add(e, &out))
	}
	require.Equal(t, []Row[Summary]{
		{Key: "a", Start: at(0), End: at(10 * time.Second), Version: 1, Valid: true, Result: Summary{1, 1, 1, 1, 1}},
		{Key: "a", Start: at(15 * time.Second), End: at(25 * time.Second), Version: 1, Valid: true, Result: Summary{1, 2, 2, 2, 2}},
	}, out.Rows)
	out.Reset()

	require.NoError(t, op.Add(ev("a", 7*time.Second, 8), &out)) // [7s, 17s) overlaps both
	assert.Equal(t, []Row[Summary]{
		{Key: "a", Start: at(15 * time.Second), End: at(25 * time.Second), Version: 3, Deleted: true},
		{Key: "a", Start: at(0), End: at(25 * time.Second), Version: 3, Valid: true, Result: Summary{3, 11, 11.0 / 3, 1, 8}},
	}, out.Rows)
	out.Reset()

	require.NoError(t, op.Add(ev("a", -20*time.Second, 16), &out)) // -20s + 1m < watermark 50s
	require.Len(t, out.Late, 1)
	assert.Equal(t, at(-20*time.Second), out.Late[0].Start)
	assert.Empty(t, out.Rows)
	op.EndInput(&out)
	assert.Equal(t, []Row[Summary]{
		{Key: "a", Start: at(50 * time.Second), End: at(60 * time.Second), Version: 1, Valid: true, Result: Summary{1, 4, 4, 4, 4}},
	}, out.Rows)
}

// A late event that extends a fired session past the watermark re-opens
// it: the table gets the merged session at once as an early row, then its
// final row when the watermark passes the new end.
func TestSessionExtendedPastWatermark(t *testing.T) {
	op := newSession(t, 10*time.Second, Options{MaxOutOfOrderness: -1, AllowedLateness: time.Minute})
	var out Output[float64, Summary]
	for _, e := range []Event[float64]{ev("a", 0, 1), ev("b", 12*time.Second, 0), ev("a", 5*time.Second, 2)} {
		require.NoError(t, op.Add(e, &out))
	}
	require.Len(t, out.Rows, 2)
	assert.Equal(t, at(15*time.Second), out.Rows[1].End)
	assert.True(t, out.Rows[1].Early, "[0s, 15s) is open again at watermark 12s")
	out.Reset()
	require.NoError(t, op.Add(ev("b", 20*time.Second, 0), &out))
	assert.Equal(t, []Row[Summary]{
		{Key: "a", Start: at(0), End: at(15 * time.Second), Version: 2, Valid: true, Result: Summary{2, 3, 1.5, 1, 2}},
	}, out.Rows)
}

// Stopping mid-stream, restoring the snapshot into a new operator and
// continuing gives the same rows and the same final snapshot as never
// stopping, at every cut point tried.
func TestSessionSnapshotRoundTrip(t *testing.T) {
	ctx := context.Background()
	opts := Options{MaxOutOfOrderness: 5 * time.Second, AllowedLateness: 20 * time.Second, Early: EarlyFiring{Every: 3}}
	evs := sessionStream(7, 300, 40*time.Second) // some late events too
	whole := newSession(t, 10*time.Second, opts)
	var want Output[float64, Summary]
	for _, e := range evs {
		require.NoError(t, whole.Add(e, &want))
	}
	wantSnap, err := whole.Snapshot(ctx, 1)
	require.NoError(t, err)
	whole.EndInput(&want)
	require.NotEmpty(t, want.Late)

	for _, cut := range []int{1, 50, 150, 299} {
		first := newSession(t, 10*time.Second, opts)
		var got Output[float64, Summary]
		for _, e := range evs[:cut] {
			require.NoError(t, first.Add(e, &got))
		}
		snap, err := first.Snapshot(ctx, 1)
		require.NoError(t, err)
		second := newSession(t, 10*time.Second, opts)
		require.NoError(t, second.Restore(ctx, snap))
		again, err := second.Snapshot(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, snap, again, "restore then snapshot is the identity")
		for _, e := range evs[cut:] {
			require.NoError(t, second.Add(e, &got))
		}
		gotSnap, err := second.Snapshot(ctx, 3)
		require.NoError(t, err)
		assert.Equal(t, wantSnap, gotSnap, "cut %d", cut)
		second.EndInput(&got)
		assert.Equal(t, want, got, "cut %d", cut)
	}
}

// The version 3 (session) snapshot format does not change silently, a
// version 2 snapshot (before touching sessions merged and floors were kept)
// still loads, and a session snapshot refuses to load into a window
// operator and vice versa.
func TestRestoreSessionSnapshotVersions(t *testing.T) {
	ctx := context.Background()
	opts := Options{MaxOutOfOrderness: 5 * time.Second, AllowedLateness: 20 * time.Second}
	evs := sessionStream(11, 200, 40*time.Second)
	fresh := newSession(t, 10*time.Second, opts)
	var out Output[float64, Summary]
	for _, e := range evs[:100] {
		require.NoError(t, fresh.Add(e, &out))
	}
	snap, err := fresh.Snapshot(ctx, 1)
	require.NoError(t, err)
	v3 := golden.Check(t, "v3-session-stats.snap", snap)
	v2, err := os.ReadFile("testdata/v2-session-stats.snap")
	require.NoError(t, err)

	fromV3 := newSession(t, 10*time.Second, opts)
	require.NoError(t, fromV3.Restore(ctx, v3))
	fromV2 := newSession(t, 10*time.Second, opts)
	require.NoError(t, fromV2.Restore(ctx, v2))
	var a, b, c Output[float64, Summary]
	for _, e := range evs[100:] {
		require.NoError(t, fromV3.Add(e, &a))
		require.NoError(t, fresh.Add(e, &b))
		require.NoError(t, fromV2.Add(e, &c))
	}
	assert.Equal(t, b, a)
	assert.NotEmpty(t, a.Rows)
	assert.Equal(t, b, c, "this stream has no sessions gap apart and no event the floors decide")

	for _, snap := range [][]byte{v2, v3} {
		assert.ErrorIs(t, newStats(t).Restore(ctx, snap), ErrIncompatible)
		assert.ErrorIs(t, newSession(t, 11*time.Second, opts).Restore(ctx, snap), ErrIncompatible)
		// Every truncation is refused as corrupt and loads nothing.
		for n := range len(snap) {
			op := newSession(t, 10*time.Second, opts)
			err := op.Restore(ctx, snap[:n])
			require.Error(t, err, "prefix %d", n)
			_, ok := op.Watermark()
			require.False(t, ok)
		}
	}
	v1, err := os.ReadFile("testdata/v1-hopping-stats.snap")
	require.NoError(t, err)
	assert.ErrorIs(t, newSession(t, 10*time.Second, opts).Restore(ctx, v1), ErrIncompatible)
}

func TestSessionSpecValidation(t *testing.T) {
	for _, spec := range []Spec{Session(0), Session(-time.Second), {Size: time.Minute, Slide: time.Minute, Gap: time.Second}, Session(10 * 365 * 24 * time.Hour)} {
		_, err := New(spec, Stats{}, Options{})
		assert.ErrorIs(t, err, ErrInvalidOptions, "%+v", spec)
	}
	_, err := New(Session(time.Second), Stats{}, Options{})
	assert.NoError(t, err)
}

// Neutral elements: a session of an average holds samples, so it is
// Valid; the aggregator's Merge of Identity leaves a session unchanged.
func TestSessionAvgNeutral(t *testing.T) {
	op, err := New(Session(10*time.Second), Avg[float64]{}, Options{MaxOutOfOrderness: -1, AllowedLateness: time.Minute})
	require.NoError(t, err)
	var out Output[float64, float64]
	for _, e := range []Event[float64]{ev("a", 0, 0), ev("a", 15*time.Second, 6), ev("a", 30*time.Second, 0), ev("a", 8*time.Second, 3)} {
		require.NoError(t, op.Add(e, &out))
	}
	last := out.Rows[len(out.Rows)-1]
	assert.Equal(t, Row[float64]{Key: "a", Start: at(0), End: at(25 * time.Second), Version: 3, Valid: true, Result: 3}, last)
}

// When an early row's session moves its start (an out-of-order event
// before it), the retraction comes with the merged session's row at once:
// the table never goes without the events it showed.
func TestSessionRetractionComesWithMergedRow(t *testing.T) {
	op := newSession(t, 10*time.Second, Options{MaxOutOfOrderness: 5 * time.Second, Early: EarlyFiring{Every: 2}})
	var out Output[float64, Summary]
	for _, e := range []Event[float64]{ev("a", 5*time.Second, 1), ev("a", 6*time.Second, 1)} {
		require.NoError(t, op.Add(e, &out))
	}
	require.Len(t, out.Rows, 1)
	assert.True(t, out.Rows[0].Early)
	out.Reset()
	require.NoError(t, op.Add(ev("a", 2*time.Second, 1), &out))
	assert.Equal(t, []Row[Summary]{
		{Key: "a", Start: at(5 * time.Second), End: at(16 * time.Second), Version: 3, Deleted: true},
		{Key: "a", Start: at(2 * time.Second), End: at(16 * time.Second), Version: 3, Valid: true, Result: Summary{3, 3, 1, 1, 1}, Early: true},
	}, out.Rows)
	assert.Len(t, table(out.Rows), 1)
}

func FuzzRestoreSession(f *testing.F) {
	ctx := context.Background()
	opts := Options{MaxOutOfOrderness: 2 * time.Second, AllowedLateness: 5 * time.Second}
	op := newSession(f, 10*time.Second, opts)
	var out Output[float64, Summary]
	for _, e := range sessionStream(3, 100, 40*time.Second) {
		_ = op.Add(e, &out)
	}
	snap, _ := op.Snapshot(ctx, 1)
	f.Add(snap)
	f.Add(snap[:len(snap)-4])
	if v2, err := os.ReadFile("testdata/v2-session-stats.snap"); err == nil {
		f.Add(v2)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sealed := binary.BigEndian.AppendUint32(append([]byte(nil), data...), crc32.Checksum(data, castagnoli))
		for _, give := range [][]byte{data, sealed} {
			op := newSession(t, 10*time.Second, opts)
			if err := op.Restore(ctx, give); err != nil {
				continue
			}
			// Whatever restores snapshots, restores and snapshots again
			// to the same bytes, and keeps working.
			again, err := op.Snapshot(ctx, 1)
			require.NoError(t, err)
			op2 := newSession(t, 10*time.Second, opts)
			require.NoError(t, op2.Restore(ctx, again))
			third, err := op2.Snapshot(ctx, 1)
			require.NoError(t, err)
			require.Equal(t, again, third)
			var out Output[float64, Summary]
			require.NoError(t, op.Add(ev("k", time.Hour, 1), &out))
			op.EndInput(&out)
		}
	})
}
