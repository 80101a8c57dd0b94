package window

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Lateness is judged on the merged session, as Flink's WindowOperator
// judges it after MergingWindowSet.addWindow: an event whose own [t,
// t+gap) is behind the watermark but which joins a session still open is
// kept, with zero lateness and with some.
func TestSessionEventJoiningOpenSessionIsNotLate(t *testing.T) {
	for _, lateness := range []time.Duration{0, 10 * time.Millisecond} {
		op := newSession(t, 3*time.Second, Options{MaxOutOfOrderness: -1, AllowedLateness: lateness})
		var out Output[float64, Summary]
		for _, e := range []Event[float64]{
			ev("a", 10*time.Second, 1),
			ev("a", 7500*time.Millisecond, 2), // [7.5s, 10.5s) is behind watermark 10s, joins [10s, 13s)
			ev("a", 7*time.Second, 4),         // extends the merged session back again
		} {
			require.NoError(t, op.Add(e, &out))
		}
		require.Empty(t, out.Late, "lateness %v", lateness)
		op.EndInput(&out)
		assert.Equal(t, map[rowKey]Row[Summary]{
			{"a", at(7 * time.Second)}: {Key: "a", Start: at(7 * time.Second), End: at(13 * time.Second), Version: 3, Valid: true, Result: Summary{3, 7, 7.0 / 3, 1, 4}},
		}, table(out.Rows), "lateness %v", lateness)
	}
}

// Where Flink would keep an event that joins an open session but also
// reaches a session already closed and forgotten (and so write a session
// overlapping that one's row), the event is late: the table never holds
// two overlapping or touching sessions of a key.
func TestSessionEventReachingForgottenSessionIsLate(t *testing.T) {
	op := newSession(t, 3*time.Second, Options{MaxOutOfOrderness: -1})
	var out Output[float64, Summary]
	for _, e := range []Event[float64]{
		ev("a", 0, 1),                     // [0s, 3s)
		ev("b", 4*time.Second, 1),         // watermark 4s: a's [0s, 3s) fires and closes
		ev("a", 5*time.Second, 1),         // [5s, 8s), open
		ev("a", 2500*time.Millisecond, 1), // would join [5s, 8s), overlaps [0s, 3s)
		ev("a", 3*time.Second, 1),         // would join [5s, 8s), touches [0s, 3s)
	} {
		require.NoError(t, op.Add(e, &out))
	}
	require.Len(t, out.Late, 2)
	require.NoError(t, op.Add(ev("a", 3500*time.Millisecond, 8), &out)) // 3.5 s after a's last closed event: joins [5s, 8s)
	assert.Len(t, out.Late, 2)
	op.EndInput(&out)
	got := table(out.Rows)
	assert.Equal(t, Row[Summary]{Key: "a", Start: at(3500 * time.Millisecond), End: at(8 * time.Second), Version: 2, Valid: true, Result: Summary{2, 9, 4.5, 1, 8}},
		got[rowKey{"a", at(3500 * time.Millisecond)}])
	assert.Len(t, got, 3)
}

// Events exactly gap apart are in one session, as Flink's TimeWindow
// merges windows that touch.
func TestSessionEventsGapApartMerge(t *testing.T) {
	op := newSession(t, 10*time.Second, Options{MaxOutOfOrderness: time.Minute})
	var out Output[float64, Summary]
	for _, e := range []Event[float64]{ev("a", 0, 1), ev("a", 20*time.Second, 2), ev("a", 10*time.Second, 4)} {
		require.NoError(t, op.Add(e, &out))
	}
	op.EndInput(&out)
	assert.Equal(t, map[rowKey]Row[Summary]{
		{"a", at(0)}: {Key: "a", Start: at(0), End: at(30 * time.Second), Version: 3, Valid: true, Result: Summary{3, 7, 7.0 / 3, 1, 4}},
	}, table(out.Rows))
}

// A merge that carries a session's count across a multiple of Every emits
// an early row, as Flink's CountTrigger fires on a merged count of at
// least its maximum: 3 + 3 + 1 under Every 4, 2 + 2 + 1 under Every 3.
func TestSessionMergeCrossingEveryEmitsEarly(t *testing.T) {
	tests := []struct {
		every     uint64
		left      []time.Duration
		right     []time.Duration
		bridge    time.Duration
		wantCount uint64
	}{
		{4, []time.Duration{0, time.Second, 2 * time.Second}, []time.Duration{20 * time.Second, 21 * time.Second, 22 * time.Second}, 11 * time.Second, 7},
		{3, []time.Duration{0, time.Second}, []time.Duration{20 * time.Second, 21 * time.Second}, 11 * time.Second, 5},
	}
	for _, tt := range tests {
		op := newSession(t, 10*time.Second, Options{MaxOutOfOrderness: time.Hour, Early: EarlyFiring{Every: tt.every}})
		var out Output[float64, Summary]
		for _, d := range append(tt.left, tt.right...) {
			require.NoError(t, op.Add(ev("a", d, 1), &out))
		}
		require.Empty(t, out.Rows, "every %d: no session reached it", tt.every)
		require.NoError(t, op.Add(ev("a", tt.bridge, 1), &out))
		require.Len(t, out.Rows, 1, "every %d", tt.every)
		assert.Equal(t, Row[Summary]{Key: "a", Start: at(0), End: at(tt.right[len(tt.right)-1] + 10*time.Second), Version: tt.wantCount, Early: true, Valid: true,
			Result: Summary{tt.wantCount, float64(tt.wantCount), 1, 1, 1}}, out.Rows[0], "every %d", tt.every)
	}
}

// After EndInput nothing is pending, sessions as windows: NextTick says so.
func TestSessionNoWakeUpAfterEndInput(t *testing.T) {
	op := newSession(t, 10*time.Second, Options{MaxOutOfOrderness: time.Minute, IdleTimeout: -1, Early: EarlyFiring{Interval: 5 * time.Millisecond}})
	var out Output[float64, Summary]
	require.NoError(t, op.Add(ev("a", 0, 1), &out))
	_, ok := op.NextTick()
	require.True(t, ok, "the open session is due an early firing")
	op.EndInput(&out)
	require.Len(t, out.Rows, 1)
	next, ok := op.NextTick()
	assert.False(t, ok, "woken at %v with nothing open", next)
}

// A key whose sessions all closed stays as a tombstone until its floor can
// refuse nothing (gap + lateness of watermark later), then is forgotten; a
// session it opens afterwards cannot be extended back beyond the watermark
// of its opening minus lateness and gap (the documented difference).
func TestSessionForgottenKeyFloor(t *testing.T) {
	op := newSession(t, 3*time.Second, Options{MaxOutOfOrderness: -1})
	var out Output[float64, Summary]
	add := func(key string, d time.Duration) {
		t.Helper()
		require.NoError(t, op.Add(ev(key, d, 1), &out))
	}
	add("a", 0)
	add("b", 4*time.Second) // a's [0s, 3s) closes: a is a tombstone
	require.Contains(t, op.sessions, "a")
	add("b", 7*time.Second) // watermark 7s > 3s + 3s: a is forgotten
	require.NotContains(t, op.sessions, "a")
	add("a", 10*time.Second)        // floor 7s - 3s = 4s
	add("a", 7500*time.Millisecond) // joins [10s, 13s)
	add("a", 4500*time.Millisecond) // touches [7.5s, 13s): joins it
	require.Empty(t, out.Late)
	add("a", 3900*time.Millisecond) // would start the session at or before the floor
	require.Len(t, out.Late, 1)
	op.EndInput(&out)
	assert.Equal(t, Row[Summary]{Key: "a", Start: at(4500 * time.Millisecond), End: at(13 * time.Second), Version: 3, Valid: true, Result: Summary{3, 3, 1, 1, 1}},
		table(out.Rows)[rowKey{"a", at(4500 * time.Millisecond)}])
	assert.Empty(t, op.sessions, "EndInput forgets every key")
}
