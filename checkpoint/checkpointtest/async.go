package checkpointtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// AsyncParticipant describes a checkpoint.AsyncParticipant implementation
// to TestAsyncParticipant.
type AsyncParticipant struct {
	Participant
	// After feeds p more input after what Fill(n) fed it: the records
	// after a barrier. It must change the state.
	After func(t *testing.T, p checkpoint.Participant, n int)
}

// TestAsyncParticipant checks the promises of checkpoint.AsyncParticipant,
// and runs TestParticipant too:
//
//   - the pending part returns the bytes Snapshot returns at the barrier,
//     for a participant fed the same input;
//   - records fed after SnapshotAsync, while the pending part runs in
//     another goroutine, never reach its state; the next snapshot has them;
//   - a pending part's state restores into a fresh participant;
//   - a pending part called with a cancelled context returns promptly, and
//     the participant still snapshots afterwards, the records after that
//     barrier included.
//
// Run it with -race: the pending part runs beside the feeding, as in a
// chain.
func TestAsyncParticipant(t *testing.T, p AsyncParticipant) {
	TestParticipant(t, p.Participant)
	ctx := context.Background()
	id := checkpoint.ID(100)
	nextID := func() checkpoint.ID { id++; return id }
	async := func(t *testing.T, q checkpoint.Participant) checkpoint.PendingSnapshot {
		t.Helper()
		ap, ok := q.(checkpoint.AsyncParticipant)
		require.True(t, ok, "%T is no checkpoint.AsyncParticipant", q)
		pend, err := ap.SnapshotAsync(ctx, nextID())
		require.NoError(t, err)
		require.NotNil(t, pend)
		return pend
	}
	// inBackground runs pend in a goroutine of its own, as the coordinator
	// does, while during runs in this one.
	inBackground := func(t *testing.T, pctx context.Context, pend checkpoint.PendingSnapshot, during func()) ([]byte, error) {
		t.Helper()
		type result struct {
			b   []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			b, err := pend(pctx)
			done <- result{b, err}
		}()
		during()
		select {
		case r := <-done:
			return r.b, r.err
		case <-time.After(time.Minute):
			t.Fatal("the pending part did not return in a minute")
			return nil, nil
		}
	}
	filled := func(t *testing.T, n int) checkpoint.Participant {
		q := p.New(t)
		p.Fill(t, q, n)
		return q
	}
	syncSnap := func(t *testing.T, q checkpoint.Participant) []byte {
		t.Helper()
		b, err := q.Snapshot(ctx, nextID())
		require.NoError(t, err)
		return b
	}

	t.Run("PendingPartIsTheBarriersState", func(t *testing.T) {
		want := syncSnap(t, filled(t, 1))
		q := filled(t, 1)
		got, err := inBackground(t, ctx, async(t, q), func() {})
		require.NoError(t, err)
		assert.Equal(t, want, got, "pending part and Snapshot at the same input")
	})

	t.Run("RecordsAfterTheBarrierStayOut", func(t *testing.T) {
		want := syncSnap(t, filled(t, 1))
		q := filled(t, 1)
		got, err := inBackground(t, ctx, async(t, q), func() { p.After(t, q, 1) })
		require.NoError(t, err)
		assert.Equal(t, want, got, "a record after the barrier reached the pending checkpoint")

		twin := filled(t, 1)
		p.After(t, twin, 1)
		later := syncSnap(t, twin)
		require.NotEqual(t, want, later, "After does not change the state")
		next, err := inBackground(t, ctx, async(t, q), func() {})
		require.NoError(t, err)
		assert.Equal(t, later, next, "the next checkpoint holds the records after the first barrier")
	})

	t.Run("PendingStateRestores", func(t *testing.T) {
		state, err := inBackground(t, ctx, async(t, filled(t, 1)), func() {})
		require.NoError(t, err)
		fresh := p.New(t)
		require.NoError(t, fresh.Restore(ctx, state))
		assert.Equal(t, state, syncSnap(t, fresh), "restored from a pending part's state")
	})

	t.Run("CancelledPendingPartLetsGo", func(t *testing.T) {
		q := filled(t, 1)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, _ = inBackground(t, cctx, async(t, q), func() { p.After(t, q, 1) })
		twin := filled(t, 1)
		p.After(t, twin, 1)
		want := syncSnap(t, twin)
		got, err := inBackground(t, ctx, async(t, q), func() {})
		require.NoError(t, err)
		assert.Equal(t, want, got, "after an aborted checkpoint, the next one holds every record")
	})
}
