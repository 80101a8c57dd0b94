package journal

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/golden"
	"github.com/exactlyonce/exactlyonce/sink"
)

var goldenIntent = sink.Intent{
	Version: sink.IntentVersion, Table: "analytics.events", Topic: "webhooks", Partition: 3,
	First: sink.Position{Offset: 100}, Last: sink.Position{Offset: 199, Index: 2}, Rows: 250, Hash: 0x0123456789abcdef,
	Token: "eo1:0011223344556677:webhooks:3:100.0-199.2", Epoch: 1, Owner: "8899aabbccddeeff",
	Created: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Block: 41,
	AckedThrough: &sink.Position{Offset: 99, Index: 1},
}

// TestIntentGolden pins the journal's intent entry, version 1: the JSON
// Record writes for a fixed intent, and that Load still reads those bytes
// back as the same intent. Run with -update to rewrite the file after a
// deliberate format change (which needs a new sink.IntentVersion).
func TestIntentGolden(t *testing.T) {
	got, err := json.Marshal(goldenIntent)
	require.NoError(t, err)
	want := golden.Check(t, "intent_v1.golden", got)

	loaded, err := loadOne(t, want)
	require.NoError(t, err)
	require.Len(t, loaded, 1)
	assert.Equal(t, goldenIntent, loaded[0])
}

// TestIntentOtherVersionRefused: an intent of another version is refused
// with sink.ErrUnsupportedVersion, and Load returns nothing.
func TestIntentOtherVersionRefused(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "intent_v1.golden"))
	require.NoError(t, err)
	v2 := strings.Replace(string(b), `{"v":1,`, `{"v":2,`, 1)
	require.NotEqual(t, string(b), v2)
	loaded, err := loadOne(t, []byte(v2))
	assert.ErrorIs(t, err, sink.ErrUnsupportedVersion)
	assert.Empty(t, loaded)
}

// loadOne stores b as the journal's only intent, where Record would write
// it, and loads the journal.
func loadOne(t *testing.T, b []byte) ([]sink.Intent, error) {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	j, err := Open(store, goldenIntent.Table, checkpoint.TopicPartition{Topic: goldenIntent.Topic, Partition: goldenIntent.Partition})
	require.NoError(t, err)
	require.NoError(t, j.Claim(ctx))
	require.NoError(t, store.Put(ctx, j.entryName(goldenIntent), b))
	return j.Load(ctx, nil)
}
