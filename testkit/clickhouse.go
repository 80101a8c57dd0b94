package testkit

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// shared is the one ClickHouse server per test binary behind ClickHouse.
// It is never stopped explicitly: the kernel kills it when the test binary
// exits (Pdeathsig), and a later run removes its directory.
var shared struct {
	mu    sync.Mutex
	srv   *embedded.ClickHouse
	guard *chGuard // in front of srv: tests get its address (see chGuard)
	err   error
}

// firstStartTimeout covers a cold cache: downloading and extracting the
// library and building the launcher.
const firstStartTimeout = 15 * time.Minute

// ClickHouse returns the native-protocol address of a ClickHouse server and
// a fresh database on it, dropped at cleanup. The server is
// $CLICKHOUSE_ADDR if set, otherwise one embedded ClickHouse 26.7 per test
// binary, started on first use (the first use on a machine downloads it,
// printing progress to standard error). Connect as user "default" without
// password.
func ClickHouse(t testing.TB) (addr, database string) {
	t.Helper()
	refuseInFuncChild(t, "testkit.ClickHouse")
	addr = os.Getenv(EnvClickHouseAddr)
	if addr == "" {
		var err error
		if addr, err = sharedClickHouse(t); err != nil {
			Unavailable(t, "clickhouse", err)
		}
	}
	return addr, NewDatabase(t, addr)
}

func sharedClickHouse(t testing.TB) (string, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), firstStartTimeout)
		defer cancel()
		shared.srv, shared.err = embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{Progress: os.Stderr})
		if shared.err == nil {
			srv := shared.srv
			shared.guard, shared.err = startCHGuard(srv.Addr(), func(ctx context.Context) {
				if err := restartIfCrashed(ctx, srv, stderrf); err != nil {
					stderrf("testkit: start the shared clickhouse again: %v", err)
				}
			})
		}
	}
	if shared.err != nil {
		return "", shared.err
	}
	// Should clickhouse-local abort all the same (the guard keeps killed
	// clients from resetting its connections), later tests get a server
	// again, on the same data.
	ctx, cancel := setupContext(t)
	defer cancel()
	if err := restartIfCrashed(ctx, shared.srv, t.Logf); err != nil {
		return "", err
	}
	return shared.guard.Addr(), nil
}

// NewDatabase creates a database with a unique name on the server at addr
// and drops it at cleanup.
func NewDatabase(t testing.TB, addr string) string {
	t.Helper()
	refuseInFuncChild(t, "testkit.NewDatabase")
	db := Name(t, "db")
	ctx, cancel := setupContext(t)
	defer cancel()
	if err := createDatabase(ctx, addr, db); err != nil {
		Unavailable(t, "clickhouse", fmt.Errorf("create database on %s: %w", addr, err))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The test may have killed or stopped the server; a database that
		// cannot be dropped goes with the server's directory.
		_ = Exec(ctx, addr, "", "DROP DATABASE IF EXISTS "+db+" SYNC")
	})
	return db
}

// DialClickHouse connects ch-go to database on addr and closes the client
// at cleanup.
func DialClickHouse(t testing.TB, addr, database string) *ch.Client {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	c, err := dialClickHouse(ctx, addr, database)
	if err != nil {
		t.Fatalf("testkit: dial clickhouse %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// createDatabase creates db, trying again while the server answers that
// it is shutting down after a fatal error (ABORTED): clickhouse-local
// aborting for an earlier client (internal/embedded's doc) still answers
// queries for a moment before it exits, and then dialClickHouse finds it
// gone and starts it again (a CI run failed the next test's set-up so).
func createDatabase(ctx context.Context, addr, db string) error {
	for attempt := 1; ; attempt++ {
		err := Exec(ctx, addr, "", "CREATE DATABASE IF NOT EXISTS "+db)
		if err == nil || attempt == dialAttempts || !ch.IsErr(err, proto.ErrAborted) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(dialBackoff.Delay(attempt, nil)):
		}
	}
}

// Exec runs one statement (DDL, INSERT ... SELECT, SYSTEM ...) on the
// server at addr, in database ("" for the default one), on a connection of
// its own.
func Exec(ctx context.Context, addr, database, query string) error {
	c, err := dialClickHouse(ctx, addr, database)
	if err != nil {
		return fmt.Errorf("testkit: dial clickhouse %s: %w", addr, err)
	}
	defer c.Close()
	if err := c.Do(ctx, ch.Query{Body: query}); err != nil {
		return fmt.Errorf("testkit: %s: %w", firstLine(query), err)
	}
	return nil
}

// ClickHouseServer is a dedicated ClickHouse process for one test, for
// tests that kill or restart it. Its methods fail the test on error, so
// call them from the test's goroutine.
type ClickHouseServer struct {
	t   testing.TB
	srv *embedded.ClickHouse
}

// StartClickHouse starts a dedicated embedded ClickHouse for this test on
// its own data directory and port, stopped and removed at cleanup. It skips
// the test when $CLICKHOUSE_ADDR is set, since a server you run cannot be
// killed from here. A start takes about half a second once the library is
// in the cache.
func StartClickHouse(t testing.TB) *ClickHouseServer {
	t.Helper()
	refuseInFuncChild(t, "testkit.StartClickHouse")
	if os.Getenv(EnvClickHouseAddr) != "" {
		t.Skipf("testkit: %s is set; this test needs a dedicated server it can kill", EnvClickHouseAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), firstStartTimeout)
	defer cancel()
	srv, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{Progress: os.Stderr})
	if err != nil {
		Unavailable(t, "clickhouse", err)
		return nil
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return &ClickHouseServer{t: t, srv: srv}
}

// Addr returns host:port; it stays the same across Kill and Restart.
func (s *ClickHouseServer) Addr() string { return s.srv.Addr() }

// Dir returns the data directory.
func (s *ClickHouseServer) Dir() string { return s.srv.Dir() }

// PID returns the server's process id, 0 while it is down.
func (s *ClickHouseServer) PID() int { return s.srv.PID() }

// Crashed returns the error of a server process that exited on its own
// (not by Kill, Restart or Stop), nil while it runs. Safe to call from any
// goroutine.
func (s *ClickHouseServer) Crashed() error { return s.srv.Crashed() }

// EnsureRunning starts the server again on the same directory and port if
// it is down, and reports whether it did. Unlike Restart it returns its
// error instead of failing the test, so a watchdog goroutine may call it.
func (s *ClickHouseServer) EnsureRunning(ctx context.Context) (started bool, err error) {
	return s.srv.EnsureRunning(ctx)
}

// Kill kills the server with SIGKILL and waits until the process is gone.
func (s *ClickHouseServer) Kill() {
	s.t.Helper()
	if err := s.srv.Kill(); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}

// Restart starts the server again on the same directory and port (killing
// it first if it runs) and waits until it answers. clickhouse-local has
// been seen to abort while it starts after a kill -9; a failed start is
// logged and tried twice more, as a service manager would, before the test
// fails.
func (s *ClickHouseServer) Restart() {
	s.t.Helper()
	ctx, cancel := setupContext(s.t)
	defer cancel()
	err := s.srv.Restart(ctx)
	for attempt := 0; err != nil && attempt < 2 && ctx.Err() == nil; attempt++ {
		s.t.Logf("testkit: clickhouse restart failed (%s; its log: %s), starting it again",
			crashSummary(err.Error()), saveCrashLog(s.Dir(), err.Error()))
		_, err = s.srv.EnsureRunning(ctx)
	}
	if err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}

// Stop kills the server and removes its directory. Cleanup does this too;
// calling it twice is fine.
func (s *ClickHouseServer) Stop() {
	s.t.Helper()
	if err := s.srv.Stop(); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}
