package testkit

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/netfail"
)

// TestDialClickHouseRetriesUnanswered puts a listener in front of a
// server that cuts the first two connections before the handshake, as a
// server still starting does: the helpers' dial gets through on the
// third, and an error that is an answer (a missing database) is returned
// at once. A server of its own: libchdb 26.7 aborts after answering a
// client that asked for a missing database, which took the shared server
// down under the next test's set-up.
func TestDialClickHouseRetriesUnanswered(t *testing.T) {
	if os.Getenv(EnvClickHouseAddr) != "" {
		t.Skipf("%s is set: this test starts a server of its own", EnvClickHouseAddr)
	}
	addr, db := StartClickHouse(t).Addr(), "default"
	var accepted atomic.Int32
	p, err := netfail.NewProxy(addr, netfail.ProxyOptions{Accept: func(net.Conn) bool {
		return accepted.Add(1) > 2 // cut the first two before the server's hello
	}})
	require.NoError(t, err)
	t.Cleanup(p.Close)

	ctx := t.Context()
	c, err := dialClickHouse(ctx, p.Addr(), db)
	require.NoError(t, err, "the third connection reaches the server")
	require.NoError(t, c.Close())

	_, err = dialClickHouse(ctx, p.Addr(), "no_such_database_here")
	require.Error(t, err, "the server's answer is not retried into a success")
	require.False(t, unanswered(err), "a missing database is an answer: %v", err)
	p.Close()
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
