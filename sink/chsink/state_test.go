package chsink

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/golden"
	"github.com/exactlyonce/exactlyonce/sink"
)

var goldenState = snapshotState{
	Version: snapshotVersion, Table: "analytics.events", Topic: "webhooks", Partition: 3,
	HasCovered: true, Covered: sink.Position{Offset: 1200, Index: 2},
	Pending: pendingRange{Count: 2, First: sink.Position{Offset: 1201}, Last: sink.Position{Offset: 1400, Index: 1}},
}

// TestStateGolden pins the sink's checkpoint state, version 1: the bytes
// Snapshot writes (json.Marshal of snapshotState) for a fixed state, and
// that decodeState, which Restore uses, still reads them. Run with -update
// to rewrite the file after a deliberate format change (which needs a new
// snapshotVersion).
func TestStateGolden(t *testing.T) {
	got, err := json.Marshal(goldenState)
	require.NoError(t, err)
	want := golden.Check(t, "state_v1.golden", got)

	st, err := decodeState(want)
	require.NoError(t, err)
	assert.Equal(t, goldenState, st)
}

// TestStateOtherVersionRefused: a state of another version, even one with
// fields this build does not know, is refused as ErrUnsupportedVersion.
func TestStateOtherVersionRefused(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "state_v1.golden"))
	require.NoError(t, err)
	v2 := strings.Replace(string(b), `{"v":1,`, `{"v":2,"new_field":true,`, 1)
	require.NotEqual(t, string(b), v2)
	_, err = decodeState([]byte(v2))
	assert.ErrorIs(t, err, ErrUnsupportedVersion)
	_, err = decodeState(b[:len(b)-1])
	assert.ErrorIs(t, err, ErrCorrupt)
	_, err = decodeState([]byte(strings.Replace(string(b), `{"v":1,`, `{"v":1,"new_field":true,`, 1)))
	assert.ErrorIs(t, err, ErrCorrupt, "an unknown field in a version-1 state")
}
