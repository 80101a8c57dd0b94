package journal_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/internal/journal"
)

var src = checkpoint.TopicPartition{Topic: "events", Partition: 3}

func pos(o int64, i uint32) sink.Position { return sink.Position{Offset: o, Index: i} }

func record(t *testing.T, j *journal.Journal, first, last sink.Position) sink.Intent {
	t.Helper()
	in := sink.Intent{First: first, Last: last, Rows: 1, Token: j.Token(first, last), Created: time.Unix(1, 0).UTC()}
	require.NoError(t, j.Record(context.Background(), &in))
	return in
}

func TestJournalRecordAckLoad(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	j, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, j.Claim(ctx))

	a := record(t, j, pos(0, 0), pos(9, 1))
	require.NoError(t, j.Ack(ctx, &a))
	b := record(t, j, pos(10, 0), pos(19, 0))

	got, err := j.Load(ctx, nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, a, got[0])
	assert.True(t, got[0].Acked)
	assert.Equal(t, b, got[1])
	assert.False(t, got[1].Acked)

	after := pos(9, 1)
	got, err = j.Load(ctx, &after)
	require.NoError(t, err)
	assert.Equal(t, []sink.Intent{b}, got)

	// A new instance sees the same journal and the same tokens.
	j2, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, j2.Claim(ctx))
	assert.Equal(t, b.Token, j2.Token(b.First, b.Last))
	assert.Equal(t, uint64(2), j2.Epoch())
}

func TestJournalFencing(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	old, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, old.Claim(ctx))
	inFlight := record(t, old, pos(0, 0), pos(4, 0)) // passed the owner check

	// A new owner claims: it sees the old owner's in-flight intent.
	next, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, next.Claim(ctx))
	got, err := next.Load(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []sink.Intent{inFlight}, got)

	// The old owner resumes: its next intent is refused.
	late := sink.Intent{First: pos(5, 0), Last: pos(9, 0), Rows: 1, Token: old.Token(pos(5, 0), pos(9, 0))}
	err = old.Record(ctx, &late)
	require.ErrorIs(t, err, sink.ErrFenced)

	// The new owner cuts the same positions differently; the stale,
	// never-inserted intent of the old epoch is dropped on load.
	require.NoError(t, next.Ack(ctx, &got[0]))
	mine := record(t, next, pos(5, 0), pos(7, 0))
	third, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, third.Claim(ctx))
	loaded, err := third.Load(ctx, nil)
	require.NoError(t, err)
	require.Len(t, loaded, 2)
	assert.Equal(t, mine, loaded[1])
}

func TestJournalOverlapOfAckedBatchesIsCorrupt(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	a, _ := journal.Open(store, "db.t", src)
	require.NoError(t, a.Claim(ctx))
	x := record(t, a, pos(0, 0), pos(9, 0))
	require.NoError(t, a.Ack(ctx, &x))
	b, _ := journal.Open(store, "db.t", src)
	require.NoError(t, b.Claim(ctx))
	y := record(t, b, pos(5, 0), pos(12, 0))
	require.NoError(t, b.Ack(ctx, &y))
	_, err := b.Load(ctx, nil)
	require.ErrorIs(t, err, sink.ErrCorrupt)
}

func TestJournalPrune(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	j, _ := journal.Open(store, "db.t", src)
	require.NoError(t, j.Claim(ctx))
	_, ok, err := j.Pruned(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "no prune point before the first Prune")
	record(t, j, pos(0, 0), pos(9, 0))
	keep := record(t, j, pos(10, 0), pos(19, 0))
	require.NoError(t, j.Prune(ctx, pos(9, 0)))
	through, ok, err := j.Pruned(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, pos(9, 0), through, "durable before anything is deleted")
	got, err := j.Load(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []sink.Position{keep.First}, []sink.Position{got[0].First})

	require.NoError(t, j.Prune(ctx, pos(3, 0))) // older: changes nothing
	through, _, err = j.Pruned(ctx)
	require.NoError(t, err)
	assert.Equal(t, pos(9, 0), through)

	// A new owner keeps the point and prunes what the old one journaled,
	// acks of replayed batches included.
	k, _ := journal.Open(store, "db.t", src)
	require.NoError(t, k.Claim(ctx))
	after := pos(9, 0)
	loaded, err := k.Load(ctx, &after)
	require.NoError(t, err)
	require.Len(t, loaded, 1)
	require.NoError(t, k.Ack(ctx, &loaded[0]))
	record(t, k, pos(30, 0), pos(39, 0))
	require.NoError(t, k.Prune(ctx, pos(29, 0)))
	names, err := store.List(ctx, sink.JournalPrefix)
	require.NoError(t, err)
	assert.Len(t, names, 2, "owner record and the entry after the point: %v", names)
	through, _, err = k.Pruned(ctx)
	require.NoError(t, err)
	assert.Equal(t, pos(29, 0), through)

	// The old owner is fenced: it neither moves the point nor deletes.
	require.ErrorIs(t, j.Prune(ctx, pos(39, 0)), sink.ErrFenced)
	through, _, err = k.Pruned(ctx)
	require.NoError(t, err)
	assert.Equal(t, pos(29, 0), through)
}

func TestJournalAckLater(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	j, _ := journal.Open(store, "db.t", src)
	require.NoError(t, j.Claim(ctx))
	a := record(t, j, pos(0, 0), pos(9, 0))
	j.AckLater(&a)
	got, err := j.Load(ctx, nil)
	require.NoError(t, err)
	assert.False(t, got[0].Acked, "not acked before the next intent")

	record(t, j, pos(10, 0), pos(19, 0))
	got, err = j.Load(ctx, nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.True(t, got[0].Acked, "acked by the next intent")
	assert.False(t, got[1].Acked)

	// An ack carried by another owner's intent does not cover this one's.
	other, _ := journal.Open(store, "db.t", src)
	require.NoError(t, other.Claim(ctx))
	b := record(t, other, pos(20, 0), pos(29, 0))
	other.AckLater(&got[1]) // not its batch: ignored
	other.AckLater(&b)
	record(t, other, pos(30, 0), pos(39, 0))
	got, err = other.Load(ctx, nil)
	require.NoError(t, err)
	require.Len(t, got, 4)
	assert.Equal(t, []bool{true, false, true, false}, []bool{got[0].Acked, got[1].Acked, got[2].Acked, got[3].Acked})
}

func TestOpenJournalRejectsBadNames(t *testing.T) {
	store := checkpoint.NewMemoryStorage()
	tests := []struct {
		table string
		src   checkpoint.TopicPartition
	}{
		{"db/t", src},
		{"db.t", checkpoint.TopicPartition{Topic: "a b", Partition: 0}},
		{"db.t", checkpoint.TopicPartition{Topic: "ok", Partition: -1}},
	}
	for _, tt := range tests {
		_, err := journal.Open(store, tt.table, tt.src)
		assert.Error(t, err, "%q %v", tt.table, tt.src)
	}
}

func TestJournalSupersede(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		ackLater  bool // the superseded batch is acked by an owner after the superseding one's
		wantToken func(old, re sink.Intent) string
	}{
		{"superseding entry replaces an acked batch", false, func(_, re sink.Intent) string { return re.Token }},
		{"stale superseding entry of a fenced owner is dropped", true, func(old, _ sink.Intent) string { return old.Token }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := checkpoint.NewMemoryStorage()
			a, _ := journal.Open(store, "db.t", src)
			require.NoError(t, a.Claim(ctx))
			old := record(t, a, pos(0, 0), pos(9, 0))
			if !tt.ackLater {
				require.NoError(t, a.Ack(ctx, &old))
			}
			b, _ := journal.Open(store, "db.t", src)
			require.NoError(t, b.Claim(ctx))
			re := sink.Intent{First: old.First, Last: old.Last, Rows: 2, Hash: 7,
				Token: sink.ReinsertToken(old.Token, 7), Supersedes: old.Token}
			if tt.ackLater {
				c, _ := journal.Open(store, "db.t", src)
				require.NoError(t, c.Claim(ctx)) // fences b
				require.ErrorIs(t, b.Record(ctx, &re), sink.ErrFenced)
				require.NoError(t, c.Ack(ctx, &old))
			} else {
				require.NoError(t, b.Record(ctx, &re))
			}
			d, _ := journal.Open(store, "db.t", src)
			require.NoError(t, d.Claim(ctx))
			got, err := d.Load(ctx, nil)
			require.NoError(t, err)
			require.Len(t, got, 1)
			assert.Equal(t, tt.wantToken(old, re), got[0].Token)
		})
	}
}

// A handle that claims again (the sink's Restore after a failure) must not
// carry the previous epoch's ack into the new one: the new epoch re-cuts the
// same positions, and a stale ack would mark its not-yet-inserted batch as
// acknowledged, so a crash before its insert would lose it.
func TestJournalClaimDropsPreviousEpochAck(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	j, _ := journal.Open(store, "db.t", src)
	require.NoError(t, j.Claim(ctx))
	a := record(t, j, pos(0, 0), pos(9, 0))
	j.AckLater(&a) // never carried: the chain fails here

	require.NoError(t, j.Claim(ctx)) // Restore claims again on the same handle
	b := record(t, j, pos(0, 0), pos(4, 0))
	got, err := j.Load(ctx, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, b.First, got[0].First)
	assert.Equal(t, b.Epoch, got[0].Epoch)
	assert.False(t, got[0].Acked, "a new epoch's batch is not acked by the previous epoch's ack")
}

// TestJournalDropsFencedIntentAcrossRestorePoint: a fenced owner's late
// intent that nothing newer overlaps any more (the new owner's overlapping
// batch was pruned after its checkpoint) spans the restore point. No
// checkpoint of a live lineage falls inside one of its batches, so the
// entry was never inserted; replaying it would cut the replay differently
// and stop the sink on every restart.
func TestJournalDropsFencedIntentAcrossRestorePoint(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	old, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, old.Claim(ctx))
	next, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, next.Claim(ctx))

	late := sink.Intent{First: pos(5, 0), Last: pos(15, 0), Rows: 1, Token: old.Token(pos(5, 0), pos(15, 0))}
	require.ErrorIs(t, old.Record(ctx, &late), sink.ErrFenced) // written, then refused

	third, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, third.Claim(ctx))
	restoredThrough := pos(10, 0) // a checkpoint of next's lineage, its batches pruned
	got, err := third.Load(ctx, &restoredThrough)
	require.NoError(t, err)
	assert.Empty(t, got)

	// An entry that starts after the restore point is still replayed.
	after := pos(4, 0)
	got, err = third.Load(ctx, &after)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, late.Token, got[0].Token)
}

// A replay that stalled is cut short: an entry over a prefix of the batch's
// positions supersedes it, and the rows after the prefix are journaled as a
// batch of their own, inside the old batch's range. A later load returns
// the prefix and that batch, not the old one, and not an overlap error,
// whether or not the old batch had been acknowledged and wherever the
// restore point lies.
func TestJournalSupersedeByPrefix(t *testing.T) {
	for _, acked := range []bool{false, true} {
		t.Run(fmt.Sprintf("old batch acked %v", acked), func(t *testing.T) {
			ctx := context.Background()
			store := checkpoint.NewMemoryStorage()
			a, _ := journal.Open(store, "db.t", src)
			require.NoError(t, a.Claim(ctx))
			old := record(t, a, pos(0, 0), pos(9, 0))
			if acked {
				require.NoError(t, a.Ack(ctx, &old))
			}

			b, _ := journal.Open(store, "db.t", src)
			require.NoError(t, b.Claim(ctx))
			cut := sink.Intent{First: old.First, Last: pos(3, 0), Rows: 2, Hash: 7, Token: sink.ReinsertToken(old.Token, 7), Supersedes: old.Token}
			require.NoError(t, b.Record(ctx, &cut))
			b.AckLater(&cut)
			rest := record(t, b, pos(5, 0), pos(12, 0))

			for _, after := range []*sink.Position{nil, new(pos(2, 0)), new(pos(3, 0)), new(pos(6, 0))} {
				d, _ := journal.Open(store, "db.t", src)
				require.NoError(t, d.Claim(ctx))
				got, err := d.Load(ctx, after)
				require.NoError(t, err, "after %v", after)
				var firsts []sink.Position
				for _, in := range got {
					firsts = append(firsts, in.First)
				}
				switch {
				case after != nil && after.Compare(rest.First) >= 0:
					assert.Empty(t, firsts, "after %v: the batch across the restore point is unacknowledged", after)
				case after != nil && after.Compare(cut.Last) >= 0:
					assert.Equal(t, []sink.Position{rest.First}, firsts, "after %v", after)
				default:
					require.Equal(t, []sink.Position{cut.First, rest.First}, firsts, "after %v", after)
					assert.Equal(t, cut.Last, got[0].Last)
					assert.True(t, got[0].Acked, "the cut prefix is acknowledged by the batch after it")
				}
			}
		})
	}
}

// TestJournalAckHeld: a cut-short entry whose insert ClickHouse dropped
// against the longer batch it cut (journaled before the insert, the cut
// may turn out wrong) is acknowledged as ending where that batch did, and
// a later load sees it so: the rows after the cut are in ClickHouse.
func TestJournalAckHeld(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	a, _ := journal.Open(store, "db.t", src)
	require.NoError(t, a.Claim(ctx))
	old := record(t, a, pos(0, 0), pos(9, 0))

	b, _ := journal.Open(store, "db.t", src)
	require.NoError(t, b.Claim(ctx))
	cut := sink.Intent{First: old.First, Last: pos(3, 0), Rows: 2, Hash: 7, Token: old.Token, Supersedes: old.Token,
		Earlier: []sink.Prior{{Block: 41, Last: old.Last}}}
	require.NoError(t, b.Record(ctx, &cut))
	require.NoError(t, b.AckHeld(ctx, &cut, old.Last))
	assert.Equal(t, old.Last, cut.Last)

	for _, after := range []*sink.Position{nil, new(pos(2, 0))} {
		d, _ := journal.Open(store, "db.t", src)
		require.NoError(t, d.Claim(ctx))
		got, err := d.Load(ctx, after)
		require.NoError(t, err)
		require.Len(t, got, 1, "after %v", after)
		assert.Equal(t, old.Last, got[0].Last, "the entry ends where the batch ClickHouse holds does")
		assert.True(t, got[0].Acked)
		assert.Equal(t, old.Token, got[0].Token)
		assert.Equal(t, []sink.Prior{{Block: 41, Last: old.Last}}, got[0].Earlier)
	}
}
