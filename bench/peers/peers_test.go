package peers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// Environment of TestPeers.
const (
	envRun     = "PEERS"         // 1 runs TestPeers (make bench-peers sets it)
	envEvents  = "PEERS_EVENTS"  // records in the input; default 200,000
	envMinutes = "PEERS_MINUTES" // event-time span of the input; default 30
	envRounds  = "PEERS_ROUNDS"  // runs of every system, the order reversed every other round; default 1
	envSystems = "PEERS_SYSTEMS" // systems to run, comma-separated; default sdk,flink,kstreams (variants: flink-rocksdb, flink-p1, kstreams-memory)
	envCache   = "PEERS_CACHE"   // where make bench-peers built the Java jobs; default ~/.cache/exactlyonce/peers
)

// tableDDL is every system's output, in a database of its own per run.
var tableDDL = []string{
	`CREATE TABLE %[1]s.events (tenant LowCardinality(String), event_id String, at DateTime64(3, 'UTC'))
	ENGINE = MergeTree ORDER BY (tenant, at, event_id)
	SETTINGS non_replicated_deduplication_window = 10000, enable_block_number_column = 1`,
	`CREATE TABLE %[1]s.tenant_minute (tenant String, start DateTime64(3, 'UTC'), version UInt64, events UInt64)
	ENGINE = ReplacingMergeTree(version) ORDER BY (tenant, start)
	SETTINGS non_replicated_deduplication_window = 10000`,
}

// env is what every system's run gets.
type env struct {
	brokers  []string
	topic    string
	chAddr   string
	cache    string
	in       input
	chHTTP   string // the HTTP front of ClickHouse (bridge)
	stateDir string
}

// system is one of the compared jobs.
type system struct {
	name string
	desc string
	// start starts the job writing into database db and returns it; the
	// job runs until killed.
	start func(t *testing.T, e *env, db string) *job
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

// TestPeers generates one input, runs each system on it (each in its own
// process, writing to its own database), waits until the output holds
// every event, measures the job process, and checks the output against the
// ground truth: a wrong output fails the test and has no figure.
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
		{name: "sdk", desc: "the SDK (kafkasource, dedup, window, chsink), 1 s checkpoints", start: startSDK},
		{name: "flink", desc: "Flink 2.2.1 local, parallelism 2, HashMap state, 1 s checkpoints", start: flink(2, "hashmap")},
		{name: "kstreams", desc: "Kafka Streams 4.4, exactly_once_v2, RocksDB stores", start: kstreams("rocksdb")},
	}
	// The variants run only when PEERS_SYSTEMS names them.
	variants := []system{
		{name: "flink-rocksdb", desc: "Flink 2.2.1 local, parallelism 2, RocksDB state, 1 s checkpoints", start: flink(2, "rocksdb")},
		{name: "flink-p1", desc: "Flink 2.2.1 local, parallelism 1, HashMap state, 1 s checkpoints", start: flink(1, "hashmap")},
		{name: "kstreams-memory", desc: "Kafka Streams 4.4, exactly_once_v2, in-memory stores", start: kstreams("memory")},
	}
	if only := os.Getenv(envSystems); only != "" {
		systems = slices.DeleteFunc(append(systems, variants...), func(s system) bool { return !strings.Contains(","+only+",", ","+s.name+",") })
	}

	brokers := testkit.Kafka(t)
	chAddr, _ := testkit.ClickHouse(t)
	e := &env{brokers: brokers, topic: testkit.Name(t, "peers-in"), chAddr: chAddr, cache: cache, stateDir: t.TempDir()}
	e.chHTTP = startBridge(t, chAddr)
	testkit.CreateTopic(t, brokers, e.topic, partitions)
	t.Logf("machine: %d cores; load average %s", runtime.NumCPU(), loadavg())
	t0 := time.Now()
	e.in = generate(t, brokers, e.topic, n, minutes)
	t.Logf("input: %d records, %d unique events, %d windows, on %d partitions (produced in %v)",
		e.in.events, e.in.unique, len(e.in.windows), partitions, time.Since(t0).Round(time.Millisecond))

	results := map[string][]result{}
	for round := range rounds {
		order := slices.Clone(systems)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			r, ok := runOne(t, e, s)
			if !ok {
				continue
			}
			results[s.name] = append(results[s.name], r)
			eps, cpu := r.steady(e.in)
			t.Logf("load average %s", loadavg())
			t.Logf("round %d %s: %.0f events/s (steady %.0f), %v to the first output row (%d events), %.2f CPU-s per million events (steady %.2f), peak RSS %d MB",
				round+1, s.name, float64(e.in.events)/r.wall.Seconds(), eps, r.firstOut.Round(time.Millisecond), r.firstEvents,
				r.cpu.Seconds()*1e6/float64(e.in.events), cpu, r.hwm>>20)
		}
	}
	report(t, e, systems, results)
}

// runOne runs s once; false if its output was wrong (the test has failed).
func runOne(t *testing.T, e *env, s system) (result, bool) {
	t.Helper()
	db := testkit.NewDatabase(t, e.chAddr)
	for _, q := range tableDDL {
		if err := testkit.Exec(context.Background(), e.chAddr, "", fmt.Sprintf(q, db)); err != nil {
			t.Fatal(err)
		}
	}
	j := s.start(t, e, db)
	defer j.stop()
	r, err := j.await(t, e, db)
	if err != nil {
		t.Errorf("%s: %v\n%s", s.name, err, j.logs())
		return r, false
	}
	if err := check(t, e, db); err != nil {
		t.Errorf("%s: wrong output, no figure: %v", s.name, err)
		return r, false
	}
	return r, true
}

// job is a running system: the process measured, and what else it needs
// stopped.
type job struct {
	cmd    *exec.Cmd
	out    *os.File
	start  time.Time
	extra  []func()
	exited chan struct{}
}

func startProcess(t *testing.T, name string, argv []string, env ...string) *job {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	j := &job{cmd: cmd, out: out, start: time.Now(), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(j.exited) }()
	t.Cleanup(j.stop)
	return j
}

func (j *job) stop() {
	for _, f := range j.extra {
		f()
	}
	j.extra = nil
	if j.cmd.Process != nil {
		_ = j.cmd.Process.Kill()
		<-j.exited
	}
}

func (j *job) logs() string {
	b, _ := os.ReadFile(j.out.Name())
	// The first lines hold a JVM's root cause, the last ones how it ended.
	if len(b) > 12000 {
		b = append(append(b[:6000:6000], "\n…\n"...), b[len(b)-6000:]...)
	}
	return string(b)
}

// await polls the output until it holds every unique event and every
// window, then reads the job's CPU time and peak RSS before it is killed.
func (j *job) await(t *testing.T, e *env, db string) (result, error) {
	var r result
	var pollErr error
	deadline := time.Now().Add(10*time.Minute + time.Duration(e.in.events)*50*time.Microsecond)
	q := fmt.Sprintf(`SELECT (SELECT count() FROM %[1]s.events) AS e,
		(SELECT count() FROM %[1]s.tenant_minute FINAL WHERE NOT startsWith(tenant, '%[2]s')) AS w,
		(SELECT sum(events) FROM %[1]s.tenant_minute FINAL WHERE NOT startsWith(tenant, '%[2]s')) AS s`, db, e.in.sentinel)
	for {
		select {
		case <-j.exited:
			return r, fmt.Errorf("the job exited before its output was complete")
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("output incomplete after %v", time.Since(j.start).Round(time.Second))
		}
		rows, err := testkit.QueryStrings(context.Background(), e.chAddr, "", q)
		if err == nil && len(rows) != 1 {
			err = fmt.Errorf("%d rows", len(rows))
		}
		if err != nil {
			if pollErr == nil || err.Error() != pollErr.Error() {
				t.Logf("polling the output: %v", err)
			}
			pollErr = err
			continue
		}
		evs, _ := strconv.Atoi(rows[0][0])
		wins, _ := strconv.Atoi(rows[0][1])
		sum, _ := strconv.ParseInt(rows[0][2], 10, 64)
		if evs > 0 && r.firstOut == 0 {
			r.firstOut = time.Since(j.start)
			r.firstEvents = evs
			r.firstCPU, _, _ = procStats(j.cmd.Process.Pid)
		}
		if evs >= e.in.unique && wins >= len(e.in.windows) && sum >= e.in.realSum {
			r.wall = time.Since(j.start)
			r.cpu, r.hwm, err = procStats(j.cmd.Process.Pid)
			return r, err
		}
	}
}

// procStats reads a process's CPU time (utime+stime, all its threads) and
// peak resident set (VmHWM).
func procStats(pid int) (time.Duration, int64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command, which may hold spaces: ") S ppid ...";
	// utime and stime are fields 14 and 15, so 12 and 13 after ")".
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	var hwm int64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			hwm = kb << 10
		}
	}
	return time.Duration(ut+st) * time.Second / ticks, hwm, nil
}

// check compares the output with the ground truth: every event id once,
// no other, and every window's count (FINAL) exact.
func check(t *testing.T, e *env, db string) error {
	t.Helper()
	rows, err := testkit.QueryStrings(context.Background(), e.chAddr, "",
		fmt.Sprintf("SELECT count(), uniqExact(event_id) FROM %s.events", db))
	if err != nil {
		return err
	}
	if rows[0][0] != strconv.Itoa(e.in.unique) || rows[0][1] != strconv.Itoa(e.in.unique) {
		return fmt.Errorf("events: %s rows, %s distinct ids; want %d of each", rows[0][0], rows[0][1], e.in.unique)
	}
	rows, err = testkit.QueryStrings(context.Background(), e.chAddr, "",
		fmt.Sprintf("SELECT tenant, toUnixTimestamp64Milli(start), events FROM %s.tenant_minute FINAL WHERE NOT startsWith(tenant, '%s')", db, e.in.sentinel))
	if err != nil {
		return err
	}
	got := map[window]int64{}
	for _, r := range rows {
		start, _ := strconv.ParseInt(r[1], 10, 64)
		n, _ := strconv.ParseInt(r[2], 10, 64)
		got[window{r[0], start}] = n
	}
	var wrong []string
	for w, want := range e.in.windows {
		if got[w] != want {
			wrong = append(wrong, fmt.Sprintf("%s %s: %d, want %d", w.tenant, time.UnixMilli(w.start).UTC().Format("15:04"), got[w], want))
		}
	}
	for w, n := range got {
		if _, ok := e.in.windows[w]; !ok {
			wrong = append(wrong, fmt.Sprintf("%s %s: %d, want none", w.tenant, time.UnixMilli(w.start).UTC().Format("15:04"), n))
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		return fmt.Errorf("%d of %d windows wrong, e.g. %s", len(wrong), len(e.in.windows), strings.Join(wrong[:min(5, len(wrong))], "; "))
	}
	return nil
}

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
