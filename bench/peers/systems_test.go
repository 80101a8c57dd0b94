package peers

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
)

var sdkBinary struct {
	once sync.Once
	path string
	err  error
}

// startSDK builds sdkjob once and runs it with 1 s checkpoints or none
// (-interval -1s: the sinks then insert by size and by MaxDelay, 1 s).
func startSDK(t *testing.T, e *env, db string, checkpoints bool) *job {
	t.Helper()
	sdkBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "peers-sdkjob-")
		if err != nil {
			sdkBinary.err = err
			return
		}
		sdkBinary.path = filepath.Join(dir, "sdkjob")
		out, err := exec.Command("go", "build", "-o", sdkBinary.path, "github.com/exactlyonce/exactlyonce/bench/peers/sdkjob").CombinedOutput()
		if err != nil {
			sdkBinary.err = fmt.Errorf("go build sdkjob: %w\n%s", err, out)
		}
	})
	if sdkBinary.err != nil {
		t.Fatal(sdkBinary.err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(sdkBinary.path)) })
	interval := "1s"
	if !checkpoints {
		interval = "-1s"
	}
	state := filepath.Join(e.stateDir, db)
	argv := []string{sdkBinary.path, "-brokers", strings.Join(e.brokers, ","), "-topic", e.topic,
		"-clickhouse", e.chAddr, "-database", db, "-state", state, "-group", db, "-interval", interval}
	if addr := os.Getenv(envSDKPprof); addr != "" {
		argv = append(argv, "-pprof", addr)
	}
	return startProcess(t, "sdk", argv)
}

// javaJob returns the java command line of a job make bench-peers built
// into e.cache/dir: its classes and its dependencies' jars.
func javaJob(t *testing.T, e *env, dir, class string, args ...string) []string {
	t.Helper()
	base := filepath.Join(e.cache, dir)
	cp, err := os.ReadFile(filepath.Join(base, "classpath.txt"))
	if err != nil {
		t.Fatalf("%s: %v (make bench-peers builds the Java jobs)", dir, err)
	}
	java := "java"
	if home := os.Getenv("JAVA_HOME"); home != "" {
		java = filepath.Join(home, "bin", "java")
	}
	return append([]string{java, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", filepath.Join(base, "classes") + string(os.PathListSeparator) + strings.TrimSpace(string(cp)), class}, args...)
}

// flink runs the Flink job in a local MiniCluster with that parallelism
// and state backend (hashmap or rocksdb), checkpoints every second to
// the file system (the run's state directory, as the SDK's) or none. A
// restart after a kill resumes from the last completed checkpoint.
func flink(parallelism int, backend string) func(t *testing.T, e *env, db string, checkpoints bool) *job {
	return func(t *testing.T, e *env, db string, checkpoints bool) *job {
		t.Helper()
		interval := "1000"
		if !checkpoints {
			interval = "0"
		}
		dir := filepath.Join(e.stateDir, db)
		j := startProcess(t, "flink", javaJob(t, e, "flink", "peers.FlinkJob",
			strings.Join(e.brokers, ","), e.topic, e.chHTTP, db, fmt.Sprint(parallelism), interval, backend, "file://"+dir))
		argv := j.argv
		j.resume = func() ([]string, error) {
			chk, err := lastCheckpoint(dir)
			if err != nil {
				return nil, err
			}
			return append(slices.Clone(argv), "file://"+chk), nil
		}
		return j
	}
}

// lastCheckpoint returns the newest completed checkpoint under a Flink
// checkpoint directory: the chk-N directory with the highest N that holds
// its _metadata (written last).
func lastCheckpoint(dir string) (string, error) {
	found, err := filepath.Glob(filepath.Join(dir, "*", "chk-*", "_metadata"))
	if err != nil {
		return "", err
	}
	best, bestN := "", -1
	for _, f := range found {
		chk := filepath.Dir(f)
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(chk), "chk-")); err == nil && n > bestN {
			best, bestN = chk, n
		}
	}
	if best == "" {
		return "", fmt.Errorf("no completed checkpoint under %s", dir)
	}
	return best, nil
}

// startBridge serves ClickHouse's HTTP interface for inserts (POST
// /?query=INSERT … FORMAT …, the data as the body) in front of the kit's
// ClickHouse, which speaks only the native protocol: each request is one
// native query carrying its data inline, on a connection of its own. The
// Flink job's sink posts to it as it would to a ClickHouse server; the
// bridge's CPU is this test process's, not the job's.
func startBridge(t *testing.T, chAddr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		if r.Method != http.MethodPost || !strings.HasPrefix(strings.ToUpper(q), "INSERT ") {
			http.Error(w, "only POST /?query=INSERT …", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
		defer cancel()
		c, err := ch.Dial(ctx, ch.Options{Address: chAddr})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer c.Close()
		if err := c.Do(ctx, ch.Query{Body: q + "\n" + string(body)}); err != nil {
			t.Logf("clickhouse bridge: %s: %v", q, err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}
