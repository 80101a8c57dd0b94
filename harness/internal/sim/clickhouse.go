package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// chRow is a row of the model's tables: the sink's table holds (ID, Hour),
// the view's target (Hour, Count).
type chRow struct {
	ID    string
	Hour  int64
	Count int64
}

func compareRows(a, b chRow) int {
	return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Hour, b.Hour), cmp.Compare(a.Count, b.Count))
}

// part is one inserted block: a data part all_N_N_0.
type part struct {
	name  string
	block int
	rows  []chRow
}

// mergeTree models a plain MergeTree table with the insert deduplication
// window (non-replicated_deduplication_window): a block's token is written
// to the deduplication log before its part is renamed into the table, so a
// crash during the insert may keep the token and lose the part; block
// numbers go on from the highest surviving part, so the next insert gets
// the lost part's name. Merges are not modelled (every part stays active), which is
// the case the lost-part check compares parts by content.
type mergeTree struct {
	name   string
	parts  []*part
	next   int
	log    map[string]string // token -> part name
	tokens []string          // in insertion order, for the window
	window int
}

func newMergeTree(name string, window int) *mergeTree {
	return &mergeTree{name: name, next: 1, log: map[string]string{}, window: window}
}

// insert adds rows as one block under token ("" for none) and returns the
// part name it was deduplicated against, or "".
func (t *mergeTree) insert(token string, rows []chRow) (dup string) {
	if token != "" {
		if p, ok := t.log[token]; ok {
			return p
		}
	}
	p := &part{name: fmt.Sprintf("all_%d_%d_0", t.next, t.next), block: t.next, rows: slices.Clone(rows)}
	t.next++
	t.parts = append(t.parts, p)
	if token != "" {
		t.log[token] = p.name
		t.tokens = append(t.tokens, token)
		if len(t.tokens) > t.window {
			delete(t.log, t.tokens[0])
			t.tokens = t.tokens[1:]
		}
	}
	return ""
}

func (t *mergeTree) part(name string) *part {
	for _, p := range t.parts {
		if p.name == name {
			return p
		}
	}
	return nil
}

// insertLost is an insert cut by a server crash after the block's token
// reached the deduplication log and before its part was renamed in: the
// token stays, the part (and its block number) is gone.
func (t *mergeTree) insertLost(token string) string {
	name := fmt.Sprintf("all_%d_%d_0", t.next, t.next)
	t.next++
	t.log[token] = name
	t.tokens = append(t.tokens, token)
	return name
}

// restart numbers blocks on from the highest surviving part, so the next
// insert takes the name of a part lost by the crash.
func (t *mergeTree) restart() {
	t.next = 1
	for _, p := range t.parts {
		t.next = max(t.next, p.block+1)
	}
}

func (t *mergeTree) rows() []chRow {
	var out []chRow
	for _, p := range t.parts {
		out = append(out, p.rows...)
	}
	return out
}

// hit is a deduplicated block: the table and the part its log names.
type hit struct {
	table string
	part  string
}

// ClickHouse models one server: the sink's MergeTree table "events", a
// materialized view fed per inserted block that counts its rows per hour
// into the MergeTree "hourly" (deduplicated in the view with its own token,
// deduplicate_blocks_in_dependent_materialized_views), and the window
// sink's ReplacingMergeTree(version, deleted) tables "sessions" and
// "hopping". A crash cuts the
// next insert (CrashNext): the server keeps the tokens it logged and loses
// the parts not renamed in yet, restarts with a new boot id, and the
// client gets an error.
type ClickHouse struct {
	boot    int
	events  *mergeTree
	hourly  *mergeTree
	windows map[string][]sessionRow // ReplacingMergeTree tables by name, rows in insertion order
	// crashNext cuts the next insert: 0 none, 1 after the tokens of both
	// tables were logged and before either part, 2 after the events part
	// and before the view's part.
	crashNext int
	lastLost  []string        // the parts the last crash lost, for the trace
	moved     map[string]bool // batches put back, by token (chsink's staging tables)
	// distinctViewRows makes the view write rows per writer (see viewRows).
	distinctViewRows bool
}

// errServerCrashed is the client's error for an insert the crash cut.
var errServerCrashed = errors.New("clickhouse model: server crashed during the insert")

func newClickHouse() *ClickHouse {
	return &ClickHouse{boot: 1, moved: map[string]bool{}, windows: map[string][]sessionRow{}, events: newMergeTree("events", 10000), hourly: newMergeTree("hourly", 10000)}
}

func (c *ClickHouse) table(name string) *mergeTree {
	if name == "events" {
		return c.events
	}
	return c.hourly
}

// viewRows is the view's query over one block: count() per hour; with
// distinct, per writer and hour (the writer is the rows' ID prefix: "w2"
// for the other writer, "p0" for the sink's partition), the shape
// chsink's Options.DistinctViewRows promises: rows only one writer writes.
func viewRows(rows []chRow, distinct bool) []chRow {
	type key struct {
		writer string
		hour   int64
	}
	counts := map[key]int64{}
	for _, r := range rows {
		k := key{hour: r.Hour}
		if distinct {
			k.writer = "p0"
			if strings.HasPrefix(r.ID, "w2-") {
				k.writer = "w2"
			}
		}
		counts[k]++
	}
	var out []chRow
	for k, n := range counts {
		out = append(out, chRow{ID: k.writer, Hour: k.hour, Count: n})
	}
	slices.SortFunc(out, compareRows)
	return out
}

// Insert inserts rows into events under token and feeds the view; it
// returns the deduplicated blocks (the server log the sink reads), or
// errServerCrashed. Only an insert the crash may cut (the sink's: the
// other writer has no repair, and the check counts its rows too) is cut.
func (c *ClickHouse) Insert(token string, rows []chRow, cuttable bool) ([]hit, error) {
	if k := c.crashNext; k != 0 && cuttable {
		c.crashNext = 0
		var lost []string
		_, dup := c.events.log[token]
		switch {
		case dup: // deduplicated: nothing written before the crash
		case k == 1:
			lost = append(lost, "events "+c.events.insertLost(token))
			lost = append(lost, "hourly "+c.hourly.insertLost(token+"/hourly"))
		default:
			c.events.insert(token, rows)
			lost = append(lost, "hourly "+c.hourly.insertLost(token+"/hourly"))
		}
		c.Restart()
		c.lastLost = lost
		return nil, errServerCrashed
	}
	var hits []hit
	if p := c.events.insert(token, rows); p != "" {
		hits = append(hits, hit{"events", p})
	}
	vt := ""
	if token != "" {
		vt = token + "/hourly"
	}
	if p := c.hourly.insert(vt, viewRows(rows, c.distinctViewRows)); p != "" {
		hits = append(hits, hit{"hourly", p})
	}
	return hits, nil
}

// Restart restarts the server: a new boot id, block numbers from the
// highest surviving part on.
func (c *ClickHouse) Restart() {
	c.boot++
	c.events.restart()
	c.hourly.restart()
}

// sessionRow is a row of a window table (sessions, hopping).
type sessionRow struct {
	Key        string
	Start, End time.Time
	Version    uint64
	Count      uint64
	Deleted    bool
}

func (r sessionRow) String() string {
	del := ""
	if r.Deleted {
		del = " deleted"
	}
	return fmt.Sprintf("%s[%s,%s)v%d%s", r.Key, r.Start.Format("15:04:05.000"), r.End.Format("15:04:05.000"), r.Version, del)
}

// InsertWindows appends rows to the window table named table.
func (c *ClickHouse) InsertWindows(table string, rows []sessionRow) {
	c.windows[table] = append(c.windows[table], rows...)
}

// Final is SELECT ... FINAL of the window table named table, a
// ReplacingMergeTree(Version, Deleted) ordered by (Key, Start): per key the
// row of the highest version (the last inserted among equals), dropped
// when it is a deletion.
func (c *ClickHouse) Final(table string) []sessionRow {
	type key struct {
		k string
		s int64
	}
	best := map[key]sessionRow{}
	for _, r := range c.windows[table] {
		k := key{r.Key, r.Start.UnixNano()}
		if b, ok := best[k]; !ok || r.Version >= b.Version {
			best[k] = r
		}
	}
	var out []sessionRow
	for _, r := range best {
		if !r.Deleted {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, compareSessions)
	return out
}

func compareSessions(a, b sessionRow) int {
	return cmp.Or(cmp.Compare(a.Key, b.Key), a.Start.Compare(b.Start), a.End.Compare(b.End), cmp.Compare(a.Count, b.Count))
}
