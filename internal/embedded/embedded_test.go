package embedded_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

const helperEnv = "EMBEDDED_TEST_HELPER"

// TestHelperProcess is not a test: TestChildDiesWithParent runs the test
// binary again with helperEnv set, and this function then plays the parent
// that starts a server and is killed.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process only")
	}
	r, err := embedded.StartRedis(context.Background(), embedded.RedisOptions{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("ready", r.PID())
	time.Sleep(time.Minute)
	os.Exit(0)
}

// TestChildDiesWithParent proves a server started by this package dies when
// the program that started it is killed with SIGKILL, so a crashed test
// binary leaves no servers behind.
func TestChildDiesWithParent(t *testing.T) {
	if _, err := os.Stat(embedded.DefaultRedisBinary); err != nil {
		if _, lerr := exec.LookPath("redis-server"); lerr != nil {
			unavailable(t, err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	var pid int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
			pid, err = strconv.Atoi(s)
			require.NoError(t, err)
			break
		}
		require.NotContains(t, sc.Text(), "error")
	}
	require.NotZero(t, pid, "helper did not start redis")
	require.NoError(t, syscall.Kill(pid, 0), "redis-server runs")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	assert.Eventually(t, func() bool {
		return !alive(pid)
	}, 10*time.Second, 20*time.Millisecond, "redis-server pid %d outlived its parent", pid)
}

// alive reports whether pid runs and is not a zombie waiting to be reaped.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func unavailable(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("redis-server unavailable: %v", err)
	}
	t.Skipf("redis-server unavailable: %v", err)
}

func TestCreateTopic(t *testing.T) {
	k, err := embedded.StartKafka(embedded.KafkaOptions{})
	require.NoError(t, err)
	defer k.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	tests := []struct {
		name       string
		give       int
		wantErr    bool
		wantErrIs  error
		precreated int
	}{
		{name: "new", give: 3},
		{name: "same count is a no-op", give: 2, precreated: 2},
		{name: "other count", give: 5, precreated: 2, wantErr: true, wantErrIs: embedded.ErrTopicMismatch},
		{name: "zero partitions", give: 0, wantErr: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topic := fmt.Sprintf("topic-%d", i)
			if tt.precreated > 0 {
				require.NoError(t, embedded.CreateTopic(ctx, k.Brokers(), topic, tt.precreated))
			}
			err := embedded.CreateTopic(ctx, k.Brokers(), topic, tt.give)
			if !tt.wantErr {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			if tt.wantErrIs != nil {
				assert.ErrorIs(t, err, tt.wantErrIs)
			}
		})
	}
}

func TestKafkaCloseTwice(t *testing.T) {
	k, err := embedded.StartKafka(embedded.KafkaOptions{})
	require.NoError(t, err)
	k.Close()
	k.Close()
}

func TestRedisMissingBinary(t *testing.T) {
	embedded.SkipShort(t)
	_, err := embedded.StartRedis(t.Context(), embedded.RedisOptions{Binary: "/nonexistent/redis-server"})
	assert.ErrorIs(t, err, embedded.ErrNotInstalled)
}

func TestCacheDir(t *testing.T) {
	t.Setenv(embedded.EnvCacheDir, "/some/where")
	d, err := embedded.CacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/some/where", d)

	t.Setenv(embedded.EnvCacheDir, "")
	t.Setenv("HOME", "/home/x")
	d, err = embedded.CacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/home/x/.cache/exactlyonce", d)
}
