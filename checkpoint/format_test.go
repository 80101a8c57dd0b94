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

// goldenCheckpoint is the checkpoint pinned by testdata/checkpoint_v2.golden.
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
		Parent:     41,
	}
}

// TestFormatGolden pins checkpoint file format version 2: the bytes Encode
// writes for a fixed checkpoint, and that those bytes still decode to it.
// Run with -update to rewrite the file after a deliberate format change
// (which needs a new version in the magic).
func TestFormatGolden(t *testing.T) {
	got, err := checkpoint.Encode(goldenCheckpoint())
	require.NoError(t, err)
	want := golden.Check(t, "checkpoint_v2.golden", got)

	cp, err := checkpoint.Decode(want)
	require.NoError(t, err)
	assert.Equal(t, goldenCheckpoint(), cp)
}

// TestFormatV2FreshStartParent: parent 0 (a chain that started fresh) is
// recorded, not left out, and reads back as a known parent.
func TestFormatV2FreshStartParent(t *testing.T) {
	give := goldenCheckpoint()
	give.Parent = 0
	b, err := checkpoint.Encode(give)
	require.NoError(t, err)
	assert.Equal(t, "EOCKPT02", string(b[:8]))
	assert.Contains(t, string(b), `"parent":0`)
	cp, err := checkpoint.Decode(b)
	require.NoError(t, err)
	assert.Equal(t, give, cp)
}

// TestFormatV1Readable: a file of format version 1 (written by earlier
// releases, testdata/checkpoint_v1.golden) still decodes, with its parent
// unknown, and re-encodes to the same bytes.
func TestFormatV1Readable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "checkpoint_v1.golden"))
	require.NoError(t, err)
	cp, err := checkpoint.Decode(b)
	require.NoError(t, err)
	want := goldenCheckpoint()
	want.Parent, want.ParentUnknown = 0, true
	assert.Equal(t, want, cp)
	again, err := checkpoint.Encode(cp)
	require.NoError(t, err)
	assert.Equal(t, b, again)
}

// TestFormatNewerVersionRefused: a file of another version is refused with
// ErrUnsupportedVersion, not taken for corruption and not half read.
func TestFormatNewerVersionRefused(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "checkpoint_v2.golden"))
	require.NoError(t, err)
	b[6], b[7] = '0', '3' // EOCKPT03
	cp, err := checkpoint.Decode(b)
	assert.ErrorIs(t, err, checkpoint.ErrUnsupportedVersion)
	assert.NotErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Nil(t, cp)
}
