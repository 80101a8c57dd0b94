package state_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/state"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newValue(t *testing.T, opts state.Options) *state.Value[string, int64] {
	t.Helper()
	v, err := state.NewValue[string, int64](state.String{}, state.Int64{}, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = v.Close() })
	return v
}

func newMap(t *testing.T, opts state.Options) *state.Map[string, string, int64] {
	t.Helper()
	m, err := state.NewMap[string, string, int64](state.String{}, state.String{}, state.Int64{}, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func snapshot(t *testing.T, p checkpoint.Participant) []byte {
	t.Helper()
	b, err := p.Snapshot(context.Background(), 1)
	require.NoError(t, err)
	return b
}

// TestTTL pins the TTL semantics of the package documentation, step by
// step: what Get finds at each time.
func TestTTL(t *testing.T) {
	type step struct {
		op   string // put, get, del
		at   time.Duration
		want bool // get: found; del: was live
	}
	tests := []struct {
		name  string
		opts  state.Options
		steps []step
	}{
		{
			name: "no TTL keeps entries",
			opts: state.Options{},
			steps: []step{
				{op: "put", at: 0},
				{op: "get", at: 1000 * time.Hour, want: true},
			},
		},
		{
			name: "OnCreateAndWrite: reads do not extend",
			opts: state.Options{TTL: time.Hour},
			steps: []step{
				{op: "put", at: 0},
				{op: "get", at: 59 * time.Minute, want: true},
				{op: "get", at: time.Hour - 1, want: true},
				{op: "get", at: time.Hour, want: false},
			},
		},
		{
			name: "OnCreateAndWrite: a write extends",
			opts: state.Options{TTL: time.Hour},
			steps: []step{
				{op: "put", at: 0},
				{op: "put", at: 30 * time.Minute},
				{op: "get", at: 89 * time.Minute, want: true},
				{op: "get", at: 90 * time.Minute, want: false},
			},
		},
		{
			name: "OnReadAndWrite: reads extend",
			opts: state.Options{TTL: time.Hour, UpdateType: state.OnReadAndWrite},
			steps: []step{
				{op: "put", at: 0},
				{op: "get", at: 50 * time.Minute, want: true},
				{op: "get", at: 100 * time.Minute, want: true},
				{op: "get", at: 160 * time.Minute, want: false},
			},
		},
		{
			name: "NeverReturnExpired before cleanup",
			opts: state.Options{TTL: time.Hour, CleanupBudget: 1},
			steps: []step{
				{op: "put", at: 0},
				{op: "del", at: 2 * time.Hour, want: false},
			},
		},
		{
			name: "event time: an earlier time does not move the clock back",
			opts: state.Options{TTL: time.Hour},
			steps: []step{
				{op: "put", at: 0},
				{op: "get", at: 2 * time.Hour, want: false},
				{op: "get", at: 0, want: false},
			},
		},
		{
			name: "delete",
			opts: state.Options{TTL: time.Hour},
			steps: []step{
				{op: "put", at: 0},
				{op: "del", at: time.Minute, want: true},
				{op: "get", at: time.Minute, want: false},
				{op: "del", at: time.Minute, want: false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newValue(t, tt.opts)
			for i, s := range tt.steps {
				switch s.op {
				case "put":
					require.NoError(t, v.Put("k", int64(i), t0.Add(s.at)))
				case "get":
					_, ok := v.Get("k", t0.Add(s.at))
					assert.Equal(t, s.want, ok, "step %d: get at %v", i, s.at)
				case "del":
					assert.Equal(t, s.want, v.Delete("k", t0.Add(s.at)), "step %d: delete at %v", i, s.at)
				}
			}
		})
	}
}

func TestProcessingTime(t *testing.T) {
	now := t0
	v := newValue(t, state.Options{TTL: time.Hour, TimeCharacteristic: state.ProcessingTime, Now: func() time.Time { return now }})
	require.NoError(t, v.Put("k", 1, time.Time{})) // the time passed is ignored
	now = now.Add(59 * time.Minute)
	_, ok := v.Get("k", t0.Add(1000*time.Hour))
	assert.True(t, ok, "ProcessingTime read the time passed in")
	now = now.Add(time.Minute)
	assert.Equal(t, 1, v.Cleanup(10), "Cleanup reads Now and removes what expired while idle")
	assert.Equal(t, 0, v.Len())
}

func TestInvalidOptions(t *testing.T) {
	tests := []struct {
		name string
		opts state.Options
	}{
		{name: "negative TTL", opts: state.Options{TTL: -1}},
		{name: "TTL too long", opts: state.Options{TTL: state.MaxTTL + 1}},
		{name: "Now with EventTime", opts: state.Options{Now: time.Now}},
		{name: "unknown UpdateType", opts: state.Options{UpdateType: 7}},
		{name: "unknown TimeCharacteristic", opts: state.Options{TimeCharacteristic: 7}},
		{name: "negative MaxKeys", opts: state.Options{MaxKeys: -1}},
		{name: "negative CleanupBudget", opts: state.Options{CleanupBudget: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := state.NewValue[string, int64](state.String{}, state.Int64{}, tt.opts)
			assert.ErrorIs(t, err, state.ErrInvalidOptions)
		})
	}
	_, err := state.NewValue[string, int64](nil, state.Int64{}, state.Options{})
	assert.ErrorIs(t, err, state.ErrInvalidOptions)
}

// TestMaxKeys: at the cap a new key is refused and nothing changes (not
// even the clock), an existing key may still be written, and an expired
// entry makes room.
func TestMaxKeys(t *testing.T) {
	v := newValue(t, state.Options{TTL: time.Hour, MaxKeys: 2})
	require.NoError(t, v.Put("a", 1, t0))
	require.NoError(t, v.Put("b", 2, t0.Add(time.Minute)))
	before := snapshot(t, v)
	assert.ErrorIs(t, v.Put("c", 3, t0.Add(30*time.Minute)), state.ErrFull)
	assert.Equal(t, before, snapshot(t, v), "a refused Put changed the state")
	require.NoError(t, v.Put("a", 10, t0.Add(30*time.Minute)), "an existing key at the cap")
	// At 61 minutes b has expired (a was rewritten at 30): c takes its place.
	require.NoError(t, v.Put("c", 3, t0.Add(61*time.Minute)))
	_, ok := v.Get("b", t0.Add(61*time.Minute))
	assert.False(t, ok)
	got, ok := v.Get("a", t0.Add(61*time.Minute))
	assert.True(t, ok)
	assert.Equal(t, int64(10), got)

	// Restore refuses a snapshot holding more than MaxKeys.
	big := newValue(t, state.Options{})
	for i := range 3 {
		require.NoError(t, big.Put(fmt.Sprint(i), 0, t0))
	}
	small := newValue(t, state.Options{MaxKeys: 2})
	assert.ErrorIs(t, small.Restore(context.Background(), snapshot(t, big)), state.ErrFull)
}

// TestCleanupFreesInExpiryOrder: expired entries go without a scan, also
// when keys are rewritten many times (stale queue items), and memory
// follows the live entries.
func TestCleanupFreesInExpiryOrder(t *testing.T) {
	var rebuilds countingHandler
	v := newValue(t, state.Options{TTL: time.Minute, Logger: slog.New(&rebuilds)})
	for i := range 10_000 {
		require.NoError(t, v.Put(fmt.Sprint(i%100), int64(i), t0.Add(time.Duration(i)*time.Millisecond)))
	}
	assert.Equal(t, 100, v.Len())
	// 10 000 writes of 100 keys leave 9 900 stale queue items unless the
	// queue is rebuilt (past 1 024 items and twice the entries).
	assert.Positive(t, rebuilds.n.Load(), "the expiry queue was never rebuilt: stale items pile up")
	// Ten minutes later every entry has expired; Cleanup removes them all.
	_, ok := v.Get("0", t0.Add(10*time.Minute))
	assert.False(t, ok)
	v.Cleanup(math.MaxInt)
	assert.Equal(t, 0, v.Len())
}

// TestSameStateSameBytes: the order of the writes, deletions, expired
// entries and the TTL setting do not reach the bytes.
func TestSameStateSameBytes(t *testing.T) {
	a := newValue(t, state.Options{TTL: time.Hour})
	b := newValue(t, state.Options{TTL: time.Hour})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	for _, k := range keys {
		require.NoError(t, a.Put(k, int64(len(k)), t0))
	}
	require.NoError(t, b.Put("expired", 1, t0.Add(-2*time.Hour)))
	require.NoError(t, b.Put("gone", 1, t0))
	for _, i := range rand.Perm(len(keys)) {
		require.NoError(t, b.Put(keys[i], -1, t0))
	}
	for _, k := range keys {
		require.NoError(t, b.Put(k, int64(len(k)), t0))
	}
	b.Delete("gone", t0)
	assert.Equal(t, snapshot(t, a), snapshot(t, b))
}

func TestAmbiguousKeyFailsSnapshot(t *testing.T) {
	v, err := state.NewValue[float64, int64](state.Float64{}, state.Int64{}, state.Options{})
	require.NoError(t, err)
	require.NoError(t, v.Put(math.NaN(), 1, t0))
	require.NoError(t, v.Put(math.NaN(), 2, t0)) // NaN != NaN: a second entry
	_, err = v.Snapshot(context.Background(), 1)
	assert.ErrorIs(t, err, state.ErrAmbiguousKey)
}

func TestMap(t *testing.T) {
	m := newMap(t, state.Options{TTL: time.Hour})
	require.NoError(t, m.Put("repo-1", "pr-1", 1, t0))
	require.NoError(t, m.Put("repo-1", "pr-2", 2, t0.Add(30*time.Minute)))
	require.NoError(t, m.Put("repo-2", "pr-1", 3, t0.Add(30*time.Minute)))
	all := func(k string, at time.Duration) map[string]int64 {
		got := map[string]int64{}
		for uk, v := range m.All(k, t0.Add(at)) {
			got[uk] = v
		}
		return got
	}
	assert.Equal(t, map[string]int64{"pr-1": 1, "pr-2": 2}, all("repo-1", 30*time.Minute))
	assert.Equal(t, map[string]int64{"pr-2": 2}, all("repo-1", 61*time.Minute), "pr-1 expired")
	v, ok := m.Get("repo-2", "pr-1", t0.Add(61*time.Minute))
	assert.True(t, ok)
	assert.Equal(t, int64(3), v)
	assert.Equal(t, 1, m.Clear("repo-1", t0.Add(61*time.Minute)))
	assert.Empty(t, all("repo-1", 61*time.Minute))

	// Restore rebuilds the user-key index.
	b := snapshot(t, m)
	n := newMap(t, state.Options{TTL: time.Hour})
	require.NoError(t, n.Restore(context.Background(), b))
	got := map[string]int64{}
	for uk, v := range n.All("repo-2", t0.Add(61*time.Minute)) {
		got[uk] = v
	}
	assert.Equal(t, map[string]int64{"pr-1": 3}, got)
	assert.Equal(t, 1, n.Clear("repo-2", t0.Add(61*time.Minute)))
	assert.Equal(t, 0, n.Len())
}

// TestKindsDoNotMix: a Map's snapshot is refused by a Value and the other
// way round.
func TestKindsDoNotMix(t *testing.T) {
	ctx := context.Background()
	v := newValue(t, state.Options{})
	m := newMap(t, state.Options{})
	require.NoError(t, v.Put("a", 1, t0))
	require.NoError(t, m.Put("a", "b", 1, t0))
	assert.ErrorIs(t, v.Restore(ctx, snapshot(t, m)), state.ErrIncompatible)
	assert.ErrorIs(t, m.Restore(ctx, snapshot(t, v)), state.ErrIncompatible)
}

func TestClosed(t *testing.T) {
	v := newValue(t, state.Options{})
	require.NoError(t, v.Close())
	require.NoError(t, v.Close())
	assert.ErrorIs(t, v.Put("a", 1, t0), state.ErrClosed)
	_, ok := v.Get("a", t0)
	assert.False(t, ok)
	_, err := v.Snapshot(context.Background(), 1)
	assert.ErrorIs(t, err, state.ErrClosed)
	assert.ErrorIs(t, v.Restore(context.Background(), nil), state.ErrClosed)
}

// TestModel drives a Value and a plain map with expiries (the model) with
// the same random operations, snapshots and restores: every Get answers as
// the model does.
func TestModel(t *testing.T) {
	ctx := context.Background()
	for _, ut := range []state.UpdateType{state.OnCreateAndWrite, state.OnReadAndWrite} {
		t.Run(ut.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(ut)))
			const ttl = 100 * time.Second
			opts := state.Options{TTL: ttl, UpdateType: ut, CleanupBudget: 2}
			v := newValue(t, opts)
			type ent struct {
				v   int64
				exp time.Time
			}
			model := map[string]ent{}
			clock := t0
			for i := range 20_000 {
				at := clock.Add(time.Duration(rng.IntN(3000)-1000) * time.Millisecond)
				if at.After(clock) {
					clock = at
				}
				k := fmt.Sprint(rng.IntN(300))
				switch op := rng.IntN(10); {
				case op < 4:
					require.NoError(t, v.Put(k, int64(i), at))
					model[k] = ent{v: int64(i), exp: clock.Add(ttl)}
				case op < 8:
					got, ok := v.Get(k, at)
					e, live := model[k]
					live = live && clock.Before(e.exp)
					require.Equal(t, live, ok, "op %d: get %s", i, k)
					if live {
						require.Equal(t, e.v, got, "op %d: get %s", i, k)
						if ut == state.OnReadAndWrite {
							model[k] = ent{v: e.v, exp: clock.Add(ttl)}
						}
					}
				case op < 9:
					e, live := model[k]
					require.Equal(t, live && clock.Before(e.exp), v.Delete(k, at), "op %d: delete %s", i, k)
					delete(model, k)
				default:
					b := snapshot(t, v)
					v = newValue(t, opts)
					require.NoError(t, v.Restore(ctx, b))
					require.Equal(t, b, snapshot(t, v))
				}
			}
		})
	}
}

// countingHandler counts the log records it gets.
type countingHandler struct{ n atomic.Int32 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
