package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// outputLimit bounds how much of a child's combined output is kept for error
// messages: enough for clickhouse-local's fault report (about 6 KiB) and
// the errors logged before it.
const outputLimit = 64 << 10

// process is one run of a child program. It is started in its own process
// group with Pdeathsig SIGKILL, so it dies with the program that started it.
type process struct {
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed once the child has been reaped
	err  error         // wait result, valid after done is closed
}

// startProcess starts name with args. The goroutine that waits for the child
// keeps its OS thread locked for the child's whole life: Linux delivers
// Pdeathsig when the thread that forked the child exits, and the Go runtime
// would otherwise be free to retire that thread early.
func startProcess(name string, args []string, env []string, dir string) (*process, error) {
	p := &process{out: &tailBuffer{limit: outputLimit}, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread exits with this goroutine, after the
		// child has been reaped, which is exactly when it may.
		cmd := exec.Command(name, args...)
		cmd.Env = env
		cmd.Dir = dir
		cmd.Stdin = nil
		cmd.Stdout = p.out
		cmd.Stderr = p.out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		p.cmd = cmd
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// pid returns the child's process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the child has been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the child's whole process group.
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	err := syscall.Kill(-p.pid(), sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// kill sends SIGKILL to the process group and waits until the child is
// reaped.
func (p *process) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill pid %d: %w", p.pid(), err)
	}
	<-p.done
	return nil
}

// terminate sends SIGTERM and waits up to grace for the child to exit, then
// kills it.
func (p *process) terminate(grace time.Duration) error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("terminate pid %d: %w", p.pid(), err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return p.kill()
	}
}

// exitError describes why the child stopped, with the tail of its output.
func (p *process) exitError() error {
	return fmt.Errorf("exited early (%v); output:\n%s", p.err, p.out.String())
}

// waitReady calls probe until it succeeds, the child exits, ctx ends or
// timeout passes. It returns the last probe error on timeout.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		if p.exited() {
			return p.exitError()
		}
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		err := probe(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w (last probe: %v); output:\n%s",
				timeout, ctx.Err(), err, p.out.String())
		case <-p.done:
			return p.exitError()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// rssBytes returns the resident set size of the child (not its children).
func (p *process) rssBytes() (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid()) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := bytes.Fields(v)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("VmRSS not found")
}

// tailBuffer keeps the last limit bytes written to it. It is safe for
// concurrent use.
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another
// program may take it before the caller binds it; the Start functions of this
// package retry on a fresh port when that happens.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago. Each is held until all are picked: FreePort called n times
// can return a port twice, the kernel handing out a port just released
// again (an Apache Kafka node then refused two listeners on one port).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// dialOK reports whether a TCP connection to addr succeeds.
func dialOK(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// child is the part of a server handle that every restartable server shares:
// the running process, if any, and how it is killed or stopped. Its owner
// starts processes under mu and stores them in proc.
type child struct {
	name      string        // for errors: "redis", "kafka process"
	stopGrace time.Duration // SIGTERM to SIGKILL in Stop
	log       *slog.Logger

	mu   sync.Mutex
	proc *process // nil while stopped
}

// running reports whether a started process has not exited. mu must be held.
func (c *child) running() bool { return c.proc != nil && !c.proc.exited() }

// PID returns the server's process id, or 0 while it is stopped.
func (c *child) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running() {
		return 0
	}
	return c.proc.pid()
}

// Kill kills the server with SIGKILL, as a crash would, and returns once the
// process is gone. Killing a stopped server is a no-op.
func (c *child) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	err := c.proc.kill()
	c.proc = nil
	if err != nil {
		return fmt.Errorf("embedded: kill %s: %w", c.name, err)
	}
	c.log.Info(c.name + " killed")
	return nil
}

// Stop shuts the server down cleanly (SIGTERM, then SIGKILL after the
// server's grace period) and waits until it is gone. It is safe to call more
// than once.
func (c *child) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	err := c.proc.terminate(c.stopGrace)
	c.proc = nil
	if err != nil {
		return fmt.Errorf("embedded: stop %s: %w", c.name, err)
	}
	return nil
}

// startJVM is the one JVM launcher of the package: it runs mainClass of
// classpath with java and jvmOptions, in dir, under startProcess's
// supervision. Kafka's nodes, its storage tool and ZooKeeper start here, so
// a change to how a JVM is run (options, environment) is made once.
func startJVM(java string, jvmOptions []string, classpath, mainClass string, args []string, dir string) (*process, error) {
	argv := append(slices.Clone(jvmOptions), "-cp", classpath, mainClass)
	return startProcess(java, append(argv, args...), os.Environ(), dir)
}
