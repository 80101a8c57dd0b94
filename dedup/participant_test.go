package dedup_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/dedup"
)

// TestParticipantConformance runs the asynchronous participant suite (and
// with it the synchronous one) on full snapshots; incremental ones attach
// to a Store (their deltas are objects) and run through a Coordinator in
// incremental_test.go.
func TestParticipantConformance(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	newDedup := func(t *testing.T, opts dedup.Options) *dedup.Deduplicator {
		d, err := dedup.New(time.Hour, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	fill := func(t *testing.T, d *dedup.Deduplicator, n int) {
		for i := range 50 + n {
			_, err := d.Observe(fmt.Appendf(nil, "key-%d-%d", n, i), t0.Add(time.Duration(i)*time.Second))
			require.NoError(t, err)
		}
	}
	// An exact deduplicator refuses a snapshot of fingerprints only.
	fp := newDedup(t, dedup.Options{})
	fill(t, fp, 3)
	fingerprints, err := fp.Snapshot(context.Background(), 1)
	require.NoError(t, err)

	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprintf("ExactKeys=%v", exact), func(t *testing.T) {
			var foreign [][]byte
			if exact {
				foreign = append(foreign, fingerprints)
			}
			checkpointtest.TestAsyncParticipant(t, checkpointtest.AsyncParticipant{
				Participant: checkpointtest.Participant{
					New: func(t *testing.T) checkpoint.Participant { return newDedup(t, dedup.Options{ExactKeys: exact}) },
					Fill: func(t *testing.T, p checkpoint.Participant, n int) {
						fill(t, p.(*dedup.Deduplicator), n)
					},
					Refused: []error{dedup.ErrCorrupt, dedup.ErrUnsupportedVersion, dedup.ErrIncompatible},
					Foreign: foreign,
				},
				// Keys of their own, seen after the barrier.
				After: func(t *testing.T, p checkpoint.Participant, n int) {
					fill(t, p.(*dedup.Deduplicator), 1000+n)
				},
			})
		})
	}
}
