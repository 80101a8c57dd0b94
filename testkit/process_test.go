package testkit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// A supervised func counts in a file, one line per 10 ms: SIGSTOP holds
// the count, SIGCONT lets it go on, SIGKILL ends it without its deferred
// work, a restart goes on from the file, and an exit on its own is noticed
// with its error.
func TestFuncProcess(t *testing.T) {
	dir := os.Getenv("TESTKIT_PROCESS_DIR")
	if dir == "" {
		dir = t.TempDir()
		t.Setenv("TESTKIT_PROCESS_DIR", dir)
	}
	file := filepath.Join(dir, "count")
	count := func() int {
		b, _ := os.ReadFile(file)
		n, _ := strconv.Atoi(string(b))
		return n
	}
	p := testkit.Func(t, "counter", func(ctx context.Context) error {
		n := count()
		fmt.Println("started at", n)
		for ctx.Err() == nil {
			n++
			if err := os.WriteFile(file, []byte(strconv.Itoa(n)), 0o644); err != nil {
				return err
			}
			if n == 1000 {
				return fmt.Errorf("counted to %d", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Println("terminated")
		return nil
	})
	require.Eventually(t, func() bool { return count() >= 3 }, 10*time.Second, 5*time.Millisecond)
	p.Stop()
	time.Sleep(50 * time.Millisecond)
	held := count()
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, held, count(), "a stopped process does not count")
	p.Continue()
	require.Eventually(t, func() bool { return count() > held }, 10*time.Second, 5*time.Millisecond)
	p.Kill()
	assert.False(t, p.Running())
	assert.Error(t, p.Err(), "killed")
	p.Restart()
	require.Eventually(t, func() bool { return count() > held+3 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, p.Terminate(10*time.Second))
	assert.Contains(t, p.Logs(), "terminated")
	assert.Contains(t, p.Logs(), "started at 0")

	require.NoError(t, os.WriteFile(file, []byte("990"), 0o644))
	p.Start()
	err := p.Wait(10 * time.Second)
	require.Error(t, err, "it exits on its own")
	assert.Contains(t, p.Logs(), "counted to 1000")
}
