package window_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/window"
)

func TestPartitionCheck(t *testing.T) {
	var c window.PartitionCheck
	require.NoError(t, c.Check("acme/alice", 1))
	require.NoError(t, c.Check("acme/alice", 1))
	require.NoError(t, c.Check("acme/bob", 2))

	err := c.Check("acme/alice", 2)
	require.ErrorIs(t, err, window.ErrKeySplit)
	var split *window.KeySplitError
	require.ErrorAs(t, err, &split)
	assert.Equal(t, window.KeySplitError{Key: "acme/alice", First: 1, Second: 2}, *split)
	assert.Equal(t, 2, c.Len())

	c.Forget("acme/alice")
	assert.NoError(t, c.Check("acme/alice", 2), "a forgotten key starts over")
}
