package chsink_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// supervisedClickHouse is a ClickHouse server of one test's own, started
// again whenever it exits on its own, as a service manager would.
// clickhouse-local sometimes aborts when a client dies in the middle of an
// insert (see internal/embedded); the kill tests kill clients on purpose,
// and their verdict must not depend on the server surviving that.
type supervisedClickHouse struct {
	*testkit.ClickHouseServer
	restarts  atomic.Int64 // exits the supervisor noticed
	restarted atomic.Int64 // restarts it finished, whether or not they succeeded
}

// superviseClickHouse starts the server and its supervisor, which polls
// every 50 ms and stops when the test ends.
func superviseClickHouse(t *testing.T) *supervisedClickHouse {
	s := &supervisedClickHouse{ClickHouseServer: testkit.StartClickHouse(t)}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := s.Crashed(); err != nil {
				t.Logf("clickhouse exited on its own; restarting it: %v", err)
				s.restarts.Add(1)
				if _, err := s.EnsureRunning(ctx); err != nil {
					t.Logf("clickhouse restart: %v", err)
				}
				s.restarted.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	return s
}

// restartedSince says whether the server exited on its own after the
// restart count stood at since. A client that failed at once waits a
// moment for the supervisor's next poll.
func (s *supervisedClickHouse) restartedSince(since int64) bool {
	// Up to 5 s: beside another make test (load up to 65) a client failed
	// on the server's death before 200 ms let the supervisor see it.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if s.restarts.Load() != since || s.Crashed() != nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitServing waits up to two minutes until no restart is under way and
// the server runs, so a client started again after a crash does not meet
// the same crash's closed port.
func (s *supervisedClickHouse) awaitServing(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for s.restarted.Load() != s.restarts.Load() || s.Crashed() != nil {
		require.True(t, time.Now().Before(deadline), "clickhouse did not come back")
		time.Sleep(50 * time.Millisecond)
	}
}

// env is a chEnv on database db whose count dials anew for every query, so
// a restart between queries does not fail the test's verdict.
func (s *supervisedClickHouse) env(t *testing.T, db string) chEnv {
	return chEnv{addr: s.Addr(), db: db, conn: testkit.DialClickHouse(t, s.Addr(), db), redial: true}
}

// countRedialing runs a query returning one UInt64 on a connection of its
// own, again for up to a minute while the server does not answer.
func (e chEnv) countRedialing(t *testing.T, q string) uint64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := ch.Dial(context.Background(), ch.Options{Address: e.addr, Database: e.db})
		if err == nil {
			var col proto.ColUInt64
			err = c.Do(context.Background(), ch.Query{Body: "SELECT toUInt64(assumeNotNull((" + q + "))) AS c", Result: proto.Results{{Name: "c", Data: &col}}})
			_ = c.Close()
			if err == nil && col.Rows() != 1 {
				err = fmt.Errorf("%d rows, want 1", col.Rows())
			}
			if err == nil {
				return col.Row(0)
			}
		}
		require.True(t, time.Now().Before(deadline), "%s: %v", q, err)
		time.Sleep(200 * time.Millisecond)
	}
}
