package chsink

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// replicatedEngine is the engine clause of the tests' replicated tables:
// one ZooKeeper path per table.
const replicatedEngine = "('/clickhouse/tables/{database}/{table}', '{replica}')"

// TestCheckReplicatedTables runs the start-up table check on real
// ReplicatedMergeTree tables (on ZooKeeper, through clickhouse-local, where
// they are read-only but show their engine and settings as a server's do):
// it reads replicated_deduplication_window and _seconds, the defaults of
// ClickHouse 26.7 included, and a view target's time bound tightens the
// window guard of the table that feeds it; it refuses a window of 0, a
// view target's window below the replay depth, and, under
// MismatchReinsert, a replicated engine that is not idempotent, each
// naming the setting or the engine to change.
func TestCheckReplicatedTables(t *testing.T) {
	addr, db := testkit.ReplicatedClickHouse(t)
	ctx := context.Background()
	c, err := ch.Dial(ctx, ch.Options{Address: addr, Database: db})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	exec := func(q string) { require.NoError(t, c.Do(ctx, ch.Query{Body: fmt.Sprintf(q, db)}), q) }
	cols := []string{"k", "v"}

	exec("CREATE TABLE %s.defaults (k UInt64, v String) ENGINE = ReplicatedMergeTree" + replicatedEngine + " ORDER BY k")
	exec("CREATE TABLE %s.tuned (k UInt64, v String) ENGINE = ReplicatedReplacingMergeTree" + replicatedEngine + " ORDER BY k " +
		"SETTINGS replicated_deduplication_window = 500, replicated_deduplication_window_seconds = 600")
	// A plain table feeding a replicated target through a view: the
	// target's hour bounds the replay of the plain table too.
	exec("CREATE TABLE %s.plain (k UInt64, v String) ENGINE = MergeTree ORDER BY k SETTINGS non_replicated_deduplication_window = 100, enable_block_number_column = 1")
	exec("CREATE TABLE %s.plain_target (v String, n UInt64) ENGINE = ReplicatedSummingMergeTree" + replicatedEngine + " ORDER BY v " +
		"SETTINGS replicated_deduplication_window = 200, replicated_deduplication_window_seconds = 120")
	exec("CREATE MATERIALIZED VIEW %[1]s.plain_mv TO %[1]s.plain_target AS SELECT v, count() AS n FROM %[1]s.plain GROUP BY v")

	for _, tt := range []struct {
		table string
		want  tableInfo
	}{
		// ClickHouse 26.7's defaults: 10,000 blocks, an hour (since 25.9).
		{"defaults", tableInfo{engine: "ReplicatedMergeTree", replicated: true, windowBlocks: 10000, windowSeconds: 3600}},
		{"tuned", tableInfo{engine: "ReplicatedReplacingMergeTree", replicated: true, windowBlocks: 500, windowSeconds: 600}},
		{"plain", tableInfo{engine: "MergeTree", windowBlocks: 100, windowSeconds: 120, blockNumbers: true}},
	} {
		info, err := checkTable(ctx, c, db, tt.table, cols, false, false)
		require.NoError(t, err, tt.table)
		assert.Equal(t, tt.want, info, tt.table)
	}

	exec("CREATE TABLE %s.no_window (k UInt64, v String) ENGINE = ReplicatedMergeTree" + replicatedEngine + " ORDER BY k " +
		"SETTINGS replicated_deduplication_window = 0")
	exec("CREATE TABLE %s.source (k UInt64, v String) ENGINE = ReplicatedMergeTree" + replicatedEngine + " ORDER BY k " +
		"SETTINGS replicated_deduplication_window = 100")
	exec("CREATE TABLE %s.small_target (v String, n UInt64) ENGINE = ReplicatedSummingMergeTree" + replicatedEngine + " ORDER BY v " +
		"SETTINGS replicated_deduplication_window = 50")
	exec("CREATE MATERIALIZED VIEW %[1]s.small_mv TO %[1]s.small_target AS SELECT v, count() AS n FROM %[1]s.source GROUP BY v")
	for _, tt := range []struct {
		name, table string
		reinsert    bool
		want        error
		reason      string
	}{
		{"window 0", "no_window", false, ErrNoDedupWindow,
			"replicated_deduplication_window = 0: ClickHouse would not deduplicate"},
		{"view target below the replay depth", "source", false, ErrNoDedupWindow,
			"target of materialized view " + db + ".small_mv over " + db + ".source: replicated_deduplication_window = 50 is below the replay depth"},
		{"reinsert on a replicated MergeTree", "defaults", true, ErrNotIdempotent, "MismatchReinsert needs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := checkTable(ctx, c, db, tt.table, cols, tt.reinsert, false)
			require.ErrorIs(t, err, tt.want)
			var tce *TableCheckError
			require.True(t, errors.As(err, &tce))
			assert.Contains(t, tce.Reason, tt.reason)
		})
	}
	_, err = checkTable(ctx, c, db, "tuned", cols, true, false)
	assert.NoError(t, err, "ReplicatedReplacingMergeTree is idempotent under re-inserted rows")
}
