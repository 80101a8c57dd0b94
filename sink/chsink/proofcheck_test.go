package chsink_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// TestNewRefusesUnprovenShapes: every shape in which the sink could not
// tell exactly, after a merge, whether the server kept a replayed batch's
// rows when it lost the batch's part but kept its token is refused by New
// with a *TableCheckError matching ErrUnprovenTarget, naming the table and
// engine, the crash window and the way out; each shape it proves is
// accepted. (Issue 26, case 1: an AggregatingMergeTree target whose
// batches share keys with another writer's lost a whole batch; a check of
// keys cannot tell them apart.)
func TestNewRefusesUnprovenShapes(t *testing.T) {
	const window = " SETTINGS non_replicated_deduplication_window = 1000"
	const cols = "(id UInt64, org String, kind LowCardinality(String), at DateTime64(3), score Float64, tags Array(String), note Nullable(String))"
	own := func(engine string) []string {
		return []string{"CREATE TABLE %[1]s.events " + cols + " ENGINE = " + engine}
	}
	view := func(target string) []string {
		return []string{eventsDDL,
			"CREATE TABLE %[1]s.kind_counts (kind String, n UInt64, sign Int8 DEFAULT 1) ENGINE = " + target,
			"CREATE MATERIALIZED VIEW %[1]s.mv_kind_counts TO %[1]s.kind_counts AS SELECT toString(kind) AS kind, count() AS n FROM %[1]s.events GROUP BY kind"}
	}
	for _, tt := range []struct {
		name   string
		ddl    []string
		table  string   // refused: the table named; "" for accepted
		reason []string // refused: what the reason must say
		// distinct sets Options.DistinctViewRows: plain MergeTree targets
		// are then accepted.
		distinct bool
	}{
		{"table SummingMergeTree", own("SummingMergeTree ORDER BY id" + window), "events",
			[]string{"SummingMergeTree", "deduplication token", "ReplicatedSummingMergeTree", "windowsink"}, false},
		{"table MergeTree without block numbers", own("MergeTree ORDER BY id" + window), "events",
			[]string{"ALTER TABLE", "MODIFY SETTING enable_block_number_column = 1", "ReplicatedMergeTree"}, false},
		{"target AggregatingMergeTree", view("AggregatingMergeTree ORDER BY kind" + window), "kind_counts",
			[]string{"target of materialized view", "mv_kind_counts", "ReplicatedAggregatingMergeTree", "windowsink"}, false},
		{"target CollapsingMergeTree", view("CollapsingMergeTree(sign) ORDER BY kind" + window), "kind_counts",
			[]string{"target of materialized view", "ReplicatedCollapsingMergeTree"}, false},
		{"target MergeTree without block numbers", view("MergeTree ORDER BY kind" + window), "kind_counts",
			[]string{"target of materialized view", "enable_block_number_column = 1"}, false},
		{"view's inner AggregatingMergeTree", []string{eventsDDL,
			"CREATE MATERIALIZED VIEW %[1]s.mv_inner ENGINE = AggregatingMergeTree ORDER BY kind" + window +
				" AS SELECT toString(kind) AS kind, countState() AS n FROM %[1]s.events GROUP BY kind"}, ".inner_id.",
			[]string{"mv_inner", "AggregatingMergeTree"}, false},
		{"cascade of views", []string{eventsDDL,
			"CREATE TABLE %[1]s.kinds (kind String) ENGINE = MergeTree ORDER BY kind" + window + ", enable_block_number_column = 1",
			"CREATE MATERIALIZED VIEW %[1]s.mv_kinds TO %[1]s.kinds AS SELECT toString(kind) AS kind FROM %[1]s.events",
			"CREATE TABLE %[1]s.kind_counts (kind String, n UInt64) ENGINE = MergeTree ORDER BY kind" + window + ", enable_block_number_column = 1",
			"CREATE MATERIALIZED VIEW %[1]s.mv_kind_counts TO %[1]s.kind_counts AS SELECT kind, count() AS n FROM %[1]s.kinds GROUP BY kind"},
			"kind_counts", []string{"cascade", "kinds"}, true},
		{"target MergeTree with block numbers", view("MergeTree ORDER BY kind" + window + ", enable_block_number_column = 1"), "kind_counts",
			[]string{"target of materialized view", "another insert", "same rows", "ReplicatedMergeTree", "windowsink", "Options.DistinctViewRows"}, false},

		{"table MergeTree with block numbers", own("MergeTree ORDER BY id" + window + ", enable_block_number_column = 1"), "", nil, false},
		{"table ReplacingMergeTree", own("ReplacingMergeTree ORDER BY id" + window), "", nil, false},
		{"table ReplacingMergeTree(version, is_deleted)", []string{"CREATE TABLE %[1]s.events (id UInt64, org String, kind LowCardinality(String), at DateTime64(3), score Float64, tags Array(String), note Nullable(String), v UInt64, d UInt8) " +
			"ENGINE = ReplacingMergeTree(v, d) ORDER BY id" + window}, "", nil, false},
		{"target ReplacingMergeTree(version)", view("ReplacingMergeTree(n) ORDER BY kind" + window), "", nil, false},
		{"target MergeTree with block numbers, distinct rows", view("MergeTree ORDER BY kind" + window + ", enable_block_number_column = 1"), "", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t, tt.ddl...)
			s, err := chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "events"},
				checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: env.db, DistinctViewRows: tt.distinct})
			if tt.table == "" {
				require.NoError(t, err)
				require.NoError(t, s.Close())
				return
			}
			require.ErrorIs(t, err, chsink.ErrUnprovenTarget)
			var tce *chsink.TableCheckError
			require.ErrorAs(t, err, &tce)
			assert.Equal(t, env.db, tce.Database)
			assert.True(t, strings.HasPrefix(tce.Table, tt.table), "table %s", tce.Table)
			assert.NotEmpty(t, tce.Engine)
			for _, want := range tt.reason {
				assert.Contains(t, tce.Reason, want)
			}
		})
	}
}

// TestNewAcceptsBlockNumbersAddedLater: the way out New names for a plain
// MergeTree works on ClickHouse 26.7: the setting can be added to an
// existing table, and New then accepts it.
func TestNewAcceptsBlockNumbersAddedLater(t *testing.T) {
	env := setup(t, `CREATE TABLE %s.events (id UInt64, org String, kind LowCardinality(String), at DateTime64(3),
		score Float64, tags Array(String), note Nullable(String)) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000`)
	open := func() error {
		s, err := chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "events"},
			checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: env.db})
		if err == nil {
			err = s.Close()
		}
		return err
	}
	require.ErrorIs(t, open(), chsink.ErrUnprovenTarget)
	env.exec(t, "ALTER TABLE "+env.db+".events MODIFY SETTING enable_block_number_column = 1")
	require.NoError(t, open())
}
