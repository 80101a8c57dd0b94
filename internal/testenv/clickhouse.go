package testenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// sharedStartTimeout covers a cold cache: extracting libchdb.so (and, when
// absent, downloading 178 MB with npm) and building the launcher.
const sharedStartTimeout = 15 * time.Minute

// ClickHouse returns the native-protocol address of a ClickHouse server and
// a fresh database on it, dropped at cleanup: testkit.ClickHouse, whose
// server ($CLICKHOUSE_ADDR or one per test binary) it shares.
func ClickHouse(t testing.TB) (addr, database string) {
	t.Helper()
	return testkit.ClickHouse(t)
}

// NewDatabase creates a database with a unique name on the server at addr
// and drops it at cleanup.
func NewDatabase(t testing.TB, addr string) string {
	t.Helper()
	return testkit.NewDatabase(t, addr)
}

// DialClickHouse connects ch-go to database on addr and closes the client at
// cleanup.
func DialClickHouse(t testing.TB, addr, database string) *ch.Client {
	t.Helper()
	return testkit.DialClickHouse(t, addr, database)
}

// ClickHouseServer is a dedicated ClickHouse process for one test, for tests
// that kill or restart it. Its methods fail the test on error, so call them
// from the test's goroutine.
type ClickHouseServer struct {
	t   testing.TB
	srv *embedded.ClickHouse
}

// StartClickHouse starts a dedicated clickhouse-local for this test on its
// own data directory and port, stopped and removed at cleanup. It skips the
// test when $CLICKHOUSE_ADDR is set, since an external server cannot be
// killed from here. Start takes about half a second once the cache is warm.
func StartClickHouse(t testing.TB) *ClickHouseServer {
	t.Helper()
	if os.Getenv(EnvClickHouseAddr) != "" {
		t.Skipf("testenv: %s is set; this test needs a dedicated server it can kill", EnvClickHouseAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
	defer cancel()
	srv, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{Progress: os.Stderr})
	if err != nil {
		unavailable(t, "clickhouse", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return &ClickHouseServer{t: t, srv: srv}
}

// Addr returns host:port; it stays the same across Kill and Restart.
func (s *ClickHouseServer) Addr() string { return s.srv.Addr() }

// Dir returns the data directory.
func (s *ClickHouseServer) Dir() string { return s.srv.Dir() }

// Server returns the underlying process handle (PID, RSS, Version).
func (s *ClickHouseServer) Server() *embedded.ClickHouse { return s.srv }

// Kill kills the server with SIGKILL and waits until the process is gone.
func (s *ClickHouseServer) Kill() {
	s.t.Helper()
	if err := s.srv.Kill(); err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}

// Restart starts the server again on the same directory and port (killing it
// first if it runs) and waits until it answers. clickhouse-local has been
// seen to abort while it starts after a kill -9; a failed start is logged
// and tried twice more, as a service manager would, before the test fails.
func (s *ClickHouseServer) Restart() {
	s.t.Helper()
	ctx, cancel := setupContext(s.t)
	defer cancel()
	err := s.srv.Restart(ctx)
	for attempt := 0; err != nil && attempt < 2 && ctx.Err() == nil; attempt++ {
		s.t.Logf("testenv: clickhouse restart failed, starting it again: %v", err)
		_, err = s.srv.EnsureRunning(ctx)
	}
	if err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}

// Stop kills the server and removes its directory. Cleanup does this too;
// calling it twice is fine.
func (s *ClickHouseServer) Stop() {
	s.t.Helper()
	if err := s.srv.Stop(); err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}
