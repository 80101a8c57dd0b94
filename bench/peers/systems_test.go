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

// startSDK builds sdkjob once and runs it with 1 s checkpoints.
func startSDK(t *testing.T, e *env, db string) *job {
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
	state := filepath.Join(e.stateDir, db)
	return startProcess(t, "sdk", []string{sdkBinary.path, "-brokers", strings.Join(e.brokers, ","), "-topic", e.topic,
		"-clickhouse", e.chAddr, "-database", db, "-state", state, "-group", db, "-interval", "1s"})
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
// the file system (the run's state directory, as the SDK's).
func flink(parallelism int, backend string) func(t *testing.T, e *env, db string) *job {
	return func(t *testing.T, e *env, db string) *job {
		t.Helper()
		return startProcess(t, "flink", javaJob(t, e, "flink", "peers.FlinkJob",
			strings.Join(e.brokers, ","), e.topic, e.chHTTP, db, fmt.Sprint(parallelism), "1000", backend,
			"file://"+filepath.Join(e.stateDir, db)))
	}
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

// report prints the systems' medians, with their ranges, as a Markdown
// table.
func report(t *testing.T, e *env, systems []system, results map[string][]result) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d records (%d unique, %d windows) on %d partitions; medians [min–max] of %s runs\n\n",
		e.in.events, e.in.unique, len(e.in.windows), partitions, runsOf(systems, results))
	b.WriteString("| system | events/s, start to end | steady events/s | job CPU-s per M events | steady CPU-s per M | peak RSS | first output after |\n|---|---|---|---|---|---|---|\n")
	for _, s := range systems {
		rs := results[s.name]
		if len(rs) == 0 {
			fmt.Fprintf(&b, "| %s | failed | | | | | |\n", s.desc)
			continue
		}
		eps := stat(rs, func(r result) float64 { return float64(e.in.events) / r.wall.Seconds() })
		cpu := stat(rs, func(r result) float64 { return r.cpu.Seconds() * 1e6 / float64(e.in.events) })
		rss := stat(rs, func(r result) float64 { return float64(r.hwm >> 20) })
		first := stat(rs, func(r result) float64 { return r.firstOut.Seconds() })
		// A run whose first poll found the whole output has no steady
		// part: the input was too small for it.
		steady := slices.DeleteFunc(slices.Clone(rs), func(r result) bool { v, _ := r.steady(e.in); return v == 0 })
		seps, scpu := "n/a (too small an input)", "n/a"
		if len(steady) > 0 {
			v := stat(steady, func(r result) float64 { v, _ := r.steady(e.in); return v })
			c := stat(steady, func(r result) float64 { _, c := r.steady(e.in); return c })
			seps = fmt.Sprintf("%.0f [%.0f–%.0f] (%d runs)", v[0], v[1], v[2], len(steady))
			scpu = fmt.Sprintf("%.1f [%.1f–%.1f]", c[0], c[1], c[2])
		}
		fmt.Fprintf(&b, "| %s | %.0f [%.0f–%.0f] | %s | %.1f [%.1f–%.1f] | %s | %.0f MB [%.0f–%.0f] | %.1f s [%.1f–%.1f] |\n",
			s.desc, eps[0], eps[1], eps[2], seps, cpu[0], cpu[1], cpu[2], scpu,
			rss[0], rss[1], rss[2], first[0], first[1], first[2])
	}
	fmt.Print(b.String())
	t.Log(b.String())
}

func runsOf(systems []system, results map[string][]result) string {
	var ns []string
	for _, s := range systems {
		ns = append(ns, fmt.Sprint(len(results[s.name])))
	}
	return strings.Join(slices.Compact(ns), "/")
}

// stat returns the median, min and max of f over rs.
func stat(rs []result, f func(result) float64) [3]float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return [3]float64{med, vs[0], vs[len(vs)-1]}
}
