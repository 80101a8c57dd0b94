package testkit

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Set envUnguarded=1 to measure what the guard saves: the same kills with
// the children connected to the server directly. envKills sets the number
// of kills (default 20).
const (
	envUnguarded = "EXACTLYONCE_TEST_UNGUARDED"
	envKills     = "EXACTLYONCE_TEST_KILLS"
)

type inserterConfig struct{ Addr, Direct, Database string }

// TestGuardKilledInserters kills a client of a dedicated ClickHouse 20
// times with SIGKILL while it inserts LZ4-compressed blocks, through the
// guard the shared server has (chGuard), and checks that the server never
// exited: clickhouse-local 26.7 aborts on a connection reset by a killed
// client (7 of 20 kills measured without the guard), and the guard never
// lets one reach it.
func TestGuardKilledInserters(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a client 20 times")
	}
	guarded := os.Getenv(envUnguarded) == ""
	kills := 20
	if n, err := strconv.Atoi(os.Getenv(envKills)); err == nil && n > 0 {
		kills = n
	}
	var srv *ClickHouseServer // in the test process only
	cfg := Setup(t, "server", func() inserterConfig {
		srv = StartClickHouse(t)
		addr := srv.Addr()
		if guarded {
			g, err := startCHGuard(addr, nil)
			require.NoError(t, err)
			t.Cleanup(g.Close)
			addr = g.Addr()
		}
		db := NewDatabase(t, srv.Addr())
		require.NoError(t, Exec(t.Context(), srv.Addr(), db,
			"CREATE TABLE t (id UInt64, s String) ENGINE = MergeTree ORDER BY id"))
		return inserterConfig{Addr: addr, Direct: srv.Addr(), Database: db}
	})
	child := Func(t, "inserter", func(ctx context.Context) error { return insertForever(ctx, cfg.Addr, cfg.Database) })

	aborts := 0
	noteCrash := func() {
		if err := srv.Crashed(); err != nil {
			aborts++
			t.Logf("abort %d: %s", aborts, crashSummary(err.Error()))
			if aborts == 1 {
				t.Logf("its log saved to %s", saveCrashLog(t.TempDir(), err.Error()))
			}
			_, err := srv.EnsureRunning(t.Context())
			require.NoError(t, err)
		}
	}
	var last uint64
	count := func() (uint64, error) {
		noteCrash()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		n, err := QueryCount(ctx, cfg.Direct, cfg.Database, "SELECT count() FROM t")
		if err != nil { // the server aborting: noteCrash counts it on the next call
			return last, nil //nolint:nilerr // counted above
		}
		last = n
		return n, nil
	}
	for i := range kills {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		at := child.KillWhileGrowing(ctx, count)
		cancel()
		if i < 3 || i == kills-1 {
			t.Logf("kill %d: SIGKILL with %d rows in the table", i+1, at)
		}
		if i < kills-1 {
			child.Start()
		}
	}
	// An abort comes about 3 s after its fault (internal/embedded's doc).
	time.Sleep(5 * time.Second)
	noteCrash()
	t.Logf("guarded=%v: %d aborts of clickhouse-local in %d kills of a client inserting with LZ4", guarded, aborts, kills)
	if guarded {
		assert.Zero(t, aborts, "the server aborted behind the guard")
	}
}

// insertForever inserts blocks of 20 000 rows, LZ4-compressed, until ctx
// ends, dialing again after any error.
func insertForever(ctx context.Context, addr, database string) error {
	var id proto.ColUInt64
	var s proto.ColStr
	text := strings.Repeat("exactly once, ", 4)
	next := uint64(0)
	for ctx.Err() == nil {
		c, err := ch.Dial(ctx, ch.Options{Address: addr, Database: database, Compression: ch.CompressionLZ4})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ctx.Err() == nil {
			id.Reset()
			s.Reset()
			for range 20000 {
				next++
				id.Append(next)
				s.Append(fmt.Sprint(text, next))
			}
			err := c.Do(ctx, ch.Query{Body: "INSERT INTO t VALUES",
				Input: proto.Input{{Name: "id", Data: &id}, {Name: "s", Data: &s}}})
			if err != nil {
				break
			}
		}
		_ = c.Close()
	}
	return nil
}

// TestCrashSummary checks the one line the kit prints for a crash of the
// shared server, on a real abort's log per server version.
func TestCrashSummary(t *testing.T) {
	tests := []struct{ give, want string }{
		{give: "testdata/clickhouse-26.7-abort.log", want: "embedded: clickhouse exited early (signal: aborted): " +
			"Terminate called for uncaught exception: Code: 210. DB::NetException: Connection reset by peer, " +
			"while reading from socket (peer: 127.0.0.1:53262, local: 127.0.0.1:42917). (NETWORK_ERROR)"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			b, err := os.ReadFile(tt.give)
			require.NoError(t, err)
			assert.Equal(t, tt.want, crashSummary(string(b)))
		})
	}
	assert.Equal(t, "embedded: clickhouse exited early (exit status 1)",
		crashSummary("embedded: clickhouse exited early (exit status 1); output:\nno marker here\n"))
}
