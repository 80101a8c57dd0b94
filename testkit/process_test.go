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

// KillWhileGrowing kills a func while its count grows: after two
// increases, so the count it returns is past the one at its call, and the
// count stops there or a step later (the write in flight when SIGKILL
// came), far below where the func would have gone.
func TestKillWhileGrowing(t *testing.T) {
	file := testkit.Setup(t, "file", func() string { return filepath.Join(t.TempDir(), "count") })
	count := func() (uint64, error) {
		b, err := os.ReadFile(file)
		if os.IsNotExist(err) {
			return 0, nil
		}
		n, _ := strconv.ParseUint(string(b), 10, 64)
		return n, err
	}
	p := testkit.Func(t, "writer", func(ctx context.Context) error {
		for n := 1; ctx.Err() == nil; n++ {
			if err := os.WriteFile(file, []byte(strconv.Itoa(n)), 0o644); err != nil {
				return err
			}
			time.Sleep(30 * time.Millisecond)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	at := p.KillWhileGrowing(ctx, count)
	assert.False(t, p.Running(), "killed")
	assert.GreaterOrEqual(t, at, uint64(2), "two increases seen")
	time.Sleep(300 * time.Millisecond)
	after, err := count()
	require.NoError(t, err)
	assert.LessOrEqual(t, after, at+1, "nothing written after the kill but the write in flight")
}
