package checkpointtest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
)

// TestCheckpointWhileDeclined: Checkpoint tries again while the checkpoint
// is declined, and returns once one is taken.
func TestCheckpointWhileDeclined(t *testing.T) {
	calls := 0
	checkpointtest.Checkpoint(t, func(context.Context) error {
		if calls++; calls < 3 {
			return fmt.Errorf("chain events/0: %w", checkpoint.ErrDeclined)
		}
		return nil
	})
	assert.Equal(t, 3, calls)
}
