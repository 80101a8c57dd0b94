package windowsink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/window"
)

const sessionTable = `CREATE TABLE %s (key String, start DateTime64(3, 'UTC'), end DateTime64(3, 'UTC'),
	events UInt64, version UInt64, deleted UInt8)
	ENGINE = ReplacingMergeTree(version, deleted) ORDER BY (key, start)
	SETTINGS non_replicated_deduplication_window = 10000`

// run is one process of a chain writing sessions: an operator on a clock
// of the test's, its window sink and its checkpoint task. A crash is
// close without a checkpoint: what the sink flushed stays in ClickHouse,
// the rest of the process's state is lost.
type run struct {
	t     *testing.T
	ws    *windowsink.Sink[int, uint64, uint64]
	task  *checkpoint.Task
	coord *checkpoint.Coordinator
	stop  context.CancelFunc
	ran   chan struct{}
}

func startRun(t *testing.T, addr, db, table string, storage checkpoint.Storage, op *window.Operator[int, uint64, uint64]) *run {
	t.Helper()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 2})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	ws, err := windowsink.New(t.Context(), chsink.Table{Addr: addr, Name: table}, killSrc, storage, op, sessionColumns,
		windowsink.Options{Sink: chsink.Options{Database: db, MaxDelay: 50 * time.Millisecond, KeepCheckpoints: 2}})
	require.NoError(t, err)
	task, err := coord.Attach(t.Context(), killSrc, map[string]checkpoint.Participant{"sessions": ws})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(t.Context())
	r := &run{t: t, ws: ws, task: task, coord: coord, stop: stop, ran: make(chan struct{})}
	go func() {
		defer close(r.ran)
		_ = ws.Run(ctx) // the flush timer, which also finishes a replay that came up short
	}()
	return r
}

// close ends the run without a checkpoint.
func (r *run) close() {
	r.task.Detach()
	r.stop()
	<-r.ran
	require.NoError(r.t, r.ws.Close())
	r.coord.Close()
}

// A session shown early by a Tick reaches ClickHouse; the process dies
// before the next checkpoint (or before its first); the replay has no Tick
// there, so it never shows the session, and a later event merges it into
// the one before it. The table must not keep the merged-away session: its
// row is retracted because the table may hold it (the journal past the
// checkpoint says so), not because this process happened to show it.
func TestRetractSessionShownByATickBeforeACrash(t *testing.T) {
	tests := []struct {
		name       string
		checkpoint bool // after the first two events
	}{
		{"after a checkpoint", true},
		{"before the first checkpoint", false},
	}
	addr, db := testkit.ClickHouse(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := fmt.Sprintf("sessions%d", i)
			require.NoError(t, testkit.Exec(t.Context(), addr, db, fmt.Sprintf(sessionTable, table)))
			retractShownByATick(t, addr, db, table, tt.checkpoint)
		})
	}
}

func retractShownByATick(t *testing.T, addr, db, table string, withCheckpoint bool) {
	storage := checkpoint.NewMemoryStorage()
	const gap = 10 * time.Second
	at := func(s int) time.Time { return time.Date(2026, 10, 28, 10, 0, s, 0, time.UTC) }
	events := []window.Event[int]{
		{Key: "k", Time: at(0), Value: 0},  // S1 [0, 10)
		{Key: "k", Time: at(20), Value: 1}, // S2 [20, 30)
		{Key: "k", Time: at(25), Value: 2}, // S2 [20, 35)
		{Key: "k", Time: at(10), Value: 3}, // bridges S1 and S2: [0, 35)
	}
	clock := time.Date(2026, 10, 28, 11, 0, 0, 0, time.UTC)
	newOp := func() *window.Operator[int, uint64, uint64] {
		op, err := window.New(window.Session(gap), window.Count[int]{}, window.Options{
			MaxOutOfOrderness: time.Hour, // nothing fires before EndInput
			IdleTimeout:       -1,
			Early:             window.EarlyFiring{Interval: time.Minute},
			Now:               func() time.Time { return clock },
		})
		require.NoError(t, err)
		return op
	}
	query := "SELECT key, toString(start), toString(end), toString(events), toString(version) FROM " + table + " FINAL ORDER BY key, start"

	// The first process: S1 and S2 begin (a checkpoint), an event, a Tick
	// that shows both sessions early, their rows flushed to ClickHouse,
	// then a crash before the next checkpoint.
	r := startRun(t, addr, db, table, storage, newOp())
	for i, ev := range events[:2] {
		require.NoError(t, r.ws.Add(t.Context(), int64(i), ev))
	}
	if withCheckpoint {
		require.NoError(t, r.task.Checkpoint(t.Context(), nil, 2, checkpoint.Meta{}, nil))
	}
	require.NoError(t, r.ws.Add(t.Context(), 2, events[2]))
	clock = clock.Add(time.Minute)
	require.NoError(t, r.ws.Tick(t.Context()))
	_, err := r.ws.Snapshot(t.Context(), 1000) // flushes: the rows land, and no checkpoint records it
	require.NoError(t, err)
	r.close()
	require.Equal(t, [][]string{
		{"k", "2026-10-28 10:00:00.000", "2026-10-28 10:00:10.000", "1", "1"},
		{"k", "2026-10-28 10:00:20.000", "2026-10-28 10:00:35.000", "2", "2"},
	}, testkit.Rows(t, addr, db, query), "the early rows of S1 and S2 are in the table")

	// The replay: no Tick, the bridging event, the end of the input.
	r = startRun(t, addr, db, table, storage, newOp())
	next := int64(0)
	if withCheckpoint {
		require.NotNil(t, r.task.Restored())
		next = r.task.Restored().NextOffset
		require.EqualValues(t, 2, next)
	} else {
		require.Nil(t, r.task.Restored())
	}
	for i := next; i < int64(len(events)); i++ {
		require.NoError(t, r.ws.Add(t.Context(), i, events[i]))
	}
	require.NoError(t, r.ws.EndInput(t.Context()))
	require.NoError(t, r.task.Checkpoint(t.Context(), nil, int64(len(events)), checkpoint.Meta{}, nil))
	r.close()

	require.Equal(t, [][]string{{"k", "2026-10-28 10:00:00.000", "2026-10-28 10:00:35.000", "4", "4"}},
		testkit.Rows(t, addr, db, query), "FINAL holds the operator's one session")
}
