package sink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/sink"
)

// TestCursor proves positions grow strictly across records and ticks, and
// continue after a restore where the snapshot left them, so a tick after a
// restart never reuses a position a sink has journaled.
func TestCursor(t *testing.T) {
	var c sink.Cursor
	assert.Equal(t, sink.Position{}, c.Next())
	c.At(7)
	assert.Equal(t, sink.Position{Offset: 7}, c.Next())
	assert.Equal(t, sink.Position{Offset: 7, Index: 1}, c.Next())
	// A tick emits two rows without a new record.
	assert.Equal(t, sink.Position{Offset: 7, Index: 2}, c.Next())
	assert.Equal(t, sink.Position{Offset: 7, Index: 3}, c.Peek())

	state, err := c.Snapshot(context.Background(), 1)
	require.NoError(t, err)
	var r sink.Cursor
	require.NoError(t, r.Restore(context.Background(), state))
	assert.Equal(t, sink.Position{Offset: 7, Index: 3}, r.Next(), "continues after the snapshot")
	r.At(8)
	assert.Equal(t, sink.Position{Offset: 8}, r.Next())
}

func TestCursorRestoreRejectsBadState(t *testing.T) {
	tests := []struct {
		name string
		give []byte
		want error
	}{
		{name: "empty", give: nil, want: sink.ErrCorrupt},
		{name: "short", give: []byte{1, 0, 0}, want: sink.ErrCorrupt},
		{name: "unknown version", give: append([]byte{2}, make([]byte, 12)...), want: sink.ErrUnsupportedVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c sink.Cursor
			assert.ErrorIs(t, c.Restore(context.Background(), tt.give), tt.want)
		})
	}
}

func TestCursorParticipantConformance(t *testing.T) {
	checkpointtest.TestParticipant(t, checkpointtest.Participant{
		New: func(*testing.T) checkpoint.Participant { return &sink.Cursor{} },
		Fill: func(_ *testing.T, p checkpoint.Participant, n int) {
			c := p.(*sink.Cursor)
			c.At(int64(100 * n))
			for range n {
				c.Next()
			}
		},
		Refused: []error{sink.ErrCorrupt, sink.ErrUnsupportedVersion},
	})
}
