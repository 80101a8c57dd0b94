package windowsink_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/window"
)

// New refuses, at start-up and with the reason, every table that would
// not keep exactly the latest row of each window, and options it would
// have to ignore.
func TestNewRefusesTablesThatDoNotReplace(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	const cols = "key String, start DateTime64(3, 'UTC'), end DateTime64(3, 'UTC'), events UInt64"
	const dedup = " SETTINGS non_replicated_deduplication_window = 100"
	tests := []struct {
		name, engine string
		session      bool
		opts         windowsink.Options
		want         string // in the error; "" accepts
	}{
		{"plain MergeTree", ", version UInt64) ENGINE = MergeTree ORDER BY (key, start)" + dedup, false, windowsink.Options{}, "window rows need ReplacingMergeTree(version)"},
		{"no version", ", version UInt64) ENGINE = ReplacingMergeTree ORDER BY (key, start)" + dedup, false, windowsink.Options{}, "has no version column"},
		{"other version", ", v UInt64, version UInt64) ENGINE = ReplacingMergeTree(v) ORDER BY (key, start)" + dedup, false, windowsink.Options{}, `version column is "v", Options.VersionColumn is "version"`},
		{"version type", ", version UInt32) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start)" + dedup, false, windowsink.Options{}, "is UInt32; the sink writes Row.Version as UInt64"},
		{"session without deleted", ", version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start)" + dedup, true, windowsink.Options{}, "session windows need ReplacingMergeTree(version, deleted)"},
		{"other deleted", ", version UInt64, del UInt8) ENGINE = ReplacingMergeTree(version, del) ORDER BY (key, start)" + dedup, true, windowsink.Options{}, `is_deleted column is "del", Options.DeletedColumn is "deleted"`},
		{"windows", ", version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start)" + dedup, false, windowsink.Options{}, ""},
		{"sessions", ", ver UInt64, del UInt8) ENGINE = ReplacingMergeTree(ver, del) ORDER BY (key, start)" + dedup, true, windowsink.Options{VersionColumn: "ver", DeletedColumn: "del"}, ""},
		{"keep first", ", version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start)" + dedup, false, windowsink.Options{Sink: chsink.Options{OnMismatch: chsink.MismatchKeepFirst}}, "leave it unset"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := fmt.Sprintf("t%d", i)
			require.NoError(t, testkit.Exec(t.Context(), addr, db, "CREATE TABLE "+table+" ("+cols+tt.engine))
			spec := window.Tumbling(time.Minute)
			if tt.session {
				spec = window.Session(time.Minute)
			}
			op, err := window.New(spec, window.Count[int]{}, window.Options{})
			require.NoError(t, err)
			tt.opts.Sink.Database = db
			ws, err := windowsink.New(t.Context(), chsink.Table{Addr: addr, Name: table}, checkpoint.TopicPartition{Topic: "t", Partition: 0},
				checkpoint.NewMemoryStorage(), op, sessionColumns, tt.opts)
			if tt.want == "" {
				require.NoError(t, err)
				require.NoError(t, ws.Close())
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			if _, ok := errors.AsType[*chsink.TableCheckError](err); ok {
				assert.ErrorIs(t, err, windowsink.ErrNotReplacing)
			} else {
				assert.ErrorIs(t, err, windowsink.ErrInvalidOptions)
			}
		})
	}
}

// Open builds the window sink on the chain's Storage and registers it
// under the table's name; a second sink of the table, options that
// disagree with the DB, and a table that does not replace rows are refused
// and leave the chain as it was.
func TestOpenTakesTheChain(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	const cols = "key String, start DateTime64(3, 'UTC'), end DateTime64(3, 'UTC'), events UInt64, version UInt64"
	const dedup = " SETTINGS non_replicated_deduplication_window = 100"
	require.NoError(t, testkit.Exec(t.Context(), addr, db, "CREATE TABLE minutes ("+cols+") ENGINE = ReplacingMergeTree(version) ORDER BY (key, start)"+dedup))
	require.NoError(t, testkit.Exec(t.Context(), addr, db, "CREATE TABLE plain ("+cols+") ENGINE = MergeTree ORDER BY (key, start)"+dedup))
	storage := checkpoint.NewMemoryStorage()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	c, err := checkpoint.NewChain(store, checkpoint.TopicPartition{Topic: "t", Partition: 0})
	require.NoError(t, err)
	chdb := chsink.DB{Addr: addr, Database: db}
	newOp := func() *window.Operator[int, uint64, uint64] {
		op, err := window.New(window.Tumbling(time.Minute), window.Count[int]{}, window.Options{})
		require.NoError(t, err)
		return op
	}

	ws, err := windowsink.Open(t.Context(), c, chdb, "minutes", newOp(), sessionColumns, windowsink.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.Close() })
	assert.Equal(t, map[string]checkpoint.Participant{"minutes": ws}, c.Participants())
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	require.NoError(t, ws.Add(t.Context(), 0, window.Event[int]{Key: "k", Time: at, Value: 1}))
	require.NoError(t, ws.EndInput(t.Context()))
	_, err = ws.Snapshot(t.Context(), 1)
	require.NoError(t, err)
	names, err := storage.List(t.Context(), "sink-journal/"+db+".minutes/t/0/")
	require.NoError(t, err)
	assert.NotEmpty(t, names, "the journal in the Store's Storage")
	assert.Equal(t, [][]string{{"k", "1"}}, testkit.Rows(t, addr, db, "SELECT key, events FROM minutes FINAL"))

	for name, open := range map[string]func() error{
		"a second sink of the table": func() error {
			_, err := windowsink.Open(t.Context(), c, chdb, "minutes", newOp(), sessionColumns, windowsink.Options{})
			return err
		},
		"another database": func() error {
			_, err := windowsink.Open(t.Context(), c, chdb, "minutes", newOp(), sessionColumns, windowsink.Options{Sink: chsink.Options{Database: "other"}})
			return err
		},
		"a table that does not replace": func() error {
			_, err := windowsink.Open(t.Context(), c, chdb, "plain", newOp(), sessionColumns, windowsink.Options{})
			return err
		},
	} {
		assert.Error(t, open(), name)
		assert.Equal(t, map[string]checkpoint.Participant{"minutes": ws}, c.Participants(), name)
	}

	// Another chain's sink of the table, under the name a chain wired by
	// hand gave it.
	c2, err := checkpoint.NewChain(store, checkpoint.TopicPartition{Topic: "t", Partition: 1})
	require.NoError(t, err)
	named, err := windowsink.Open(t.Context(), c2, chdb, "minutes", newOp(), sessionColumns,
		windowsink.Options{Sink: chsink.Options{ParticipantName: "window_rows"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = named.Close() })
	assert.Equal(t, map[string]checkpoint.Participant{"window_rows": named}, c2.Participants())
}
