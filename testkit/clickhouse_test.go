package testkit_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestClickHouseVersion proves the server is ClickHouse 26 or later,
// reached through ch-go.
func TestClickHouseVersion(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	c := testkit.DialClickHouse(t, addr, db)

	var col proto.ColStr
	require.NoError(t, c.Do(t.Context(), ch.Query{
		Body:   "SELECT version()",
		Result: proto.Results{{Name: "version()", Data: &col}},
	}))
	require.Equal(t, 1, col.Rows())
	major, err := strconv.Atoi(strings.SplitN(col.Row(0), ".", 2)[0])
	require.NoError(t, err, "version %q", col.Row(0))
	assert.GreaterOrEqual(t, major, 26, "version %q", col.Row(0))
}

// TestClickHouseDatabaseDropped proves each test gets its own database and
// that it is gone after the test.
func TestClickHouseDatabaseDropped(t *testing.T) {
	var addr, db string
	t.Run("inner", func(t *testing.T) {
		addr, db = testkit.ClickHouse(t)
		assert.Equal(t, 1, countRows(t, addr, "", "SELECT count() FROM system.databases WHERE name = '"+db+"'"))
	})
	if t.Failed() || addr == "" {
		return
	}
	assert.Equal(t, 0, countRows(t, addr, "", "SELECT count() FROM system.databases WHERE name = '"+db+"'"))
}

// TestClickHouseInsertDeduplicationToken proves a MergeTree table with
// non_replicated_deduplication_window drops a repeated insert that carries
// the same insert_deduplication_token: the sink's retries rely on it.
func TestClickHouseInsertDeduplicationToken(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	c := testkit.DialClickHouse(t, addr, db)
	createEvents(t, c)

	insertEvents(t, c, "token-1", 1, 2, 3)
	insertEvents(t, c, "token-1", 1, 2, 3) // a retry: dropped
	assert.Equal(t, 3, countRows(t, addr, db, "SELECT count() FROM events"))
	assert.Equal(t, 1, countRows(t, addr, db, "SELECT count() FROM system.parts WHERE database = currentDatabase() AND table = 'events' AND active"))

	insertEvents(t, c, "token-2", 1, 2, 3) // another batch: kept
	assert.Equal(t, 6, countRows(t, addr, db, "SELECT count() FROM events"))
}

// TestClickHouseKillRestartKeepsData proves kill -9 and a restart on the same
// directory keep inserted data and the deduplication log.
func TestClickHouseKillRestartKeepsData(t *testing.T) {
	srv := testkit.StartClickHouse(t)
	addr := srv.Addr()
	db := testkit.NewDatabase(t, addr)
	c := testkit.DialClickHouse(t, addr, db)
	createEvents(t, c)
	insertEvents(t, c, "token-1", 1, 2, 3)
	pid := srv.PID()

	srv.Kill()
	assert.Equal(t, 0, srv.PID())
	_, err := ch.Dial(t.Context(), ch.Options{Address: addr})
	require.Error(t, err, "server is down after Kill")

	srv.Restart()
	assert.Equal(t, addr, srv.Addr())
	assert.NotEqual(t, pid, srv.PID())
	c = testkit.DialClickHouse(t, addr, db)
	assert.Equal(t, 3, countRows(t, addr, db, "SELECT count() FROM events"), "data survives kill -9")

	insertEvents(t, c, "token-1", 1, 2, 3) // a retry after the crash: still dropped
	assert.Equal(t, 3, countRows(t, addr, db, "SELECT count() FROM events"), "dedup log survives kill -9")
	insertEvents(t, c, "token-2", 4)
	assert.Equal(t, 4, countRows(t, addr, db, "SELECT count() FROM events"))
}

func createEvents(t *testing.T, c *ch.Client) {
	t.Helper()
	require.NoError(t, c.Do(t.Context(), ch.Query{Body: `CREATE TABLE events (id UInt64, v String)
		ENGINE = MergeTree ORDER BY id
		SETTINGS non_replicated_deduplication_window = 100`}))
}

func insertEvents(t *testing.T, c *ch.Client, token string, ids ...uint64) {
	t.Helper()
	var id proto.ColUInt64
	var v proto.ColStr
	for _, i := range ids {
		id.Append(i)
		v.Append("v" + strconv.FormatUint(i, 10))
	}
	require.NoError(t, c.Do(t.Context(), ch.Query{
		Body:     "INSERT INTO events VALUES",
		Input:    proto.Input{{Name: "id", Data: &id}, {Name: "v", Data: &v}},
		Settings: []ch.Setting{{Key: "insert_deduplication_token", Value: token, Important: true}},
	}))
}

func countRows(t *testing.T, addr, db, query string) int {
	t.Helper()
	c, err := ch.Dial(context.WithoutCancel(t.Context()), ch.Options{Address: addr, Database: db})
	require.NoError(t, err)
	defer c.Close()
	var n proto.ColUInt64
	require.NoError(t, c.Do(t.Context(), ch.Query{Body: query, Result: proto.Results{{Name: "count()", Data: &n}}}))
	require.Equal(t, 1, n.Rows())
	return int(n.Row(0))
}

// TestClickHouseStopDuringRestart proves a Stop that lands while a Restart
// waits for readiness wins: the restart fails and no server is left running
// behind the stopped handle.
func TestClickHouseStopDuringRestart(t *testing.T) {
	testkit.StartClickHouse(t) // skips or fails as the environment says, and warms the cache
	srv, err := embedded.StartClickHouse(t.Context(), embedded.ClickHouseOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })

	restarted := make(chan error, 1)
	go func() { restarted <- srv.Restart(context.WithoutCancel(t.Context())) }()
	require.Eventually(t, func() bool { return srv.PID() == 0 }, time.Minute, time.Millisecond,
		"Restart kills the running server first")
	require.NoError(t, srv.Stop())

	require.Error(t, <-restarted)
	assert.Equal(t, 0, srv.PID())
	_, err = ch.Dial(t.Context(), ch.Options{Address: srv.Addr(), DialTimeout: time.Second})
	assert.Error(t, err, "no server answers after Stop")
}

// TestClickHouseConcurrentKillRestart drives Kill, Restart and EnsureRunning
// from several goroutines at once, as the demo's fault plan and its crash
// watchdog do: at the end one EnsureRunning leaves exactly one server
// process on the directory, and it keeps the data.
func TestClickHouseConcurrentKillRestart(t *testing.T) {
	testkit.StartClickHouse(t) // skips or fails as the environment says, and warms the cache
	dir := t.TempDir()
	srv, err := embedded.StartClickHouse(t.Context(), embedded.ClickHouseOptions{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	db := testkit.NewDatabase(t, srv.Addr())
	createEvents(t, testkit.DialClickHouse(t, srv.Addr(), db))
	insertEvents(t, testkit.DialClickHouse(t, srv.Addr(), db), "token-1", 1, 2, 3)

	ctx := context.WithoutCancel(t.Context())
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for i := range 4 {
				switch (g + i) % 3 {
				case 0:
					assert.NoError(t, srv.Kill())
				case 1:
					assert.NoError(t, srv.Restart(ctx))
				case 2:
					_, err := srv.EnsureRunning(ctx)
					assert.NoError(t, err)
				}
			}
		})
	}
	wg.Wait()
	_, err = srv.EnsureRunning(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, serversOn(t, dir), "one server process per directory")
	assert.Equal(t, 3, countRows(t, srv.Addr(), db, "SELECT count() FROM events"))

	started, err := srv.EnsureRunning(ctx)
	require.NoError(t, err)
	assert.False(t, started, "a running server is left alone")
}

// serversOn counts the processes whose command line serves dir.
func serversOn(t *testing.T, dir string) int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	n := 0
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "--path="+dir+"\x00") {
			n++
		}
	}
	return n
}

// TestClickHouseCrashedThenEnsureRunning plays clickhouse-local dying on its
// own (a signal from outside, as its abort looks): Crashed reports it with
// the server's own fault report (a CI run showed an abort with no output at
// all: clickhouse-local logs nothing unless told to), and EnsureRunning
// starts it again on the same data.
func TestClickHouseCrashedThenEnsureRunning(t *testing.T) {
	testkit.StartClickHouse(t) // skips or fails as the environment says, and warms the cache
	srv, err := embedded.StartClickHouse(t.Context(), embedded.ClickHouseOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	db := testkit.NewDatabase(t, srv.Addr())
	createEvents(t, testkit.DialClickHouse(t, srv.Addr(), db))
	insertEvents(t, testkit.DialClickHouse(t, srv.Addr(), db), "token-1", 1, 2)

	require.NoError(t, syscall.Kill(srv.PID(), syscall.SIGABRT))
	require.Eventually(t, func() bool { return srv.Crashed() != nil }, 30*time.Second, 10*time.Millisecond)
	assert.Contains(t, srv.Crashed().Error(), "Received signal 6", "the server's fault report is in the error")
	started, err := srv.EnsureRunning(context.WithoutCancel(t.Context()))
	require.NoError(t, err)
	assert.True(t, started)
	assert.NoError(t, srv.Crashed())
	assert.Equal(t, 2, countRows(t, srv.Addr(), db, "SELECT count() FROM events"))
}
