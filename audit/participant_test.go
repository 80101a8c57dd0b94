package audit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
)

// TestCounterParticipantConformance runs the checkpoint.Participant suite
// on a Counter: input n counts 10+n records over 2+n tenants, and leaves
// the last few unflushed, so counts, changed flags and the cursor all reach
// the state.
func TestCounterParticipantConformance(t *testing.T) {
	newCounter := func(t *testing.T, o audit.Options) *audit.Counter {
		c, err := audit.NewCounter("t/0", o)
		require.NoError(t, err)
		return c
	}
	fill := func(c *audit.Counter, n int) {
		for i := range 10 + n {
			count(c, int64(i), rec{tenant: string(rune('a' + i%(2+n))), at: t0.Add(time.Duration(i*13) * time.Second), dup: i%4 == 3})
			if i == 5 {
				c.Flush(nil, nil)
			}
		}
	}
	// The state of a counter with buckets of another width.
	hour := newCounter(t, audit.Options{Bucket: time.Hour})
	fill(hour, 1)
	foreign, err := hour.Snapshot(t.Context(), 1)
	require.NoError(t, err)

	checkpointtest.TestParticipant(t, checkpointtest.Participant{
		New: func(t *testing.T) checkpoint.Participant { return newCounter(t, audit.Options{}) },
		Fill: func(_ *testing.T, p checkpoint.Participant, n int) {
			fill(p.(*audit.Counter), n)
		},
		Refused: []error{audit.ErrCorrupt, audit.ErrUnsupportedVersion, audit.ErrBucketChanged},
		Foreign: [][]byte{foreign},
	})
}
