package chsink

import (
	"testing"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
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
