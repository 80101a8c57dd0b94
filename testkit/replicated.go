package testkit

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// sharedReplicated is the one ZooKeeper and the one clickhouse-local
// configured with it per test binary, behind ReplicatedClickHouse.
var sharedReplicated struct {
	mu  sync.Mutex
	zk  *embedded.ZooKeeper
	srv *embedded.ClickHouse
	err error
}

// ReplicatedClickHouse returns the address of a ClickHouse server that
// knows a ZooKeeper, with macros {shard} = s1 and {replica} = r1, and a
// fresh database on it, dropped at cleanup: one embedded ZooKeeper and one
// clickhouse-local per test binary, started on first use. ZooKeeper's jars
// come from Maven the first time (about 13 MB; java and mvn are needed).
//
// ReplicatedMergeTree tables can be created there, with their znodes, and
// show their engine and settings (system.tables, merge_tree_settings) as
// on a server; but clickhouse-local never activates a replica (it has no
// interserver port), so such a table stays read-only and inserts into it
// fail with TABLE_IS_READ_ONLY, the error a replica gives while its
// ZooKeeper is away. See docs/replicated.md.
func ReplicatedClickHouse(t testing.TB) (addr, database string) {
	t.Helper()
	refuseInFuncChild(t, "testkit.ReplicatedClickHouse")
	sharedReplicated.mu.Lock()
	if sharedReplicated.srv == nil && sharedReplicated.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), firstStartTimeout)
		sharedReplicated.zk, sharedReplicated.err = embedded.StartZooKeeper(ctx, embedded.ZooKeeperOptions{Progress: os.Stderr})
		if sharedReplicated.err == nil {
			sharedReplicated.srv, sharedReplicated.err = embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{
				ZooKeeper: sharedReplicated.zk.Addr(), Macros: map[string]string{"shard": "s1", "replica": "r1"},
				Progress: os.Stderr,
			})
		}
		cancel()
	}
	srv, err := sharedReplicated.srv, sharedReplicated.err
	sharedReplicated.mu.Unlock()
	if err != nil {
		Unavailable(t, "replicated clickhouse (zookeeper and clickhouse-local)", err)
		return "", ""
	}
	return srv.Addr(), NewDatabase(t, srv.Addr())
}
