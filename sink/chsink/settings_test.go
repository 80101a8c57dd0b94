package chsink_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// unsafeDefaults is a settings profile under which an insert that relies
// on the server's defaults is not deduplicated, skips its views'
// deduplication, goes through the asynchronous buffer, and succeeds while a
// view fails.
const unsafeDefaults = `
      <deduplicate_insert>disable</deduplicate_insert>
      <insert_deduplicate>0</insert_deduplicate>
      <deduplicate_blocks_in_dependent_materialized_views>0</deduplicate_blocks_in_dependent_materialized_views>
      <async_insert>1</async_insert>
      <materialized_views_ignore_errors>1</materialized_views_ignore_errors>`

// constrained are users whose profile holds one setting of the sink's at
// an unsafe value the sink may not change, and the setting New must name.
var constrained = []struct {
	user, setting, profile string
}{
	{"const_insert_deduplicate", "insert_deduplicate",
		`<insert_deduplicate>0</insert_deduplicate><constraints><insert_deduplicate><const/></insert_deduplicate></constraints>`},
	{"const_deduplicate_insert", "deduplicate_insert",
		`<deduplicate_insert>disable</deduplicate_insert><constraints><deduplicate_insert><const/></deduplicate_insert></constraints>`},
	{"const_mv_dedup", "deduplicate_blocks_in_dependent_materialized_views",
		`<deduplicate_blocks_in_dependent_materialized_views>0</deduplicate_blocks_in_dependent_materialized_views>` +
			`<constraints><deduplicate_blocks_in_dependent_materialized_views><readonly/></deduplicate_blocks_in_dependent_materialized_views></constraints>`},
	{"min_async_insert", "async_insert",
		`<async_insert>1</async_insert><constraints><async_insert><min>1</min></async_insert></constraints>`},
	{"const_mv_ignore_errors", "materialized_views_ignore_errors",
		`<materialized_views_ignore_errors>1</materialized_views_ignore_errors>` +
			`<constraints><materialized_views_ignore_errors><const/></materialized_views_ignore_errors></constraints>`},
	{"const_dedup_insert_select", "deduplicate_insert_select",
		`<deduplicate_insert_select>disable</deduplicate_insert_select>` +
			`<constraints><deduplicate_insert_select><const/></deduplicate_insert_select></constraints>`},
	{"readonly_user", "insert_deduplicate", `<readonly>1</readonly>`},
}

// usersXML is the users configuration of settingsServer: user "default"
// with the unsafe defaults, and each constrained user.
func usersXML() string {
	var profiles, users strings.Builder
	user := func(name string) {
		fmt.Fprintf(&users, "    <%[1]s><password></password><networks><ip>::/0</ip></networks><profile>%[1]s</profile><quota>default</quota></%[1]s>\n", name)
	}
	fmt.Fprintf(&profiles, "    <default>%s\n    </default>\n", unsafeDefaults)
	user("default")
	for _, c := range constrained {
		fmt.Fprintf(&profiles, "    <%[1]s>%[2]s</%[1]s>\n", c.user, c.profile)
		user(c.user)
	}
	return "<clickhouse>\n  <profiles>\n" + profiles.String() + "  </profiles>\n  <users>\n" + users.String() +
		"  </users>\n  <quotas><default></default></quotas>\n</clickhouse>\n"
}

// settingsServer starts a ClickHouse whose users are usersXML's, with
// system.query_log, and returns an environment with a fresh database on it.
func settingsServer(t *testing.T) chEnv {
	t.Helper()
	if os.Getenv(testkit.EnvClickHouseAddr) != "" {
		t.Skipf("%s is set; this test configures a server's users itself", testkit.EnvClickHouseAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{Users: usersXML(), QueryLog: true, Progress: os.Stderr})
	if err != nil {
		testkit.Unavailable(t, "clickhouse", err)
		return chEnv{}
	}
	t.Cleanup(func() { _ = srv.Stop() })
	db := testkit.NewDatabase(t, srv.Addr())
	c, err := ch.Dial(ctx, ch.Options{Address: srv.Addr(), Database: db})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	env := chEnv{addr: srv.Addr(), db: db, conn: c}
	env.exec(t, fmt.Sprintf(eventsDDL, db))
	return env
}

// TestNewRefusesSettingItCannotSet gives the sink a user whose profile
// holds one of the settings every insert sends at an unsafe value, as a
// constraint: New refuses the server with a *SettingError naming it.
func TestNewRefusesSettingItCannotSet(t *testing.T) {
	env := settingsServer(t)
	for _, tt := range constrained {
		t.Run(tt.user, func(t *testing.T) {
			_, err := chsink.New(context.Background(), chsink.Table{Addr: env.addr, Name: "events"},
				checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema,
				chsink.Options{Database: env.db, User: tt.user})
			require.ErrorIs(t, err, chsink.ErrUnsafeSetting)
			se, ok := errors.AsType[*chsink.SettingError](err)
			require.True(t, ok, "%T: %v", err, err)
			assert.Equal(t, tt.setting, se.Setting)
			assert.Contains(t, err.Error(), tt.setting)
			assert.Contains(t, se.Fix, "profile")
		})
	}
}

// TestInsertsCarryDedupSettings runs a sink, kills it before its
// checkpoint completes and replays its batches on a server whose default
// profile turns off every deduplication the sink relies on (unsafeDefaults):
// the table and its rollup view hold each row once, because every insert
// carried the sink's settings itself, as system.query_log shows.
func TestInsertsCarryDedupSettings(t *testing.T) {
	env := settingsServer(t)
	env.withRollup(t)
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()

	s1 := env.newSink(t, store, chsink.Options{MaxRows: 37})
	srv := s1.Server()
	assert.Equal(t, "disable", srv.Defaults["deduplicate_insert"], "the profile's default")
	assert.Equal(t, map[string]string{
		"insert_deduplicate": "1", "deduplicate_insert": "enable", "deduplicate_blocks_in_dependent_materialized_views": "1",
		"async_insert": "0", "materialized_views_ignore_errors": "0",
		"update_insert_deduplication_token_in_dependent_materialized_views": "1", // obsolete, still accepted
	}, srv.Sent)
	assert.True(t, strings.HasPrefix(srv.Version, "26."), srv.Version)
	assert.Equal(t, int64(1000), srv.WindowBlocks)

	require.NoError(t, feed(ctx, t, s1, 0, 100))
	state1, err := s1.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, s1.CheckpointCompleted(ctx, 1))
	require.NoError(t, feed(ctx, t, s1, 100, 300))
	_, err = s1.Snapshot(ctx, 2) // inserted; checkpoint 2 never completes
	require.NoError(t, err)
	// kill -9: s1 is abandoned.

	s2 := env.newSink(t, store, chsink.Options{MaxRows: 1000})
	require.NoError(t, s2.Restore(ctx, state1))
	require.NoError(t, feed(ctx, t, s2, 100, 400))
	_, err = s2.Snapshot(ctx, 3)
	require.NoError(t, err)
	require.NoError(t, s2.CheckpointCompleted(ctx, 3))
	env.assertExact(t, 400, true)

	env.exec(t, "SYSTEM FLUSH LOGS")
	inserts := fmt.Sprintf("FROM system.query_log WHERE type = 'QueryFinish' AND query_kind = 'Insert' "+
		"AND startsWith(query, 'INSERT INTO `%s`.`events`')", env.db)
	total := env.count(t, "SELECT count() "+inserts)
	require.Greater(t, total, uint64(10), "the sinks' inserts in system.query_log")
	carried := env.count(t, "SELECT countIf(Settings['insert_deduplication_token'] != '' "+
		"AND Settings['insert_deduplicate'] = '1' AND Settings['deduplicate_insert'] = 'enable' "+
		"AND Settings['deduplicate_blocks_in_dependent_materialized_views'] = '1' "+
		"AND Settings['async_insert'] = '0' AND Settings['materialized_views_ignore_errors'] = '0') "+inserts)
	assert.Equal(t, total, carried, "inserts that carried every dedup setting")
}

// TestNewRefusesReplicatedWindowWithoutSeconds: a replicated table with
// replicated_deduplication_window_seconds = 0 keeps only the newest
// block's hash (the bound counts back from the newest block), not every
// hash: New refuses it and names the setting.
func TestNewRefusesReplicatedWindowWithoutSeconds(t *testing.T) {
	addr, db := testkit.ReplicatedClickHouse(t)
	require.NoError(t, testkit.Exec(context.Background(), addr, db, `CREATE TABLE events (
		id UInt64, org String, kind LowCardinality(String), at DateTime64(3),
		score Float64, tags Array(String), note Nullable(String)
	) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{database}/{table}', '{replica}') ORDER BY id
	SETTINGS replicated_deduplication_window_seconds = 0`))
	_, err := chsink.New(context.Background(), chsink.Table{Addr: addr, Name: "events"},
		checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: db})
	require.ErrorIs(t, err, chsink.ErrNoDedupWindow)
	assert.Contains(t, err.Error(), "replicated_deduplication_window_seconds = 0")
}
