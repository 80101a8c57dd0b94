package journal_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/internal/journal"
)

// Reach names the last position of every entry past the restore point,
// including what Load does not return: a batch superseded by a shorter
// one (a stalled replay cut short) and the earlier versions a cut entry
// lists. ClickHouse may hold rows of all of them.
func TestJournalReach(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	j, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, j.Claim(ctx))
	_, ok := j.Reach()
	assert.False(t, ok, "before any Load")

	a := record(t, j, pos(0, 0), pos(9, 1))
	require.NoError(t, j.Ack(ctx, &a))
	long := record(t, j, pos(10, 0), pos(19, 4))

	_, err = j.Load(ctx, nil)
	require.NoError(t, err)
	got, ok := j.Reach()
	require.True(t, ok)
	assert.Equal(t, pos(19, 4), got)

	after := pos(19, 4)
	_, err = j.Load(ctx, &after)
	require.NoError(t, err)
	_, ok = j.Reach()
	assert.False(t, ok, "nothing past the restore point")

	// A new owner replays long, which came up short: it supersedes it by
	// an entry that ends earlier. Load returns the short one; the reach is
	// still long's end.
	j2, err := journal.Open(store, "db.t", src)
	require.NoError(t, err)
	require.NoError(t, j2.Claim(ctx))
	short := sink.Intent{First: long.First, Last: pos(15, 0), Rows: 1, Token: "short", Supersedes: long.Token}
	require.NoError(t, j2.Record(ctx, &short))
	before := pos(9, 1)
	loaded, err := j2.Load(ctx, &before)
	require.NoError(t, err)
	require.Len(t, loaded, 1)
	assert.Equal(t, pos(15, 0), loaded[0].Last)
	got, ok = j2.Reach()
	require.True(t, ok)
	assert.Equal(t, pos(19, 4), got)

	// An entry cut short lists the longer version its token may hold.
	j3, err := journal.Open(checkpoint.NewMemoryStorage(), "db.t", src)
	require.NoError(t, err)
	require.NoError(t, j3.Claim(ctx))
	cut := sink.Intent{First: pos(3, 0), Last: pos(4, 0), Rows: 1, Token: "t", Earlier: []sink.Prior{{Block: 7, Last: pos(6, 2)}}}
	require.NoError(t, j3.Record(ctx, &cut))
	_, err = j3.Load(ctx, nil)
	require.NoError(t, err)
	got, ok = j3.Reach()
	require.True(t, ok)
	assert.Equal(t, pos(6, 2), got)
}
