package repair

import (
	"context"
	"fmt"
	"testing"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestParseDedupLog: the table of a dropped block is read from the logger
// name, including a view's inner table, whose backquoted name holds dots
// (reading it as "`.inner_id" made a held part look lost).
func TestParseDedupLog(t *testing.T) {
	text := "Block with ID all_1_2 already exists as part all_19_19_1; ignoring it"
	for _, tt := range []struct{ source, db, table string }{
		{"demo.normalized_events (2216fd0f-1e43-4fb8-8cff-495eb2015bff)", "demo", "normalized_events"},
		{"demo.`.inner_id.2216fd0f-1e43-4fb8-8cff-495eb2015bff` (2216fd0f-1e43-4fb8-8cff-495eb2015bff)", "demo", ".inner_id.2216fd0f-1e43-4fb8-8cff-495eb2015bff"},
		{"`my.db`.events (x)", "my.db", "events"},
	} {
		h, ok := parseDedupLog(ch.Log{Source: tt.source, Text: text})
		assert.True(t, ok, tt.source)
		assert.Equal(t, dedupHit{db: tt.db, table: tt.table, part: "all_19_19_1"}, h, tt.source)
	}
	_, ok := parseDedupLog(ch.Log{Source: "demo.events (x)", Text: "Renaming temporary part"})
	assert.False(t, ok)
}

// TestCoveringRowsFollowsMerges: the lost-part check reads the rows of the
// parts that cover a named part; a merge that replaces them between the
// look-up and the query must not hide the rows (naming the parts found, the
// query read none, and a chaos run re-derived a view's rows that were there:
// its aggregating target counted them twice).
func TestCoveringRowsFollowsMerges(t *testing.T) {
	ctx := context.Background()
	addr, db := testkit.ClickHouse(t)
	c, err := ch.Dial(ctx, ch.Options{Address: addr, Database: db})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	exec := func(q string) { require.NoError(t, c.Do(ctx, ch.Query{Body: q}), q) }
	exec("CREATE TABLE t (id UInt64) ENGINE = MergeTree ORDER BY id")
	for i := range 5 {
		exec(fmt.Sprintf("INSERT INTO t VALUES (%d)", i))
	}
	parts, err := chsql.Strings(ctx, c, "SELECT name AS c0 FROM system.parts WHERE active AND database = currentDatabase() AND table = 't' ORDER BY min_block_number", 1)
	require.NoError(t, err)
	require.Len(t, parts, 5)
	third := parts[2][0]
	count := func(where string) string {
		rows, err := chsql.Strings(ctx, c, "SELECT toString(count()) AS c0 FROM t WHERE "+where, 1)
		require.NoError(t, err)
		return rows[0][0]
	}
	assert.Equal(t, "1", count(coveringRows([]string{third})), "before the merge: the part itself")
	exec("OPTIMIZE TABLE t FINAL")
	assert.Equal(t, "0", count("_part = "+chsql.Quote(third)), "the part is gone")
	assert.Equal(t, "5", count(coveringRows([]string{third})), "after the merge: the part that covers it")
	assert.Equal(t, "5", count(coveringRows([]string{"all_9_9_0", third})), "either range")
	assert.Equal(t, "0", count(coveringRows([]string{"all_9_9_0"})), "no part covers block 9")
}
