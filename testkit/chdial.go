package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/internal/backoff"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// dialAttempts bounds dialClickHouse's tries, dialBackoff spaces them (the
// SDK's one retry policy): 0.2, 0.4, 0.8, 1, 1, 1, 1 s, 5.4 s in all, longer
// than a clickhouse-local abort takes from its fault to its exit (about
// 3 s, see internal/embedded's doc), after which reviveShared starts it.
const dialAttempts = 8

var dialBackoff = backoff.Policy{Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2}

// dialClickHouse connects to the server at addr, in database, trying again
// a few times while the server does not answer: a refused or reset
// connection, or a handshake that timed out. A server that is starting
// after a kill, or busy on a loaded machine, answers a moment later (a CI
// run once failed an external module's test on one handshake timeout), and
// a test helper that gave up at once would fail the test on the machine's
// load rather than on the code under test. Any other error, or the end of
// ctx, is returned at once.
func dialClickHouse(ctx context.Context, addr, database string) (*ch.Client, error) {
	for attempt := 1; ; attempt++ {
		c, err := ch.Dial(ctx, ch.Options{Address: addr, Database: database})
		if err == nil {
			return c, nil
		}
		if attempt == dialAttempts || ctx.Err() != nil || !unanswered(err) {
			return nil, err
		}
		reviveShared(ctx, addr)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(dialBackoff.Delay(attempt, nil)):
		}
	}
}

// reviveShared starts the shared server again if addr is its address and
// it exited on its own. clickhouse-local now and then aborts when a client
// it serves is killed (internal/embedded's doc: the reset connection is an
// uncaught exception there), and a test that kills its service and then
// only reads never asks ClickHouse(t) for the server again, so retries
// alone would keep finding the port closed: a CI run failed an external
// module's test that way. The data directory and port stay, so the test
// goes on with its tables. A server a test killed on purpose is not
// Crashed and stays down.
func reviveShared(ctx context.Context, addr string) {
	shared.mu.Lock()
	srv, guard := shared.srv, shared.guard
	shared.mu.Unlock()
	if srv != nil && (srv.Addr() == addr || guard != nil && guard.Addr() == addr) {
		if err := restartIfCrashed(ctx, srv, stderrf); err != nil {
			stderrf("testkit: start the shared clickhouse again: %v", err) // the dial's retries report the rest
		}
	}
}

// stderrf writes a line to standard error, for what the kit notices off a
// test (in the guard, or in a dial without a test).
func stderrf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// restartIfCrashed starts srv again, on its directory and port, if it
// exited on its own, and says so with logf in one line: the server's
// log (its expected errors, such as chsink's probes for tables that do not
// exist yet, and the ~180 lines of a fault report) goes to a file named in
// that line, not into the test's output.
func restartIfCrashed(ctx context.Context, srv *embedded.ClickHouse, logf func(format string, args ...any)) error {
	crash := srv.Crashed()
	if crash == nil {
		return nil
	}
	started, err := srv.EnsureRunning(ctx)
	if started { // one line per crash, from whoever started it again
		logf("testkit: the shared clickhouse exited (%s); started it again on the same data (its log: %s)",
			crashSummary(crash.Error()), saveCrashLog(srv.Dir(), crash.Error()))
	}
	return err
}

// unanswered reports whether err says the server did not answer, rather
// than answered no.
func unanswered(err error) bool {
	var ne net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		(errors.As(err, &ne) && ne.Timeout())
}
