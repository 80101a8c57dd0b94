package chsink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// TestOpenTakesTheChain proves Open builds the sink over the chain's
// Storage with the Keep of the chain's Store and the database of the DB,
// registers it under the table's name, and refuses a second sink of the
// same table in the chain.
func TestOpenTakesTheChain(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 5})
	require.NoError(t, err)
	c, err := checkpoint.NewChain(store, checkpoint.TopicPartition{Topic: "events", Partition: 0})
	require.NoError(t, err)
	db := chsink.DB{Addr: env.addr, Database: env.db}

	s, err := chsink.Open(ctx, c, db, "events", eventSchema, chsink.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.Equal(t, map[string]checkpoint.Participant{"events": s}, c.Participants())
	assert.Equal(t, 5, chsink.KeepCheckpoints(s), "the Store's Keep")
	assert.Equal(t, env.db, chsink.Database(s))
	require.NoError(t, feed(ctx, t, s, 0, 10))
	_, err = s.Snapshot(ctx, 1)
	require.NoError(t, err)
	// The flushed batch is journaled in the chain's Storage (no other was
	// given), under the DB's database and the chain's partition.
	names, err := storage.List(ctx, "sink-journal/"+env.db+".events/events/0/")
	require.NoError(t, err)
	assert.NotEmpty(t, names, "the sink's journal in the Store's Storage")
	assert.Equal(t, uint64(expectedRows(0, 10)), env.count(t, "SELECT count() FROM "+env.db+".events"))

	_, err = chsink.Open(ctx, c, db, "events", eventSchema, chsink.Options{})
	require.ErrorIs(t, err, checkpoint.ErrInvalidOptions, "a second sink of the table")
	assert.Equal(t, map[string]checkpoint.Participant{"events": s}, c.Participants())
}

// TestOpenParticipantName proves Open registers the sink under
// Options.ParticipantName when set (the name a chain wired by hand gave
// it), journaling under the table as ever, and refuses a name taken.
func TestOpenParticipantName(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	c, err := checkpoint.NewChain(store, checkpoint.TopicPartition{Topic: "events", Partition: 0})
	require.NoError(t, err)
	require.NoError(t, c.Add("dedup", new(sink.Cursor))) // any participant
	db := chsink.DB{Addr: env.addr, Database: env.db}

	s, err := chsink.Open(ctx, c, db, "events", eventSchema, chsink.Options{ParticipantName: "rows"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.Equal(t, s, c.Participants()["rows"])
	assert.Len(t, c.Participants(), 2)
	require.NoError(t, feed(ctx, t, s, 0, 10))
	_, err = s.Snapshot(ctx, 1)
	require.NoError(t, err)
	names, err := storage.List(ctx, "sink-journal/"+env.db+".events/events/0/")
	require.NoError(t, err)
	assert.NotEmpty(t, names, "journaled under the table, not the participant's name")

	_, err = chsink.Open(ctx, c, db, "events", eventSchema, chsink.Options{ParticipantName: "dedup"})
	require.ErrorIs(t, err, checkpoint.ErrInvalidOptions, "a name taken")
	assert.Len(t, c.Participants(), 2)
}

// TestOpenRefusesWhatTheChainGives proves Open refuses options that
// disagree with the DB or the chain's Store, and takes equal ones.
func TestOpenRefusesWhatTheChainGives(t *testing.T) {
	env := setup(t, eventsDDL)
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{Keep: 2})
	require.NoError(t, err)
	db := chsink.DB{Addr: env.addr, Database: env.db}
	tests := []struct {
		name    string
		db      chsink.DB
		table   string
		opts    chsink.Options
		wantErr bool
	}{
		{name: "other database", db: db, table: "events", opts: chsink.Options{Database: "other"}, wantErr: true},
		{name: "other keep", db: db, table: "events", opts: chsink.Options{KeepCheckpoints: 3}, wantErr: true},
		{name: "no address", db: chsink.DB{Database: env.db}, table: "events", wantErr: true},
		{name: "no table", db: db, wantErr: true},
		{name: "equal values", db: db, table: "events", opts: chsink.Options{Database: env.db, KeepCheckpoints: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := checkpoint.NewChain(store, checkpoint.TopicPartition{Topic: "events", Partition: 0})
			require.NoError(t, err)
			s, err := chsink.Open(context.Background(), c, tt.db, tt.table, eventSchema, tt.opts)
			if tt.wantErr {
				require.ErrorIs(t, err, chsink.ErrInvalidOptions)
				assert.Empty(t, c.Participants())
				return
			}
			require.NoError(t, err)
			assert.NoError(t, s.Close())
		})
	}
}
