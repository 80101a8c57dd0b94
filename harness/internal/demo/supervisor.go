package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Supervisor keeps Instances processor processes running, as a container
// runtime would, and kills one on request. Set its fields, then call Run.
type Supervisor struct {
	// Command is the processor's binary and its arguments, without
	// -group: the Supervisor adds it.
	Command []string
	// Env is added to the processes' environment.
	Env []string
	// Stderr receives the processes' output. Default os.Stderr.
	Stderr io.Writer
	// Output, if set, returns the output of instance's next process, in
	// place of Stderr: a log file of each instance's own (Pipeline.Output).
	Output    func(instance int) io.Writer
	Instances int
	// SharedGroup puts every instance and incarnation in one consumer
	// group, Group, so partitions move between live instances. Otherwise
	// each incarnation joins a group of its own (Group-N): a member killed
	// with SIGKILL holds its partitions until its session times out, and a
	// kfake broker restored from its log directory does not expire members
	// at all. The group only carries offsets for lag monitoring; where a
	// partition resumes comes from its checkpoint either way.
	SharedGroup bool
	Group       string
	// ConsumerProtocol says the processes join Group under the consumer
	// group protocol (their -group-protocol=consumer), which the
	// supervisor's look at the group must speak.
	ConsumerProtocol bool
	Brokers          []string // where the group lives
	Say              func(string, ...any)

	mu                      sync.Mutex
	cmds                    []*exec.Cmd  // by instance; nil while restarting
	restarting              map[int]bool // instances Restart stopped on purpose
	groups                  []string     // every consumer group an instance joined
	starts, kills, failures atomic.Int64
}

// Starts counts the processes started, Kills those killed by Kill, and
// Failures those that exited on their own.
func (s *Supervisor) Starts() int64   { return s.starts.Load() }
func (s *Supervisor) Kills() int64    { return s.kills.Load() }
func (s *Supervisor) Failures() int64 { return s.failures.Load() }

// Joined returns every consumer group an instance has joined so far.
func (s *Supervisor) Joined() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.groups)
}

// Run runs every instance until ctx ends, then stops them with SIGTERM (a
// last checkpoint), or SIGKILL after 5 s.
func (s *Supervisor) Run(ctx context.Context) {
	s.mu.Lock()
	s.cmds = make([]*exec.Cmd, s.Instances)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for i := range s.Instances {
		wg.Go(func() { s.keep(ctx, i) })
	}
	wg.Wait()
}

// keep runs instance i, restarting it whenever it exits, until ctx ends.
func (s *Supervisor) keep(ctx context.Context, i int) {
	// Fork from a thread of our own, kept until the last child was reaped:
	// Linux sends Pdeathsig when the forking thread exits, and the Go
	// runtime retires a thread whose locked goroutine exits (see
	// StartGateway). Never unlocked: the thread exits with keep.
	runtime.LockOSThread()
	for ctx.Err() == nil {
		group := s.Group
		if !s.SharedGroup {
			group += "-" + strconv.FormatInt(s.starts.Load(), 10)
		}
		cmd := exec.Command(s.Command[0], append(slices.Clone(s.Command[1:]), "-group="+group)...)
		cmd.Env = append(os.Environ(), s.Env...)
		out := s.Stderr
		if s.Output != nil {
			out = s.Output(i)
		}
		if out == nil {
			out = os.Stderr
		}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			s.Say("start processor: %v", err)
			return
		}
		s.starts.Add(1)
		s.mu.Lock()
		s.cmds[i] = cmd
		if !slices.Contains(s.groups, group) {
			s.groups = append(s.groups, group)
		}
		s.mu.Unlock()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			return
		}
		s.mu.Lock()
		s.cmds[i] = nil
		s.mu.Unlock()
		s.mu.Lock()
		onPurpose := s.restarting[i]
		delete(s.restarting, i)
		s.mu.Unlock()
		var exit *exec.ExitError
		if onPurpose || errors.As(err, &exit) && exit.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			continue // stopped or killed on purpose: restart at once
		}
		s.failures.Add(1)
		s.Say("processor exited (%v); restarting it from its last checkpoint", err)
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// Restart stops instance i with sig (SIGTERM: a last checkpoint and a
// LeaveGroup; SIGKILL: neither) and waits until its next incarnation has
// started, as a rolling deployment does, one instance at a time. It
// returns the pids of the old and the new process; an error if i was not
// running or no new process started before ctx ended.
func (s *Supervisor) Restart(ctx context.Context, i int, sig syscall.Signal) (oldPid, newPid int, err error) {
	s.mu.Lock()
	old := (*exec.Cmd)(nil)
	if i >= 0 && i < len(s.cmds) {
		old = s.cmds[i]
	}
	if old == nil {
		s.mu.Unlock()
		return 0, 0, fmt.Errorf("demo: processor instance %d is not running", i)
	}
	if s.restarting == nil {
		s.restarting = map[int]bool{}
	}
	s.restarting[i] = true
	s.mu.Unlock()
	if sig == syscall.SIGKILL {
		s.KillProcess(old)
	} else {
		_ = old.Process.Signal(sig)
	}
	// A processor that has not exited 15 s after SIGTERM is hung: a
	// rolling deployment kills it then, as Kubernetes does after its grace
	// period.
	grace := time.Now().Add(15 * time.Second)
	for {
		if cmd := s.CmdOf(i); cmd != nil && cmd != old {
			return old.Process.Pid, cmd.Process.Pid, nil
		}
		if sig != syscall.SIGKILL && time.Now().After(grace) && s.CmdOf(i) == old {
			s.Say("processor instance %d (pid %d) still running 15 s after %v: killed", i, old.Process.Pid, sig)
			s.KillProcess(old)
			sig = syscall.SIGKILL
		}
		select {
		case <-ctx.Done():
			return old.Process.Pid, 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Signal sends sig to every running instance.
func (s *Supervisor) Signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cmd := range s.cmds {
		if cmd != nil {
			_ = cmd.Process.Signal(sig)
		}
	}
}

// Kill kills one running instance, chosen by rng, with SIGKILL.
//
// With a shared group it first waits, for a few seconds at most, until the
// group is stable. kfake keeps a member killed in the middle of joining as
// a member for good, with partitions assigned and never expired (Kafka
// expires it after session.timeout.ms), which would leave those partitions
// unread; a kill between rebalances is expired as on Kafka.
func (s *Supervisor) Kill(ctx context.Context, rng *rand.Rand, say func(string, ...any)) {
	if s.SharedGroup {
		awaitStableGroup(ctx, s.Brokers, s.Group, s.ConsumerProtocol, 15*time.Second)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var running []int
	for i, cmd := range s.cmds {
		if cmd != nil {
			running = append(running, i)
		}
	}
	if len(running) == 0 {
		return
	}
	i := running[rng.IntN(len(running))]
	if s.Instances > 1 {
		say("fault: stream processor instance %d (pid %d) killed with SIGKILL", i, s.cmds[i].Process.Pid)
	} else {
		say("fault: stream processor (pid %d) killed with SIGKILL", s.cmds[i].Process.Pid)
	}
	_ = s.cmds[i].Process.Kill()
	s.kills.Add(1)
}

// awaitStableGroup waits until group is Stable (no rebalance in
// progress), ctx ends or timeout passes.
func awaitStableGroup(ctx context.Context, brokers []string, group string, consumer bool, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for ctx.Err() == nil {
		if g, err := DescribeGroup(ctx, brokers, group, consumer); err == nil && g.State == "Stable" {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Pick returns a running instance and its pid, chosen by rng, or -1.
func (s *Supervisor) Pick(rng *rand.Rand) (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var running []int
	for i, cmd := range s.cmds {
		if cmd != nil {
			running = append(running, i)
		}
	}
	if len(running) == 0 {
		return -1, 0
	}
	i := running[rng.IntN(len(running))]
	return i, s.cmds[i].Process.Pid
}

// Instance returns a running instance's command, chosen by rng, or nil.
func (s *Supervisor) Instance(rng *rand.Rand) *exec.Cmd {
	i, _ := s.Pick(rng)
	if i < 0 {
		return nil
	}
	return s.CmdOf(i)
}

// CmdOf returns instance i's running command, or nil.
func (s *Supervisor) CmdOf(i int) *exec.Cmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.cmds) {
		return nil
	}
	return s.cmds[i]
}

// KillOne kills instance i (-1: one chosen by rng) with SIGKILL at once,
// unlike Kill, which waits for a stable group first. It returns the pid
// killed.
func (s *Supervisor) KillOne(rng *rand.Rand, i int) (int, bool) {
	if i < 0 {
		i, _ = s.Pick(rng)
	}
	cmd := s.CmdOf(i)
	if cmd == nil {
		return 0, false
	}
	s.KillProcess(cmd)
	return cmd.Process.Pid, true
}

// KillProcess kills cmd, a running instance, with SIGKILL and counts it in
// Kills.
func (s *Supervisor) KillProcess(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	s.kills.Add(1)
}
