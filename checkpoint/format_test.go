package checkpoint_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/golden"
)

// goldenCheckpoint is the checkpoint pinned by testdata/checkpoint_v1.golden.
func goldenCheckpoint() *checkpoint.Checkpoint {
	return &checkpoint.Checkpoint{
		ID:         42,
		Partition:  checkpoint.TopicPartition{Topic: "webhooks", Partition: 3},
		NextOffset: 1234,
		States:     map[string][]byte{"dedup": []byte("dedup state"), "sink": {0, 1, 2, 255}, "empty": {}},
		Created:    time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Duration:   1500 * time.Millisecond,
		Generation: 7,
		Member:     "member-1",
	}
}

// TestFormatGolden pins checkpoint file format version 1: the bytes Encode
// writes for a fixed checkpoint, and that those bytes still decode to it.
// Run with -update to rewrite the file after a deliberate format change
// (which needs a new version in the magic).
func TestFormatGolden(t *testing.T) {
	got, err := checkpoint.Encode(goldenCheckpoint())
	require.NoError(t, err)
	want := golden.Check(t, "checkpoint_v1.golden", got)

	cp, err := checkpoint.Decode(want)
	require.NoError(t, err)
	assert.Equal(t, goldenCheckpoint(), cp)
}

// TestFormatNewerVersionRefused: a file of another version is refused with
// ErrUnsupportedVersion, not taken for corruption and not half read.
func TestFormatNewerVersionRefused(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "checkpoint_v1.golden"))
	require.NoError(t, err)
	b[6], b[7] = '0', '2' // EOCKPT02
	cp, err := checkpoint.Decode(b)
	assert.ErrorIs(t, err, checkpoint.ErrUnsupportedVersion)
	assert.NotErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Nil(t, cp)
}
