package journal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/internal/journal"
)

// Scenario 2 of issue 12: two instances claim one journal at the same time
// (a rebalance race) and both journal a batch over the same positions. With a
// read-then-write Claim both took the same epoch, and the loser's intent,
// written before its ownership check, had the same name as the winner's and
// overwrote it: the next replay cut rows under a token ClickHouse never saw.
// Now every epoch has exactly one owner, the older claimer is fenced, and the
// batch that survives in the journal is the one whose Record succeeded.
func TestJournalConcurrentClaim(t *testing.T) {
	ctx := context.Background()
	store, err := checkpoint.NewFSStorage(t.TempDir())
	require.NoError(t, err)
	fences := 0
	for round := range 100 {
		var js [2]*journal.Journal
		for i := range js {
			js[i], err = journal.Open(store, "db.t", src)
			require.NoError(t, err)
		}
		var start, done sync.WaitGroup
		start.Add(1)
		var claimErr, recErr [2]error
		var ins [2]sink.Intent
		var recorded [2]bool
		var will [2]sink.Intent // what each would insert: its own batch, or the one it replays
		base := int64(round * 10)
		for i, j := range js {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				if claimErr[i] = j.Claim(ctx); claimErr[i] != nil {
					return
				}
				// As a sink does: replay what the journal holds, else cut
				// a batch of its own.
				after := pos(base-1, 0)
				loaded, err := j.Load(ctx, &after)
				if err != nil || len(loaded) > 0 {
					claimErr[i] = err
					if len(loaded) > 0 {
						will[i] = loaded[0]
					}
					return
				}
				ins[i] = sink.Intent{First: pos(base, 0), Last: pos(base+9, 0), Rows: 10 + i, Hash: uint64(i + 1),
					Token: j.Token(pos(base, 0), pos(base+9, 0))}
				recErr[i] = j.Record(ctx, &ins[i])
				recorded[i] = recErr[i] == nil
				if recorded[i] {
					will[i] = ins[i]
				}
			}()
		}
		start.Done()
		done.Wait()
		require.NoError(t, claimErr[0], "round %d", round)
		require.NoError(t, claimErr[1], "round %d", round)
		require.NotEqual(t, js[0].Epoch(), js[1].Epoch(), "round %d: one owner per epoch", round)
		winner := 0
		if js[1].Epoch() > js[0].Epoch() {
			winner = 1
		}
		if recErr[winner] != nil {
			t.Fatalf("round %d: the newest owner's Record failed: %v", round, recErr[winner])
		}
		if recorded[1-winner] && recorded[winner] {
			t.Fatalf("round %d: both owners journaled their own batch over the same positions", round)
		}
		if ins[1-winner].Hash != 0 && !recorded[1-winner] {
			require.ErrorIs(t, recErr[1-winner], sink.ErrFenced, "round %d", round)
		}
		fences += btoi(!recorded[1-winner] && ins[1-winner].Hash != 0)

		reader, err := journal.Open(store, "db.t", src)
		require.NoError(t, err)
		require.NoError(t, reader.Claim(ctx))
		after := pos(base-1, 0)
		got, err := reader.Load(ctx, &after)
		require.NoError(t, err, "round %d", round)
		require.Len(t, got, 1, "round %d", round)
		// The journal holds what the owner inserts, and a loser that
		// passed its check inserted that very batch too.
		assert.Equal(t, []uint64{will[winner].Hash, will[winner].Epoch}, []uint64{got[0].Hash, got[0].Epoch}, "round %d", round)
		if recorded[1-winner] {
			assert.Equal(t, will[1-winner].Token+"/"+fmt.Sprint(will[1-winner].Hash), got[0].Token+"/"+fmt.Sprint(got[0].Hash), "round %d", round)
		}
		// Settle the round, so the next one's Load sees only its own batch.
		require.NoError(t, reader.Ack(ctx, &got[0]))
		require.NoError(t, reader.Prune(ctx, pos(base+9, 0)))
	}
	t.Logf("%d of 100 rounds fenced an owner between its claim and its intent", fences)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Scenario 4 of issue 12: an owner cut off by a takeover completes a
// checkpoint (an empty snapshot writes no intent) and prunes. Its prune
// point must not become the journal's: the new owner's lineage restores from
// older checkpoints, and a point taken from the fenced owner would fail every
// restore with ErrStaleCheckpoint once the new owner dies. Nor may the
// fenced owner delete entries.
func TestJournalFencedOwnerDoesNotMovePrunePoint(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	old, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, old.Claim(ctx))
	a := record(t, old, pos(0, 0), pos(9, 0))
	old.AckLater(&a)
	record(t, old, pos(10, 0), pos(19, 0))

	next, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, next.Claim(ctx))
	after := pos(9, 0) // next restored from a checkpoint through record 9
	_, err = next.Load(ctx, &after)
	require.NoError(t, err)

	// The fenced owner completes a checkpoint through 19 and prunes.
	perr := old.Prune(ctx, pos(19, 0))
	late := sink.Intent{First: pos(20, 0), Last: pos(29, 0), Rows: 1, Token: old.Token(pos(20, 0), pos(29, 0))}
	rerr := old.Record(ctx, &late)
	require.ErrorIs(t, rerr, sink.ErrFenced)
	if perr != nil {
		require.ErrorIs(t, perr, sink.ErrFenced)
	}
	_ = old.Prune(ctx, pos(29, 0))

	// next dies; a third owner restores from next's checkpoint through 9.
	third, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, third.Claim(ctx))
	through, ok, err := third.Pruned(ctx)
	require.NoError(t, err)
	if ok {
		assert.LessOrEqual(t, through.Compare(pos(9, 0)), 0, "prune point %s moved by a fenced owner", through)
	}
	got, err := third.Load(ctx, &after)
	require.NoError(t, err)
	require.NotEmpty(t, got)
	assert.Equal(t, pos(10, 0), got[0].First, "the batch after the restore point was not deleted")
}

// failingDeletes fails every Delete while armed.
type failingDeletes struct {
	checkpoint.Storage
	armed   atomic.Bool
	deletes atomic.Int64
}

func (f *failingDeletes) Delete(ctx context.Context, name string) error {
	if f.armed.Load() {
		return errors.New("injected: delete failed")
	}
	f.deletes.Add(1)
	return f.Storage.Delete(ctx, name)
}

// Scenario 7 of issue 12: a failed delete while pruning failed the
// checkpoint notification and so stopped the pipeline. Pruning only saves
// space: the entries stay, are deleted by a later Prune, and Prune reports
// success.
func TestJournalFailedPruneDeleteIsRetried(t *testing.T) {
	ctx := context.Background()
	store := &failingDeletes{Storage: checkpoint.NewMemoryStorage()}
	j, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, j.Claim(ctx))
	record(t, j, pos(0, 0), pos(9, 0))
	record(t, j, pos(10, 0), pos(19, 0))
	record(t, j, pos(20, 0), pos(29, 0))

	store.armed.Store(true)
	err = j.Prune(ctx, pos(9, 0))
	require.False(t, err != nil && !errors.Is(err, sink.ErrPruneDeferred), "a failed delete is not fatal: %v", err)
	record(t, j, pos(30, 0), pos(39, 0))
	err = j.Prune(ctx, pos(19, 0))
	require.False(t, err != nil && !errors.Is(err, sink.ErrPruneDeferred), "a failed delete is not fatal: %v", err)
	got, err := j.Load(ctx, nil)
	require.NoError(t, err)
	assert.Len(t, got, 4, "nothing deleted while deletes fail")

	store.armed.Store(false)
	record(t, j, pos(40, 0), pos(49, 0))
	require.NoError(t, j.Prune(ctx, pos(29, 0)))
	got, err = j.Load(ctx, nil)
	require.NoError(t, err)
	require.Len(t, got, 2, "the entries left by the failed deletes are deleted later")
	assert.Equal(t, pos(30, 0), got[0].First)
}
