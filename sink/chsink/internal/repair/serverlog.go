package repair

// The server's log of a dropped duplicate block: the one line of a plain
// MergeTree's text that the lost-part check reads. Fixtures under
// testdata/serverlog pin it for the server versions tested.

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ClickHouse/ch-go"
)

// dedupLine is how a plain MergeTree logs a dropped duplicate block.
var dedupLine = regexp.MustCompile(`Block with ID \S+ already exists as part (\S+); ignoring it`)

// Log collects the blocks that a query's server log reports dropped as
// duplicates, for Settle. The zero value is ready for Watch.
type Log struct {
	hits []dedupHit
}

// Watch returns q made to ask for the server's log (send_logs_level =
// information, added to a copy of q's settings) and to collect into l the
// blocks it reports dropped. l collects while the query runs, in the
// goroutine that runs it.
func (l *Log) Watch(q ch.Query) ch.Query {
	q.Settings = append(slices.Clip(q.Settings), ch.Setting{Key: "send_logs_level", Value: "information"})
	q.OnLogs = func(_ context.Context, logs []ch.Log) error {
		for _, e := range logs {
			if h, ok := parseDedupLog(e); ok {
				l.hits = append(l.hits, h)
			}
		}
		return nil
	}
	return q
}

// dedupHit is one dropped block: the table that dropped it and the part its
// deduplication log pointed at.
type dedupHit struct {
	db, table, part string
}

// parseDedupLog reads a server log entry; ok is false unless it reports a
// dropped duplicate. The entry's source is the table's logger name,
// "database.table (uuid)".
func parseDedupLog(l ch.Log) (dedupHit, bool) {
	m := dedupLine.FindStringSubmatch(l.Text)
	if m == nil {
		return dedupHit{}, false
	}
	name, _, _ := strings.Cut(l.Source, " (")
	db, rest, ok := cutIdent(name)
	if !ok || !strings.HasPrefix(rest, ".") {
		return dedupHit{}, false
	}
	table, rest, ok := cutIdent(rest[1:])
	if !ok || rest != "" {
		return dedupHit{}, false
	}
	return dedupHit{db: db, table: table, part: m[1]}, true
}

// cutIdent reads one identifier of a logger name, backquoted or not: a
// view's inner table is logged as db.`.inner_id.<uuid>`, dots included.
func cutIdent(s string) (ident, rest string, ok bool) {
	if strings.HasPrefix(s, "`") {
		end := strings.IndexByte(s[1:], '`')
		if end < 0 {
			return "", "", false
		}
		return s[1 : end+1], s[end+2:], true
	}
	i := strings.IndexByte(s, '.')
	if i < 0 {
		return s, "", s != ""
	}
	return s[:i], s[i:], i > 0
}

// PartBlocks parses a part name, partition_min_max_level[_mutation].
func PartBlocks(part string) (partition string, lo, hi int64, ok bool) {
	f := strings.Split(part, "_")
	if len(f) < 4 || len(f) > 5 {
		return "", 0, 0, false
	}
	lo, err1 := strconv.ParseInt(f[1], 10, 64)
	hi, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || lo > hi {
		return "", 0, 0, false
	}
	return f[0], lo, hi, true
}
