package chsink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// TestParticipantConformance runs the checkpoint.AsyncParticipant suite
// (and with it the Participant suite) on a real ClickHouse. Each participant has a journal of its own; input n adds
// the rows of offsets 0..12-2n, so a state of a smaller n covers the journal
// of a larger one and restoring it over that participant leaves nothing to
// replay.
func TestParticipantConformance(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	// The state of the same table's sink for another partition.
	other, err := chsink.New(ctx, chsink.Table{Addr: env.addr, Name: "events"}, checkpoint.TopicPartition{Topic: "events", Partition: 1},
		checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: env.db})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	require.NoError(t, other.Add(ctx, sink.Position{Offset: 1}, rowsOf(1)[0]))
	foreign, err := other.Snapshot(ctx, 1)
	require.NoError(t, err)

	fill := func(t *testing.T, s *chsink.Sink[event], from, to int64) {
		for o := from; o <= to; o++ {
			for i, r := range rowsOf(o) {
				require.NoError(t, s.Add(ctx, sink.Position{Offset: o, Index: uint32(i)}, r))
			}
		}
	}
	checkpointtest.TestAsyncParticipant(t, checkpointtest.AsyncParticipant{Participant: checkpointtest.Participant{
		New: func(t *testing.T) checkpoint.Participant {
			return env.newSink(t, checkpoint.NewMemoryStorage(), chsink.Options{})
		},
		Fill: func(t *testing.T, p checkpoint.Participant, n int) {
			fill(t, p.(*chsink.Sink[event]), 0, int64(12-2*n))
		},
		Refused: []error{chsink.ErrCorrupt, chsink.ErrUnsupportedVersion, chsink.ErrIncompatible},
		Foreign: [][]byte{
			foreign,
			// A later version of this very sink's state.
			fmt.Appendf(nil, `{"v":2,"table":"%s.events","topic":"events","partition":0,"has_covered":true,`+
				`"covered":{"o":3,"i":0},"pending":{"count":0,"first":{"o":0,"i":0},"last":{"o":0,"i":0}}}`, env.db),
		},
	},
		// The records after the barrier: three more offsets.
		After: func(t *testing.T, p checkpoint.Participant, n int) {
			fill(t, p.(*chsink.Sink[event]), int64(13-2*n), int64(15-2*n))
		},
	})
}
