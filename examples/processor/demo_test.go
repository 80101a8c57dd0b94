//go:build demo

package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The chaos run's build reads its clock's offset from -clock-offset-file,
// again while it runs: the harness makes the wall clock jump.
func TestClockOffsetFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "offset")
	require.NoError(t, os.WriteFile(file, []byte("90s\n"), 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := demoFlags{clockFile: file}.clock(ctx)
	require.NotNil(t, now)
	ahead := time.Until(now())
	assert.InDelta(t, float64(90*time.Second), float64(ahead), float64(5*time.Second))

	require.NoError(t, os.WriteFile(file, []byte("-30s"), 0o644))
	require.Eventually(t, func() bool { return now().Before(time.Now().Add(-25 * time.Second)) }, time.Minute, 10*time.Millisecond)

	assert.Nil(t, demoFlags{}.clock(ctx), "no file, no clock of its own")
}
