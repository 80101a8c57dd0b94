package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// Environment of TestPeers.
const (
	envRun      = "PEERS"           // 1 runs TestPeers (make bench-peers sets it)
	envEvents   = "PEERS_EVENTS"    // records in the input; default 200,000
	envMinutes  = "PEERS_MINUTES"   // event-time span of the input; default 30
	envRounds   = "PEERS_ROUNDS"    // runs of every system and mode, the systems' order reversed every other round; default 1
	envSystems  = "PEERS_SYSTEMS"   // systems to run, comma-separated; default sdk,flink,kstreams (variants: flink-rocksdb, flink-p1, kstreams-memory)
	envModes    = "PEERS_MODES"     // modes to run, comma-separated; default ckpt,nockpt,recovery
	envCache    = "PEERS_CACHE"     // where make bench-peers built the Java jobs; default ~/.cache/exactlyonce/peers
	envSDKPprof = "PEERS_SDK_PPROF" // an address: sdkjob serves net/http/pprof there, for a profile of the running job
	envOut      = "PEERS_OUT"       // file for the results in go test -bench lines (benchreport reads it); default none
)

// mode is what a run measures (doc.go).
type mode string

const (
	ckpt     mode = "ckpt"     // throughput with checkpoints every second
	nockpt   mode = "nockpt"   // throughput with checkpoints off
	recovery mode = "recovery" // kill -9 at half the output, restart, time until complete again
)

var modes = []mode{ckpt, nockpt, recovery}

// env is what every system's run gets.
type env struct {
	brokers  []string
	topic    string
	chAddr   string
	cache    string
	in       input
	chHTTP   string // the HTTP front of ClickHouse (bridge)
	stateDir string
	minutes  int // the input's event-time span
}

// system is one of the compared jobs.
type system struct {
	name string
	desc string
	// start starts the job writing into database db, with checkpoints
	// every second or none, and returns it; the job runs until killed.
	start func(t *testing.T, e *env, db string, checkpoints bool) *job
	// exact: the output is exactly-once even across a kill; a duplicate
	// after recovery fails the run (the SDK). The peers' ClickHouse
	// outputs are at-least-once: their duplicates are counted.
	exact bool
}

// result is one run's measurement of a checked output.
type result struct {
	wall, firstOut time.Duration
	cpu            time.Duration // the job process's utime+stime
	hwm            int64         // its VmHWM, bytes
	// At the first poll that found output: the unique events written
	// by then and the job's CPU time, for the steady figures (start-up
	// left out).
	firstEvents int
	firstCPU    time.Duration

	// Recovery runs: the events rows when the process was killed, the
	// time from the kill until the output was complete again, and what
	// the output then held beyond the truth.
	killedAt int
	recovery time.Duration
	dupes    dupes
}

// steady returns events/s and CPU-seconds per million input events
// between the first poll that found output and the end: the input
// events are counted as the unique events written, scaled by the input's
// records per unique event.
func (r result) steady(in input) (eps, cpuPerM float64) {
	events := float64(in.unique-r.firstEvents) * float64(in.events) / float64(in.unique)
	if events <= 0 || r.wall <= r.firstOut {
		return 0, 0
	}
	return events / (r.wall - r.firstOut).Seconds(), (r.cpu - r.firstCPU).Seconds() * 1e6 / events
}

// TestPeers generates one input, runs each system on it in each mode (each
// run in its own process, writing to its own database), waits until the
// output holds every event, measures the job process, and checks the
// output against the ground truth: a wrong output fails the test and has
// no figure (after a recovery, a peer's duplicates are counted instead).
func TestPeers(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("the side-by-side run: %s=1 (make bench-peers) runs it", envRun)
	}
	n := envInt(t, envEvents, 200_000)
	minutes := envInt(t, envMinutes, 30)
	rounds := envInt(t, envRounds, 1)
	cache := os.Getenv(envCache)
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "exactlyonce", "peers")
	}
	systems := []system{
		{name: "sdk", desc: "the SDK (kafkasource, dedup, window, chsink)", start: startSDK, exact: true},
		{name: "flink", desc: "Flink 2.2.1 local, parallelism 2, HashMap state", start: flink(2, "hashmap")},
		{name: "kstreams", desc: "Kafka Streams 4.4, RocksDB stores", start: kstreams("rocksdb")},
	}
	// The variants run only when PEERS_SYSTEMS names them.
	variants := []system{
		{name: "flink-rocksdb", desc: "Flink 2.2.1 local, parallelism 2, RocksDB state", start: flink(2, "rocksdb")},
		{name: "flink-p1", desc: "Flink 2.2.1 local, parallelism 1, HashMap state", start: flink(1, "hashmap")},
		{name: "kstreams-memory", desc: "Kafka Streams 4.4, in-memory stores", start: kstreams("memory")},
	}
	if only := os.Getenv(envSystems); only != "" {
		systems = slices.DeleteFunc(append(systems, variants...), func(s system) bool { return !listed(only, s.name) })
	}
	runModes := slices.Clone(modes)
	if only := os.Getenv(envModes); only != "" {
		runModes = slices.DeleteFunc(runModes, func(m mode) bool { return !listed(only, string(m)) })
	}

	brokers := testkit.Kafka(t)
	chAddr, _ := testkit.ClickHouse(t)
	e := &env{brokers: brokers, topic: testkit.Name(t, "peers-in"), chAddr: chAddr, cache: cache, stateDir: t.TempDir(), minutes: minutes}
	e.chHTTP = startBridge(t, chAddr)
	testkit.CreateTopic(t, brokers, e.topic, partitions)
	t.Logf("machine: %d cores; load average %s", runtime.NumCPU(), loadavg())
	t0 := time.Now()
	e.in = generate(t, brokers, e.topic, n, minutes)
	t.Logf("input: %d records, %d unique events, %d windows, on %d partitions (produced in %v)",
		e.in.events, e.in.unique, len(e.in.windows), partitions, time.Since(t0).Round(time.Millisecond))

	results := map[string][]result{} // by system and mode: "sdk/ckpt"
	for round := range rounds {
		order := slices.Clone(systems)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range runModes {
			for _, s := range order {
				r, ok := runOne(t, e, s, m)
				if !ok {
					continue
				}
				results[s.name+"/"+string(m)] = append(results[s.name+"/"+string(m)], r)
				t.Logf("round %d %s %s: %s; load average %s", round+1, s.name, m, r.describe(e.in, m), loadavg())
			}
		}
	}
	report(t, e, systems, runModes, results)
	if path := os.Getenv(envOut); path != "" {
		writeResults(t, path, e, systems, runModes, results)
	}
}

// runOne runs s once in mode m; false if it failed (the test has failed).
func runOne(t *testing.T, e *env, s system, m mode) (result, bool) {
	t.Helper()
	if m == recovery {
		return runRecovery(t, e, s)
	}
	db := newOutput(t, e)
	j := s.start(t, e, db, m == ckpt)
	defer j.stop()
	r, err := j.await(t, e, db)
	if err != nil {
		t.Errorf("%s %s: %v\n%s", s.name, m, err, j.logs())
		return r, false
	}
	if err := check(t, e, db); err != nil {
		t.Errorf("%s %s: wrong output, no figure: %v", s.name, m, err)
		return r, false
	}
	return r, true
}

// describe is one run's line of the log.
func (r result) describe(in input, m mode) string {
	if m == recovery {
		return fmt.Sprintf("killed at %d of %d events, complete again %v after the kill; %v",
			r.killedAt, in.unique, r.recovery.Round(time.Millisecond), r.dupes)
	}
	eps, cpu := r.steady(in)
	return fmt.Sprintf("%.0f events/s (steady %.0f), %v to the first output row (%d events), %.2f CPU-s per million events (steady %.2f), peak RSS %d MB",
		float64(in.events)/r.wall.Seconds(), eps, r.firstOut.Round(time.Millisecond), r.firstEvents,
		r.cpu.Seconds()*1e6/float64(in.events), cpu, r.hwm>>20)
}

func listed(list, name string) bool { return strings.Contains(","+list+",", ","+name+",") }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
