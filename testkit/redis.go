package testkit

import (
	"os"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Redis returns host:port of a Redis server for this test: $REDIS_ADDR if
// set (shared by all tests, so prefix keys with Name), otherwise a fresh
// redis-server without persistence on a free loopback port, stopped at
// cleanup.
func Redis(t testing.TB) string {
	t.Helper()
	refuseInFuncChild(t, "testkit.Redis")
	if v := os.Getenv(EnvRedisAddr); v != "" {
		return v
	}
	s := StartRedis(t)
	if s == nil {
		return ""
	}
	return s.Addr()
}

// RedisServer is a dedicated redis-server that a test may stop and start
// again on the same port (losing every key: there is no persistence). Its
// methods fail the test on error, so call them from the test's goroutine.
type RedisServer struct {
	t testing.TB
	r *embedded.Redis
}

// StartRedis starts a dedicated redis-server for this test, stopped at
// cleanup. It ignores $REDIS_ADDR: a test that stops a server needs its
// own.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	refuseInFuncChild(t, "testkit.StartRedis")
	ctx, cancel := setupContext(t)
	defer cancel()
	r, err := embedded.StartRedis(ctx, embedded.RedisOptions{})
	if err != nil {
		Unavailable(t, "redis", err)
		return nil
	}
	t.Cleanup(func() { _ = r.Stop() })
	return &RedisServer{t: t, r: r}
}

// Addr returns host:port; it stays the same across Stop and Start.
func (s *RedisServer) Addr() string { return s.r.Addr() }

// Stop shuts the server down gracefully and waits until it has exited.
func (s *RedisServer) Stop() {
	s.t.Helper()
	if err := s.r.Stop(); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}

// Kill kills the server with SIGKILL and waits until it has exited.
func (s *RedisServer) Kill() {
	s.t.Helper()
	if err := s.r.Kill(); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}

// Start starts the server again on the same port, empty, and waits until
// it answers PING.
func (s *RedisServer) Start() {
	s.t.Helper()
	ctx, cancel := setupContext(s.t)
	defer cancel()
	if err := s.r.Start(ctx); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}
