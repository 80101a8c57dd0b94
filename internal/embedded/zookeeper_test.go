package embedded_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// startZooKeeper starts a ZooKeeper for the test, stopped at cleanup.
func startZooKeeper(t *testing.T) *embedded.ZooKeeper {
	t.Helper()
	needMaven(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	z, err := embedded.StartZooKeeper(ctx, embedded.ZooKeeperOptions{
		Dir: t.TempDir(), Progress: os.Stderr, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	require.NoError(t, err)
	t.Logf("zookeeper %s started in %s", embedded.ZooKeeperVersion, time.Since(t0).Round(10*time.Millisecond))
	t.Cleanup(func() { _ = z.Stop() })
	return z
}

// startReplica starts a clickhouse-local configured with z and replica
// name, stopped at cleanup.
func startReplica(t *testing.T, z *embedded.ZooKeeper, replica string) *embedded.ClickHouse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{
		ZooKeeper: z.Addr(), Macros: map[string]string{"shard": "s1", "replica": replica}, Progress: os.Stderr,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func do(ctx context.Context, addr, query string, result proto.Results) error {
	c, err := ch.Dial(ctx, ch.Options{Address: addr})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(ctx, ch.Query{Body: query, Result: result})
}

// TestZooKeeperKillStart: znodes that clickhouse-local wrote survive kill -9
// of ZooKeeper, which comes back on the same port: a second table that
// claims the first one's replica path is refused as an existing replica.
func TestZooKeeperKillStart(t *testing.T) {
	embedded.SkipShort(t)
	z := startZooKeeper(t)
	c := startReplica(t, z, "r1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	create := func(name string) error {
		return do(ctx, c.Addr(), "CREATE TABLE default."+name+" (k UInt64) "+
			"ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/t', '{replica}') ORDER BY k", nil)
	}
	require.NoError(t, create("t1"))
	pid := z.PID()
	require.NoError(t, z.Kill())
	assert.Zero(t, z.PID())
	require.NoError(t, z.Start(ctx))
	assert.NotEqual(t, pid, z.PID())
	// ClickHouse reconnects on its own within its session timeout.
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err = create("t2"); !ch.IsErr(err, proto.ErrKeeperException) {
			break
		}
	}
	assert.True(t, ch.IsErr(err, proto.ErrReplicaAlreadyExists), "want REPLICA_ALREADY_EXISTS, got %v", err)
}

// TestClickHouseLocalIsNoReplica pins what clickhouse-local (libchdb 26.7)
// does with a ReplicatedMergeTree table, written up in docs/replicated.md:
// it creates the table's znodes in ZooKeeper, but the replica never
// activates (its restarting thread fails on every try with "Parameter
// 'interserver_http(s)_port' required for replication is not specified":
// only clickhouse-server sets the interserver address, and clickhouse-local
// cannot listen on an interserver port), so the table stays read-only and
// every insert fails with TABLE_IS_READ_ONLY, on a second replica r2 of the
// same table as well. The day this test fails, a
// new libchdb can be a replica and the replicated tests of the SDK can
// insert for real.
func TestClickHouseLocalIsNoReplica(t *testing.T) {
	embedded.SkipShort(t)
	z := startZooKeeper(t)
	c := startReplica(t, z, "r1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, do(ctx, c.Addr(), "CREATE TABLE default.t (k UInt64) "+
		"ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/t', '{replica}') ORDER BY k", nil))

	// The restarting thread retries every few seconds: give it ten.
	var readonly, expired, activeReplicas proto.ColUInt8
	for range 20 {
		readonly.Reset()
		expired.Reset()
		activeReplicas.Reset()
		require.NoError(t, do(ctx, c.Addr(), "SELECT is_readonly, is_session_expired, toUInt8(active_replicas) AS active_replicas FROM system.replicas WHERE table = 't'",
			proto.Results{{Name: "is_readonly", Data: &readonly}, {Name: "is_session_expired", Data: &expired}, {Name: "active_replicas", Data: &activeReplicas}}))
		require.Equal(t, 1, readonly.Rows())
		if readonly.Row(0) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	assert.Equal(t, uint8(1), readonly.Row(0), "is_readonly")
	assert.Equal(t, uint8(0), expired.Row(0), "is_session_expired: the ZooKeeper session is fine")
	assert.Equal(t, uint8(0), activeReplicas.Row(0), "active_replicas")

	err := do(ctx, c.Addr(), "INSERT INTO default.t SETTINGS insert_keeper_max_retries = 0 VALUES (1)", nil)
	assert.True(t, ch.IsErr(err, proto.ErrTableIsReadOnly), "want TABLE_IS_READ_ONLY, got %v", err)

	// A second replica of the same table, r2 in another process: both are
	// registered in ZooKeeper, neither is active, r2 cannot insert either.
	c2 := startReplica(t, z, "r2")
	require.NoError(t, do(ctx, c2.Addr(), "CREATE TABLE default.t (k UInt64) "+
		"ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/t', '{replica}') ORDER BY k", nil))
	var total, active2 proto.ColUInt8
	require.NoError(t, do(ctx, c2.Addr(), "SELECT toUInt8(total_replicas) AS total, toUInt8(active_replicas) AS active FROM system.replicas WHERE table = 't'",
		proto.Results{{Name: "total", Data: &total}, {Name: "active", Data: &active2}}))
	require.Equal(t, 1, total.Rows())
	assert.Equal(t, uint8(2), total.Row(0), "r2 sees r1 in ZooKeeper")
	assert.Equal(t, uint8(0), active2.Row(0))
	err = do(ctx, c2.Addr(), "INSERT INTO default.t SETTINGS insert_keeper_max_retries = 0 VALUES (1)", nil)
	assert.True(t, ch.IsErr(err, proto.ErrTableIsReadOnly), "want TABLE_IS_READ_ONLY on r2, got %v", err)
}
