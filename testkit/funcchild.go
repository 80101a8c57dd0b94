package testkit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// envReadyFD names, in a child started by Func, the file descriptor on
// which it tells the test it reached fn ('R') or why it will not ('E' and
// a message).
const envReadyFD = "EXACTLYONCE_TESTKIT_READY_FD"

// funcChild returns the name of the Func this process runs as a child for
// test t (or one of t's subtests), and whether it is such a child.
func funcChild(t testing.TB) (string, bool) {
	env := os.Getenv(EnvFunc)
	if env == "" || !strings.HasPrefix(env, t.Name()+"/") {
		return "", false
	}
	return env, true
}

// readyFile returns the child's end of the ready pipe, or nil.
func readyFile() *os.File {
	fd, err := strconv.Atoi(os.Getenv(envReadyFD))
	if err != nil || fd < 3 {
		return nil
	}
	os.Unsetenv(envReadyFD) // once: fn's own children must not write to it
	return os.NewFile(uintptr(fd), "testkit-ready")
}

// refuseInFuncChild stops a child started by Func that asks the kit for a
// server (what names the kit's function): the child runs the test again
// from its start, so the server would be its own, not the test's, and fn
// would work against it while the test waits on the test's servers for
// output that never comes. The child tells the test why (Func then fails
// the test with this message) and exits at once, before it starts
// anything.
func refuseInFuncChild(t testing.TB, what string) {
	child, ok := funcChild(t)
	if !ok {
		return
	}
	msg := fmt.Sprintf(`testkit: %s was called in the process testkit.Func started for %s.
That process runs the test again from its start, so a server the kit gave it would be its own,
on other ports, not the one the test reads: fn would write where the test never looks.
Start the servers in the test process only and hand fn what it needs with testkit.Setup,
whose func runs in the test process only (a Func process gets its result):

	cfg := testkit.Setup(t, "config", func() Config {
		addr, db := testkit.ClickHouse(t)
		return Config{Brokers: testkit.Kafka(t), ClickHouse: addr, Database: db}
	})
	svc := testkit.Func(t, "service", func(ctx context.Context) error { return run(ctx, cfg) })
`, what, child)
	if f := readyFile(); f != nil {
		_, _ = f.WriteString("E" + msg) // Func fails the test with it
		_ = f.Close()
	} else {
		fmt.Fprint(os.Stderr, msg) // fn is running: the test sees the exit
	}
	os.Exit(3)
}

// Setup runs fn in the test process and returns its result, and in a
// process Func started for this test returns the same result without
// running fn. It is how a service run by Func gets the test's servers:
// the child runs the test again from its start, so everything before Func
// runs twice unless it is inside Setup, and a server the kit started in
// the child would be another server (the kit refuses to: see Func).
//
//	cfg := testkit.Setup(t, "config", func() Config {
//		addr, db := testkit.ClickHouse(t)
//		brokers := testkit.Kafka(t)
//		topic := testkit.Name(t, "events")
//		testkit.CreateTopic(t, brokers, topic, 2)
//		return Config{Brokers: brokers, Topic: topic, ClickHouse: addr, Database: db}
//	})
//	svc := testkit.Func(t, "service", func(ctx context.Context) error { return run(ctx, cfg) })
//
// The result travels to the child as JSON in an environment variable set
// with t.Setenv (so the test cannot be parallel): exported fields only. The
// test process gets the JSON round trip too, so that parent and child see
// the same value. key tells apart the Setups of one test.
func Setup[T any](t *testing.T, key string, fn func() T) T {
	t.Helper()
	sum := sha256.Sum256([]byte(t.Name() + "/" + key))
	env := "EXACTLYONCE_TESTKIT_SETUP_" + hex.EncodeToString(sum[:8])
	var v T
	if child, ok := funcChild(t); ok {
		b, found := os.LookupEnv(env)
		if !found {
			t.Fatalf("testkit: Setup %q has no result in the process Func started for %s: call Setup before Func", key, child)
		}
		if err := json.Unmarshal([]byte(b), &v); err != nil {
			t.Fatalf("testkit: Setup %q: %v", key, err)
		}
		return v
	}
	b, err := json.Marshal(fn())
	if err != nil {
		t.Fatalf("testkit: Setup %q: its result must encode as JSON: %v", key, err)
	}
	t.Setenv(env, string(b))
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("testkit: Setup %q: %v", key, err)
	}
	return v
}
