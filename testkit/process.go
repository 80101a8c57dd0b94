package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvFunc names, in a child started by Func, the function it runs.
const EnvFunc = "EXACTLYONCE_TESTKIT_FUNC"

// Process is a user's service running under a test's supervision: a binary
// (Command) or a func(ctx) error in a process of its own (Func). The test
// can kill it with SIGKILL, freeze and thaw it (SIGSTOP, SIGCONT), restart
// it, and learn when it exits on its own. Its stdout and stderr are kept
// (Logs) and written to the test log when the test fails. It is killed at
// the test's cleanup.
//
// Its methods fail the test on error; call them from the test's goroutine.
type Process struct {
	t    testing.TB
	name string
	argv []string
	env  []string
	// handshake: the process is a Func child, which reports on a pipe
	// whether it reached fn.
	handshake bool

	mu     sync.Mutex
	logs   bytes.Buffer
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current run ended
	err    error         // how it ended
}

// Command returns the binary at path with args as a Process, started.
// env is added to the test's environment.
func Command(t testing.TB, path string, args []string, env ...string) *Process {
	t.Helper()
	p := &Process{t: t, name: path, argv: append([]string{path}, args...), env: env}
	p.Start()
	return p
}

// Func runs fn in a process of its own, so that it can be killed: the test
// binary is started again, running only this test, with EnvFunc naming
// fn. name tells apart the funcs of one test. In the test, Func returns
// the started Process once the child reached fn (so a Kill right after it
// kills a running fn). In the child, Func runs fn with a context that ends
// on SIGTERM or SIGINT and exits (status 0 if fn returned nil, else 1, its
// error on stderr), never returning.
//
// The child runs the test from its start up to Func, so what the test does
// before Func happens twice, once in each process. Servers therefore come
// through Setup, whose func runs in the test process only and whose result
// the child gets:
//
//	cfg := testkit.Setup(t, "config", func() Config {
//		addr, db := testkit.ClickHouse(t)
//		return Config{Brokers: testkit.Kafka(t), ClickHouse: addr, Database: db}
//	})
//	svc := testkit.Func(t, "service", func(ctx context.Context) error { return run(ctx, cfg) })
//
// Starting the servers before Func without Setup and capturing them in
// fn's closure would hand fn servers the child started for itself, on
// other ports, and the test would wait for output that never comes. The
// kit refuses that: in a Func child its server functions (ClickHouse,
// Kafka, Redis, NewDatabase and the Start functions) exit the child at
// once, and Func fails the test with a message that shows the pattern
// above. Anything else that must not happen twice (producing input,
// creating tables) belongs in Setup too.
func Func(t *testing.T, name string, fn func(ctx context.Context) error) *Process {
	t.Helper()
	if os.Getenv(EnvFunc) == t.Name()+"/"+name {
		if f := readyFile(); f != nil {
			_, _ = f.WriteString("R")
			_ = f.Close()
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		err := fn(ctx)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if _, ok := funcChild(t); ok {
		// The child of another func of this test: that func comes later in
		// the test, so go on without starting this one.
		return &Process{t: t, name: name}
	}
	if os.Getenv(EnvFunc) != "" {
		t.Skipf("testkit: a child running %s", os.Getenv(EnvFunc))
	}
	p := &Process{t: t, name: name, argv: []string{os.Args[0], "-test.run=" + runPattern(t.Name()), "-test.count=1"},
		env: []string{EnvFunc + "=" + t.Name() + "/" + name}, handshake: true}
	p.Start()
	return p
}

// runPattern is the -test.run pattern of test name and no other: each
// level of a subtest's name quoted (a name such as "kill after step 3
// (a2)" holds regexp characters) and anchored.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// Start starts the process; it must not be running. For a Func it returns
// once the child reached fn, and fails the test if the child exits before
// (with the reason the kit gave, or the child's output).
func (p *Process) Start() {
	p.t.Helper()
	if p.argv == nil {
		p.t.Fatalf("testkit: %s is another func's placeholder in a child process", p.name)
	}
	p.mu.Lock()
	if p.cmd != nil && !closed(p.exited) {
		p.mu.Unlock()
		p.t.Fatalf("testkit: %s is already running", p.name)
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = (*logWriter)(p), (*logWriter)(p)
	var ready *os.File
	if p.handshake {
		r, w, err := os.Pipe()
		if err != nil {
			p.mu.Unlock()
			p.t.Fatalf("testkit: start %s: %v", p.name, err)
		}
		defer r.Close()
		ready = r
		cmd.ExtraFiles = []*os.File{w} // fd 3 in the child
		cmd.Env = append(cmd.Env, envReadyFD+"=3")
		defer w.Close()
	}
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		p.t.Fatalf("testkit: start %s: %v", p.name, err)
	}
	if len(cmd.ExtraFiles) > 0 {
		_ = cmd.ExtraFiles[0].Close() // the child holds its end: EOF when it exits
	}
	if p.cmd == nil { // the first start: clean up once
		p.t.Cleanup(p.cleanup)
	}
	p.cmd, p.exited, p.err = cmd, make(chan struct{}), nil
	go func(cmd *exec.Cmd, exited chan struct{}) {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exited)
	}(cmd, p.exited)
	p.mu.Unlock()
	if ready != nil {
		p.awaitReady(ready)
	}
}

// awaitReady waits until a Func child reports that it reached fn, and
// fails the test if it reports that it will not, or ends first.
func (p *Process) awaitReady(r *os.File) {
	p.t.Helper()
	// A child that runs the test's set-up before Func may take a while,
	// but not longer than the kit's own server starts.
	_ = r.SetReadDeadline(time.Now().Add(startTimeout))
	// Read the first byte only: after 'R' the pipe may stay open in a
	// process the child started before it reached Func.
	var first [1]byte
	_, err := io.ReadFull(r, first[:])
	switch {
	case err == nil && first[0] == 'R':
		return
	case err == nil && first[0] == 'E':
		msg, _ := io.ReadAll(io.LimitReader(r, 1<<16)) // the child exits right after writing
		<-p.Exited()
		p.t.Fatalf("testkit.Func(t, %q) did not start fn:\n%s", p.name, msg)
	case errors.Is(err, os.ErrDeadlineExceeded):
		p.t.Fatalf("testkit.Func(t, %q): the child did not reach Func within %v; its output so far:\n%s", p.name, startTimeout, p.Logs())
	default:
		<-p.Exited()
		p.t.Fatalf("testkit.Func(t, %q): the child ended (%v) before it reached Func: it ran the test from its start and failed or skipped on the way; its output:\n%s",
			p.name, p.Err(), p.Logs())
	}
}

// Exited returns a channel closed when the current run ends, by a kill or
// on its own.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// Err returns how the last run ended (nil for exit status 0, an
// *exec.ExitError otherwise), and nil while it runs.
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// PID returns the process id of the current (or last) run, 0 before the
// first start: for a test that watches the process itself (its state in
// /proc, its open files).
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process runs (or is stopped by SIGSTOP).
func (p *Process) Running() bool {
	select {
	case <-p.Exited():
		return false
	default:
		return true
	}
}

// Wait waits for the current run to end, at most d, and returns how it
// ended; the test fails if it is still running then.
func (p *Process) Wait(d time.Duration) error {
	p.t.Helper()
	select {
	case <-p.Exited():
		return p.Err()
	case <-time.After(d):
		p.t.Fatalf("testkit: %s still running after %v", p.name, d)
		return nil
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Process) Kill() { p.t.Helper(); p.signal(syscall.SIGKILL, true) }

// Stop freezes the process with SIGSTOP (a machine that stalls).
func (p *Process) Stop() { p.t.Helper(); p.signal(syscall.SIGSTOP, false) }

// Continue thaws a process frozen by Stop with SIGCONT.
func (p *Process) Continue() { p.t.Helper(); p.signal(syscall.SIGCONT, false) }

// Terminate sends SIGTERM (a graceful stop: Func's context ends) and waits
// for the process to exit, at most d.
func (p *Process) Terminate(d time.Duration) error {
	p.t.Helper()
	p.signal(syscall.SIGTERM, false)
	return p.Wait(d)
}

// Signal sends sig and returns at once, for a test that acts while the
// process handles it (a delivery in flight during a graceful stop); Wait
// or Exited tell when it is gone.
func (p *Process) Signal(sig syscall.Signal) { p.t.Helper(); p.signal(sig, false) }

// Restart kills the process if it runs and starts it again.
func (p *Process) Restart() {
	p.t.Helper()
	if p.Running() {
		p.Kill()
	}
	p.Start()
}

// Logs returns what the process wrote to stdout and stderr, over all its
// runs.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *Process) signal(sig syscall.Signal, wait bool) {
	p.t.Helper()
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || closed(exited) {
		if sig == syscall.SIGKILL {
			return // already gone
		}
		p.t.Fatalf("testkit: %s is not running", p.name)
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("testkit: signal %v to %s: %v", sig, p.name, err)
	}
	if wait {
		<-exited
	}
}

func (p *Process) cleanup() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if !closed(exited) {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies of SIGKILL too, but be plain
		_ = cmd.Process.Kill()
		<-exited
	}
	if p.t.Failed() {
		p.t.Logf("testkit: output of %s:\n%s", p.name, p.Logs())
	}
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// logWriter appends to a Process's logs under its lock.
type logWriter Process

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.Write(b)
}
