package repair

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// viewFixture is one file of testdata/viewsql: a view's DDL, the query
// text the server keeps for it (formatQuery of as_select) and what readFrom
// makes of that to read the staging table "stage" instead of db.events.
type viewFixture struct {
	name, ddl, query, want string
}

func loadViewFixtures(t *testing.T, db string) []viewFixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "viewsql", "*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var out []viewFixture
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := strings.ReplaceAll(string(b), "{db}", db)
		sections := map[string]*strings.Builder{}
		var cur *strings.Builder
		for line := range strings.SplitSeq(text, "\n") {
			switch line {
			case "-- ddl", "-- query", "-- want":
				cur = &strings.Builder{}
				sections[line[3:]] = cur
				continue
			}
			if cur != nil {
				cur.WriteString(line + "\n")
			}
		}
		fx := viewFixture{name: filepath.Base(f)}
		for k, p := range map[string]*string{"ddl": &fx.ddl, "query": &fx.query, "want": &fx.want} {
			require.Contains(t, sections, k, f)
			*p = strings.TrimRight(sections[k].String(), "\n")
		}
		out = append(out, fx)
	}
	return out
}

// TestReadFrom: the staging table replaces the table the view is
// triggered by, as a token, and nothing else (db.events_orgs, a string
// literal 'db.events', a second reference in a subquery stay).
func TestReadFrom(t *testing.T) {
	for _, fx := range loadViewFixtures(t, "d") {
		got, err := readFrom(fx.query, "d", "events", "d", "stage")
		require.NoError(t, err, fx.name)
		assert.Equal(t, fx.want, got, fx.name)
	}
	_, err := readFrom("SELECT 1 FROM d.events_orgs", "d", "events", "d", "stage")
	assert.Error(t, err, "a query that does not read the table")
	_, err = readFrom("SELECT 'unterminated FROM d.events", "d", "events", "d", "stage")
	assert.Error(t, err)
}

// TestViewQueryFixtures pins the fixtures' query text to what this server
// version keeps for the view: a new server that formats views differently
// fails here, not in a user's repair.
func TestViewQueryFixtures(t *testing.T) {
	ctx := context.Background()
	addr, db := testkit.ClickHouse(t)
	c, err := ch.Dial(ctx, ch.Options{Address: addr, Database: db})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	for _, q := range []string{
		"CREATE TABLE events (id UInt64, org String, kind LowCardinality(String), score Float64) ENGINE = MergeTree ORDER BY id",
		"CREATE TABLE events_orgs (org String, name String) ENGINE = MergeTree ORDER BY org",
		"CREATE TABLE org_kinds (kind String, org_name String, n UInt64) ENGINE = SummingMergeTree ORDER BY (kind, org_name)",
		"CREATE TABLE kinds (kind String, src String) ENGINE = MergeTree ORDER BY kind",
		"CREATE TABLE new_orgs (org String) ENGINE = MergeTree ORDER BY org",
	} {
		require.NoError(t, c.Do(ctx, ch.Query{Body: q}), q)
	}
	for _, fx := range loadViewFixtures(t, db) {
		require.NoError(t, c.Do(ctx, ch.Query{Body: fx.ddl}), fx.name)
		name := strings.Fields(fx.ddl)[3] // CREATE MATERIALIZED VIEW db.name
		_, view, _ := strings.Cut(name, ".")
		rows, err := chsql.Strings(ctx, c, fmt.Sprintf("SELECT formatQuery(as_select) AS c0 FROM system.tables WHERE database = %s AND name = %s", chsql.Quote(db), chsql.Quote(view)), 1)
		require.NoError(t, err)
		require.Len(t, rows, 1, fx.name)
		assert.Equal(t, fx.query, rows[0][0], fx.name)
		sel, err := readFrom(rows[0][0], db, "events", db, "events")
		require.NoError(t, err, fx.name)
		_, err = outputColumns(ctx, c, sel)
		require.NoError(t, err, "the rewritten query runs: %s", fx.name)
	}
}
