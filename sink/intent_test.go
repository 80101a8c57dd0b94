package sink_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/exactlyonce/exactlyonce/sink"
)

func pos(o int64, i uint32) sink.Position { return sink.Position{Offset: o, Index: i} }

func TestPositionCompare(t *testing.T) {
	tests := []struct {
		give, other sink.Position
		want        int
	}{
		{pos(1, 0), pos(1, 0), 0},
		{pos(1, 0), pos(1, 1), -1},
		{pos(2, 0), pos(1, 9), 1},
		{pos(0, 5), pos(1, 0), -1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.give.Compare(tt.other), "%s vs %s", tt.give, tt.other)
	}
}

func TestReinsertToken(t *testing.T) {
	base := "eo1:abc:rtopic:0:1.0-9.0"
	a := sink.ReinsertToken(base, 1)
	assert.Equal(t, a, sink.ReinsertToken(base, 1), "deterministic")
	assert.NotEqual(t, a, sink.ReinsertToken(base, 2))
	assert.NotEqual(t, base, a)
	b := sink.ReinsertToken(a, 2)
	assert.NotEqual(t, sink.ReinsertToken(base, 2), b, "depends on the history")
	assert.Equal(t, len(a), len(b), "does not grow")
}
