package window_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/window"
)

func TestParticipantConformance(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	newOp := func(t *testing.T, spec window.Spec) *window.Operator[string, uint64, uint64] {
		op, err := window.New(spec, window.Count[string]{}, window.Options{MaxOutOfOrderness: time.Minute})
		require.NoError(t, err)
		return op
	}
	fill := func(t *testing.T, op *window.Operator[string, uint64, uint64], n int) {
		var out window.Output[string, uint64]
		for i := range 20 + n {
			ev := window.Event[string]{Key: fmt.Sprintf("k%d", i%(3+n)), Time: t0.Add(time.Duration(i*7) * time.Second), Value: "x"}
			require.NoError(t, op.Add(ev, &out))
		}
	}
	// The state of an operator with other windows.
	hopping := newOp(t, window.Hopping(time.Minute, 20*time.Second))
	fill(t, hopping, 1)
	foreign, err := hopping.Snapshot(context.Background(), 1)
	require.NoError(t, err)

	checkpointtest.TestParticipant(t, checkpointtest.Participant{
		New: func(t *testing.T) checkpoint.Participant { return newOp(t, window.Tumbling(time.Minute)) },
		Fill: func(t *testing.T, p checkpoint.Participant, n int) {
			fill(t, p.(*window.Operator[string, uint64, uint64]), n)
		},
		Refused: []error{window.ErrCorrupt, window.ErrUnsupportedVersion, window.ErrIncompatible},
		Foreign: [][]byte{foreign},
	})
}
