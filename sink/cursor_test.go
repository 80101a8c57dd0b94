package sink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	}{
		{name: "empty", give: nil},
		{name: "short", give: []byte{1, 0, 0}},
		{name: "unknown version", give: append([]byte{2}, make([]byte, 12)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c sink.Cursor
			assert.Error(t, c.Restore(context.Background(), tt.give))
		})
	}
}
