package windowsink_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/window"
)

// TestParticipantConformance runs the checkpoint.Participant suite on a
// window sink over a real ClickHouse. Each sink has a journal of its own;
// input n adds the events of offsets 0..12-2n, so a state of a smaller n
// covers the journal of a larger one (as in chsink's conformance test),
// and closes some windows, so the operator, the cursor and the chsink
// journal all reach the state.
func TestParticipantConformance(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	require.NoError(t, testkit.Exec(t.Context(), addr, db, "CREATE TABLE minutes (key String, start DateTime64(3, 'UTC'), "+
		"end DateTime64(3, 'UTC'), events UInt64, version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start) "+
		"SETTINGS non_replicated_deduplication_window = 100"))
	base := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	newSink := func(t *testing.T, spec window.Spec, partition int) *windowsink.Sink[int, uint64, uint64] {
		op, err := window.New(spec, window.Count[int]{}, window.Options{})
		require.NoError(t, err)
		ws, err := windowsink.New(t.Context(), chsink.Table{Addr: addr, Name: "minutes"},
			checkpoint.TopicPartition{Topic: "t", Partition: partition}, checkpoint.NewMemoryStorage(), op, sessionColumns,
			windowsink.Options{Sink: chsink.Options{Database: db}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = ws.Close() })
		return ws
	}
	fill := func(t *testing.T, ws *windowsink.Sink[int, uint64, uint64], n int) {
		for o := range int64(13 - 2*n) {
			ev := window.Event[int]{Key: fmt.Sprintf("k%d", o%2), Time: base.Add(time.Duration(o) * 25 * time.Second), Value: 1}
			require.NoError(t, ws.Add(t.Context(), o, ev))
		}
	}
	foreign := func(spec window.Spec, partition int) []byte {
		ws := newSink(t, spec, partition)
		fill(t, ws, 1)
		b, err := ws.Snapshot(t.Context(), 1)
		require.NoError(t, err)
		return b
	}

	checkpointtest.TestParticipant(t, checkpointtest.Participant{
		New: func(t *testing.T) checkpoint.Participant { return newSink(t, window.Tumbling(time.Minute), 0) },
		Fill: func(t *testing.T, p checkpoint.Participant, n int) {
			fill(t, p.(*windowsink.Sink[int, uint64, uint64]), n)
		},
		Refused: []error{sink.ErrCorrupt, sink.ErrUnsupportedVersion, chsink.ErrCorrupt, chsink.ErrUnsupportedVersion,
			chsink.ErrIncompatible, window.ErrCorrupt, window.ErrUnsupportedVersion, window.ErrIncompatible},
		Foreign: [][]byte{
			foreign(window.Tumbling(time.Minute), 1),                // the sink of another partition
			foreign(window.Hopping(time.Minute, 20*time.Second), 0), // another operator's windows
		},
	})
}
