package testkit

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDialClickHouseRetriesUnanswered puts a listener in front of the
// shared server that cuts the first two connections before the handshake,
// as a server still starting does: the helpers' dial gets through on the
// third, and an error that is an answer (a missing database) is returned
// at once.
func TestDialClickHouseRetriesUnanswered(t *testing.T) {
	addr, db := ClickHouse(t)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the listener's Close below (cleanups run last first)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int32
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if accepted.Add(1) <= 2 {
				_ = c.Close() // cut before the server's hello
				continue
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			wg.Go(func() { _, _ = io.Copy(s, c); _ = s.Close() })
			wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close() })
		}
	})

	ctx := t.Context()
	c, err := dialClickHouse(ctx, ln.Addr().String(), db)
	require.NoError(t, err, "the third connection reaches the server")
	require.NoError(t, c.Close())

	_, err = dialClickHouse(ctx, ln.Addr().String(), "no_such_database_here")
	require.Error(t, err, "the server's answer is not retried into a success")
	require.False(t, unanswered(err), "a missing database is an answer: %v", err)
	_ = ln.Close()
	require.GreaterOrEqual(t, accepted.Load(), int32(4))
}

// TestSharedClickHouseRevivedAfterAbort aborts the shared server from
// outside, as a killed client's reset connection sometimes does, between two
// helpers' calls: the next helper finds the port closed, starts the server
// again on the same directory and reads the row written before.
func TestSharedClickHouseRevivedAfterAbort(t *testing.T) {
	if os.Getenv(EnvClickHouseAddr) != "" {
		t.Skipf("%s is set: the server is not the kit's to abort", EnvClickHouseAddr)
	}
	addr, db := ClickHouse(t)
	ctx := t.Context()
	require.NoError(t, Exec(ctx, addr, db, "CREATE TABLE t (n UInt64) ENGINE = MergeTree ORDER BY n"))
	require.NoError(t, Exec(ctx, addr, db, "INSERT INTO t VALUES (7)"))

	shared.mu.Lock()
	srv := shared.srv
	shared.mu.Unlock()
	pid := srv.PID()
	require.NotZero(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGABRT))
	require.Eventually(t, func() bool { return srv.Crashed() != nil }, time.Minute, 10*time.Millisecond)

	require.Equal(t, uint64(7), Count(t, addr, db, "SELECT sum(n) FROM t"), "the row written before the abort")
	require.NotEqual(t, pid, srv.PID(), "a new server process")
}
