package repair

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// logFixture is one entry of testdata/serverlog/dedup.txt: a server log
// entry as the server sent it, and the hit parseDedupLog must read out.
type logFixture struct {
	priority      string
	source, text  string
	db, table, at string
}

func loadLogFixtures(t *testing.T) []logFixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "serverlog", "dedup.txt"))
	require.NoError(t, err)
	var out []logFixture
	for line := range strings.SplitSeq(strings.TrimRight(string(b), "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		require.Len(t, f, 6, line)
		out = append(out, logFixture{f[0], f[1], f[2], f[3], f[4], f[5]})
	}
	require.NotEmpty(t, out)
	return out
}

// TestParseDedupLogFixtures: every entry captured from the server is read
// as the table and part it names; an entry with any other text is not.
func TestParseDedupLogFixtures(t *testing.T) {
	fill := strings.NewReplacer("{db}", "demo", "{uuid}", "2216fd0f-1e43-4fb8-8cff-495eb2015bff", "{block}", "all_9712863775971870220_16318538294462949352")
	for _, fx := range loadLogFixtures(t) {
		h, ok := parseDedupLog(ch.Log{Source: fill.Replace(fx.source), Text: fill.Replace(fx.text)})
		require.True(t, ok, fx.source)
		assert.Equal(t, dedupHit{db: fill.Replace(fx.db), table: fill.Replace(fx.table), part: fx.at}, h, fx.source)
		_, ok = parseDedupLog(ch.Log{Source: fill.Replace(fx.source), Text: strings.Replace(fill.Replace(fx.text), "already exists", "exists", 1)})
		assert.False(t, ok, "another text")
	}
}

// TestServerLogFixtures pins the fixtures to what this server version
// logs: one INSERT, repeated with its token, is dropped by the table, a
// view's target and a view's inner table, and the log entries of the
// repeat are the fixtures' (a new server that words them differently, or
// names its tables otherwise, fails here rather than in a user's repair).
func TestServerLogFixtures(t *testing.T) {
	ctx := context.Background()
	addr, db := testkit.ClickHouse(t)
	c, err := ch.Dial(ctx, ch.Options{Address: addr, Database: db})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	for _, q := range []string{
		"CREATE TABLE events (id UInt64, kind String) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 10, enable_block_number_column = 1",
		"CREATE TABLE kind_counts (kind String, n UInt64) ENGINE = MergeTree ORDER BY kind SETTINGS non_replicated_deduplication_window = 10, enable_block_number_column = 1",
		"CREATE MATERIALIZED VIEW mv_kind_counts TO kind_counts AS SELECT kind, count() AS n FROM events GROUP BY kind",
		"CREATE MATERIALIZED VIEW mv_inner ENGINE = MergeTree ORDER BY kind SETTINGS non_replicated_deduplication_window = 10, enable_block_number_column = 1 AS SELECT kind FROM events",
	} {
		require.NoError(t, c.Do(ctx, ch.Query{Body: q}), q)
	}
	var logs []ch.Log
	for range 2 {
		logs = nil
		require.NoError(t, c.Do(ctx, ch.Query{
			Body: "INSERT INTO events VALUES (1, 'a'), (2, 'b')",
			Settings: []ch.Setting{
				{Key: "insert_deduplication_token", Value: "fixture", Important: true},
				ch.SettingInt("insert_deduplicate", 1),
				ch.SettingInt("deduplicate_blocks_in_dependent_materialized_views", 1),
				{Key: "send_logs_level", Value: "information"},
			},
			OnLogs: func(_ context.Context, l []ch.Log) error { logs = append(logs, l...); return nil },
		}))
	}
	uuid := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	block := regexp.MustCompile(`\ball_\d+_\d+( already)`)
	norm := func(s string) string {
		s = strings.ReplaceAll(s, db, "{db}")
		return block.ReplaceAllString(uuid.ReplaceAllString(s, "{uuid}"), "{block}$1")
	}
	var got, want []string
	for _, l := range logs {
		if !strings.HasPrefix(l.Source, db+".") {
			continue // the server's own loggers (executeQuery, ...)
		}
		got = append(got, strconv.Itoa(int(l.Priority))+"\t"+norm(l.Source)+"\t"+norm(l.Text))
	}
	for _, fx := range loadLogFixtures(t) {
		want = append(want, fx.priority+"\t"+fx.source+"\t"+fx.text)
	}
	slices.Sort(got)
	slices.Sort(want)
	assert.Equal(t, want, got, "the repeat's log entries of the tables")
}
