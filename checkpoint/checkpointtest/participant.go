package checkpointtest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Participant describes a checkpoint.Participant implementation to
// TestParticipant.
type Participant struct {
	// New returns a participant with empty state. Its cleanup, if any,
	// belongs to t.
	New func(t *testing.T) checkpoint.Participant
	// Fill feeds p the input numbered n. The same n must lead to the same
	// state whenever it is fed to a participant New returned, and two
	// different n to different states.
	Fill func(t *testing.T, p checkpoint.Participant, n int)
	// Refused are the sentinel errors a refused Restore wraps (one of
	// them): the package's ErrCorrupt, ErrUnsupportedVersion,
	// ErrIncompatible.
	Refused []error
	// Foreign are states that are well formed but not for this participant
	// (another version, configuration or partition); Restore must refuse
	// each. The suite adds garbage and truncations of its own.
	Foreign [][]byte
}

// TestParticipant checks the promises of checkpoint.Participant that do not
// depend on what the participant computes:
//
//   - the same state gives the same bytes, snapshotted twice or by two
//     participants fed the same input;
//   - a snapshot restored into a fresh participant snapshots to the same
//     bytes (the restore round-trips), and into a participant that holds
//     other state replaces that state;
//   - a truncated state, garbage, or one of Participant.Foreign is refused
//     with an error wrapping one of Participant.Refused, and loads nothing:
//     the participant snapshots as it did before.
func TestParticipant(t *testing.T, p Participant) {
	ctx := context.Background()
	id := checkpoint.ID(1)
	snap := func(t *testing.T, q checkpoint.Participant) []byte {
		t.Helper()
		id++
		b, err := q.Snapshot(ctx, id)
		require.NoError(t, err)
		return b
	}
	filled := func(t *testing.T, n int) checkpoint.Participant {
		q := p.New(t)
		p.Fill(t, q, n)
		return q
	}

	t.Run("SameStateSameBytes", func(t *testing.T) {
		a, b := filled(t, 1), filled(t, 1)
		first := snap(t, a)
		assert.Equal(t, first, snap(t, a), "snapshotted twice")
		assert.Equal(t, first, snap(t, b), "two participants fed the same input")
		assert.NotEqual(t, first, snap(t, filled(t, 2)), "different input, same bytes: Fill does not reach the state")
	})

	t.Run("RestoreRoundTrips", func(t *testing.T) {
		want := snap(t, filled(t, 1))
		fresh := p.New(t)
		require.NoError(t, fresh.Restore(ctx, want))
		assert.Equal(t, want, snap(t, fresh), "restored into a fresh participant")

		other := filled(t, 2)
		require.NoError(t, other.Restore(ctx, want))
		assert.Equal(t, want, snap(t, other), "restored over other state")
	})

	t.Run("RefusedStateLoadsNothing", func(t *testing.T) {
		good := snap(t, filled(t, 1))
		bad := map[string][]byte{
			"garbage":               []byte("not a snapshot of anything"),
			"zeros":                 make([]byte, 64),
			"one byte":              good[:1],
			"half":                  good[:len(good)/2],
			"all but the last byte": good[:len(good)-1],
		}
		for i, f := range p.Foreign {
			bad["foreign "+string(rune('a'+i))] = f
		}
		for name, state := range bad {
			q := filled(t, 2)
			before := snap(t, q)
			err := q.Restore(ctx, state)
			if !assert.Error(t, err, "%s: restored", name) {
				continue
			}
			refused := false
			for _, s := range p.Refused {
				refused = refused || errors.Is(err, s)
			}
			assert.True(t, refused, "%s: %v wraps none of %v", name, err, p.Refused)
			assert.Equal(t, before, snap(t, q), "%s: a refused state changed the participant", name)
		}
	})
}
