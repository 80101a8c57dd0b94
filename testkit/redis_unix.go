//go:build unix

package testkit

import (
	"syscall"
)

// Pause freezes the server with SIGSTOP, as a hung or swapping server
// would: it keeps its port and its connections, and the kernel still
// accepts new ones, but nothing is answered until Resume (SIGCONT). The
// test's cleanup resumes it.
func (s *RedisServer) Pause() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP)
	s.t.Cleanup(func() {
		if pid := s.r.PID(); pid > 0 { // never 0: that would signal our own process group
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
}

// Resume lets a paused server run again.
func (s *RedisServer) Resume() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
}

func (s *RedisServer) signal(sig syscall.Signal) {
	s.t.Helper()
	pid := s.r.PID()
	if pid == 0 {
		s.t.Fatalf("testkit: redis-server is not running")
	}
	if err := syscall.Kill(pid, sig); err != nil {
		s.t.Fatalf("testkit: %v to redis-server: %v", sig, err)
	}
}
