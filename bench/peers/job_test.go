package peers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// job is a running system: the process measured, how to start it again
// after a kill, and what else it needs stopped.
type job struct {
	argv []string
	env  []string
	// resume returns the command line of a restart after a kill; nil:
	// argv again (the state directory, group and output are the same).
	resume func() ([]string, error)
	out    *os.File
	extra  []func()

	cmd    *exec.Cmd
	start  time.Time
	exited chan struct{}
}

func startProcess(t *testing.T, name string, argv []string, env ...string) *job {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	j := &job{argv: argv, env: env, out: out}
	if err := j.launch(argv); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(j.stop)
	return j
}

func (j *job) launch(argv []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = j.out, j.out
	cmd.Env = append(os.Environ(), j.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	j.cmd, j.start, j.exited = cmd, time.Now(), exited
	return nil
}

// kill is kill -9 of the job's process: no shutdown hook, no last flush.
func (j *job) kill() {
	if j.cmd != nil && j.cmd.Process != nil {
		_ = j.cmd.Process.Kill()
		<-j.exited
	}
}

// restart starts the killed job again the same way, so it resumes from
// what it had made durable.
func (j *job) restart() error {
	argv := j.argv
	if j.resume != nil {
		var err error
		if argv, err = j.resume(); err != nil {
			return err
		}
	}
	fmt.Fprintf(j.out, "\n--- restarted after kill -9: %s\n", strings.Join(argv[len(argv)-min(3, len(argv)):], " "))
	return j.launch(argv)
}

func (j *job) stop() {
	for _, f := range j.extra {
		f()
	}
	j.extra = nil
	j.kill()
}

func (j *job) logs() string {
	b, _ := os.ReadFile(j.out.Name())
	// The first lines hold a JVM's root cause, the last ones how it ended.
	if len(b) > 12000 {
		b = append(append(b[:6000:6000], "\n…\n"...), b[len(b)-6000:]...)
	}
	return string(b)
}

// progress is one poll of a system's output.
type progress struct {
	rows    int   // rows of events
	ids     int   // distinct event ids in them (rows when not counted)
	windows int   // rows of tenant_minute FINAL, sentinels left out
	sum     int64 // their counts' sum
}

// complete says whether the output holds every event and every window.
func (p progress) complete(in input) bool {
	return p.ids >= in.unique && p.windows >= len(in.windows) && p.sum >= in.realSum
}

// stalled is how long an output that has begun may stay the same before
// poll gives up: far longer than any system's pause (a JVM's start, a
// rebalance after a 10 s session timeout), far shorter than the deadline.
const stalled = 2 * time.Minute

// of describes a poll beside the truth.
func (p progress) of(in input) string {
	return fmt.Sprintf("events: %d rows, %d ids of %d; windows: %d of %d, counts summing to %d of %d",
		p.rows, p.ids, in.unique, p.windows, len(in.windows), p.sum, in.realSum)
}

// poll reads the output every 200 ms and hands each reading to each until
// it returns true. distinct counts the distinct ids (uniqExact, dearer):
// needed once the output may hold duplicates. It fails when the process
// exits or the output stays incomplete too long.
func (j *job) poll(t *testing.T, e *env, db string, distinct bool, each func(progress) bool) error {
	t.Helper()
	var pollErr error
	var last progress
	changed := time.Now()
	deadline := time.Now().Add(10*time.Minute + time.Duration(e.in.events)*50*time.Microsecond)
	ids := "count()"
	if distinct {
		ids = "uniqExact(event_id)"
	}
	q := fmt.Sprintf(`SELECT (SELECT count() FROM %[1]s.events) AS r, (SELECT %[3]s FROM %[1]s.events) AS i,
		(SELECT count() FROM %[1]s.tenant_minute FINAL WHERE NOT startsWith(tenant, '%[2]s')) AS w,
		(SELECT sum(events) FROM %[1]s.tenant_minute FINAL WHERE NOT startsWith(tenant, '%[2]s')) AS s`, db, e.in.sentinel, ids)
	for {
		select {
		case <-j.exited:
			return fmt.Errorf("the job exited before its output was complete (%v)", last.of(e.in))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("output incomplete after %v (%v)", time.Since(j.start).Round(time.Second), last.of(e.in))
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
		var p progress
		p.rows, _ = strconv.Atoi(rows[0][0])
		p.ids, _ = strconv.Atoi(rows[0][1])
		p.windows, _ = strconv.Atoi(rows[0][2])
		p.sum, _ = strconv.ParseInt(rows[0][3], 10, 64)
		if p != last {
			changed = time.Now()
		} else if p.rows > 0 && time.Since(changed) > stalled {
			return fmt.Errorf("the output stayed as it was for %v (%v)", stalled, p.of(e.in))
		}
		if last = p; each(p) {
			return nil
		}
	}
}

// await polls the output until it holds every unique event and every
// window, then reads the job's CPU time and peak RSS before it is killed.
func (j *job) await(t *testing.T, e *env, db string) (result, error) {
	var r result
	var statErr error
	err := j.poll(t, e, db, false, func(p progress) bool {
		if p.rows > 0 && r.firstOut == 0 {
			r.firstOut = time.Since(j.start)
			r.firstEvents = p.rows
			r.firstCPU, _, _ = procStats(j.cmd.Process.Pid)
		}
		if !p.complete(e.in) {
			return false
		}
		r.wall = time.Since(j.start)
		r.cpu, r.hwm, statErr = procStats(j.cmd.Process.Pid)
		return true
	})
	if err != nil {
		return r, err
	}
	return r, statErr
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
