package testkit_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// envObvious makes TestFuncObviousPattern run: it is the test a user
// writes first, and TestFuncRefusesServersBeforeIt runs it in a process of
// its own to see it fail.
const envObvious = "TESTKIT_OBVIOUS_PATTERN_DIR"

// TestFuncObviousPattern starts a server, then Func with a closure that
// captures the server's address, and waits for fn to report the address
// it was given. Before the kit refused it, the child started a Redis of
// its own and reported that one's address, and this test waited until its
// deadline.
func TestFuncObviousPattern(t *testing.T) {
	dir := os.Getenv(envObvious)
	if dir == "" {
		t.Skip("run by TestFuncRefusesServersBeforeIt")
	}
	addr := testkit.Redis(t)
	testkit.Func(t, "service", func(context.Context) error {
		return os.WriteFile(filepath.Join(dir, "addr"), []byte(addr), 0o644)
	})
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "addr"))
		return string(b) == addr
	}, 30*time.Second, 10*time.Millisecond, "fn never saw the test's server")
}

// TestFuncRefusesServersBeforeIt: the obvious pattern fails the test at
// Func, with a message that names the call and shows testkit.Setup; it
// does not run into its deadline.
func TestFuncRefusesServersBeforeIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the test binary again")
	}
	if os.Getenv(testkit.EnvFunc) != "" || os.Getenv(envObvious) != "" {
		t.Skip("a child")
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestFuncObviousPattern$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envObvious+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the obvious pattern passed:\n%s", out)
	assert.Contains(t, string(out), "testkit.Redis was called in the process testkit.Func started for TestFuncObviousPattern/service")
	assert.Contains(t, string(out), "testkit.Setup(t,")
	assert.NotContains(t, string(out), "fn never saw the test's server", "the test ran into its deadline instead of failing at Func")
}

// TestFuncSetup is the pattern the kit recommends: the servers come from
// Setup, which runs in the test process only, so fn in the child works
// against the test's server (here: it reads the key the test wrote to the
// test's Redis, and writes one back).
func TestFuncSetup(t *testing.T) {
	type config struct {
		Redis string
		Key   string
		Dir   string
	}
	cfg := testkit.Setup(t, "config", func() config {
		return config{Redis: testkit.Redis(t), Key: testkit.Name(t, "k"), Dir: t.TempDir()}
	})
	svc := testkit.Func(t, "service", func(ctx context.Context) error {
		return os.WriteFile(filepath.Join(cfg.Dir, "seen"), []byte(cfg.Redis+" "+cfg.Key), 0o644)
	})
	require.NoError(t, svc.Wait(time.Minute), "fn returned nil")
	b, err := os.ReadFile(filepath.Join(cfg.Dir, "seen"))
	require.NoError(t, err)
	assert.Equal(t, cfg.Redis+" "+cfg.Key, string(b), "the child got the test's server and name")
}

// TestFuncTwo: a test with two funcs runs both; the second's child passes
// the first Func without starting it (it used to skip the test there, and
// the second func never ran).
func TestFuncTwo(t *testing.T) {
	dir := testkit.Setup(t, "dir", func() string { return t.TempDir() })
	write := func(name string) func(context.Context) error {
		return func(context.Context) error { return os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644) }
	}
	a := testkit.Func(t, "a", write("a"))
	b := testkit.Func(t, "b", write("b"))
	require.NoError(t, a.Wait(time.Minute))
	require.NoError(t, b.Wait(time.Minute))
	for _, name := range []string{"a", "b"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err, "func %s did not run", name)
		assert.Equal(t, name, string(got))
	}
}

// TestFuncInSubtest: a subtest whose name holds regexp characters runs its
// func (the child's -test.run pattern quotes the name), and only its own.
func TestFuncInSubtest(t *testing.T) {
	for _, name := range []string{"kill after step 3 (a2)", "a+b [x]"} {
		t.Run(name, func(t *testing.T) {
			dir := testkit.Setup(t, "dir", func() string { return t.TempDir() })
			p := testkit.Func(t, "f", func(context.Context) error {
				return os.WriteFile(filepath.Join(dir, "ran"), []byte(t.Name()), 0o644)
			})
			require.NoError(t, p.Wait(time.Minute), "%s", p.Logs())
			got, err := os.ReadFile(filepath.Join(dir, "ran"))
			require.NoError(t, err, "the func did not run: %s", p.Logs())
			assert.Equal(t, t.Name(), string(got))
		})
	}
}
