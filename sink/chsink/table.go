package chsink

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/ch-go"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/repair"
)

// ErrNoDedupWindow is matched by *TableCheckError when a table cannot
// deduplicate inserted blocks: a plain MergeTree with
// non_replicated_deduplication_window = 0 (the default), or an engine that
// does not deduplicate at all.
var ErrNoDedupWindow = errors.New("chsink: table does not deduplicate inserted blocks")

// ErrTableSchema is matched by *TableCheckError when the table is missing or
// lacks a column that the sink writes.
var ErrTableSchema = errors.New("chsink: table does not match the sink's columns")

// ErrNotIdempotent is matched by *TableCheckError when Options.OnMismatch
// is MismatchReinsert and the table, or the target of a materialized view fed
// by it, is not a ReplacingMergeTree (replicated or not): inserting
// replayed rows again would count them twice.
var ErrNotIdempotent = errors.New("chsink: table is not idempotent under re-inserted rows")

// TableCheckError is returned by New when the target table cannot give
// exactly-once inserts.
type TableCheckError struct {
	Database, Table string
	Engine          string
	Reason          string
	Err             error // ErrNoDedupWindow, ErrTableSchema, ErrNotIdempotent or ErrUnprovenTarget
}

func (e *TableCheckError) Error() string {
	if e.Engine == "" { // no such table
		return fmt.Sprintf("chsink: table %s.%s: %s", e.Database, e.Table, e.Reason)
	}
	return fmt.Sprintf("chsink: table %s.%s (%s): %s", e.Database, e.Table, e.Engine, e.Reason)
}

func (e *TableCheckError) Unwrap() error { return e.Err }

// tableInfo is what New learns about the target table.
type tableInfo struct {
	engine        string
	replicated    bool
	windowBlocks  int64 // deduplication window in blocks
	windowSeconds int64 // 0: no time bound (plain MergeTree)
	blockNumbers  bool  // enable_block_number_column = 1: each row stores its block number
}

var windowSetting = regexp.MustCompile(`\b(non_replicated_deduplication_window|replicated_deduplication_window|replicated_deduplication_window_seconds|enable_block_number_column)\s*=\s*'?(\d+|true|false)`)

// checkTable verifies the table's engine, deduplication window and columns,
// and the deduplication window of every materialized view target fed by it:
// with deduplicate_blocks_in_dependent_materialized_views = 1 a target table
// deduplicates the view's blocks only if it has a window itself.
//
// With reinsert (MismatchReinsert) the table and every view target must also
// be of an engine under which re-inserted rows are idempotent.
func checkTable(ctx context.Context, c *ch.Client, db, table string, columns []string, reinsert, distinct bool) (tableInfo, error) {
	info, err := dedupWindow(ctx, c, db, table)
	if err != nil {
		return info, err
	}
	if reinsert && !idempotentEngine(info.engine) {
		return info, &TableCheckError{Database: db, Table: table, Engine: info.engine,
			Reason: "MismatchReinsert needs a ReplacingMergeTree: " +
				"re-inserted rows of a replayed batch would be counted twice", Err: ErrNotIdempotent}
	}
	if why := repair.Provable(db, table, info.shape()); why != "" {
		return info, unproven(db, table, info, why)
	}
	targetSeconds, err := checkViews(ctx, c, db, table, info.replicated, info.windowBlocks, 0, reinsert, distinct)
	if err != nil {
		return info, err
	}
	// A view target with a time bound forgets a token when its own bound
	// has passed, whatever the table's: the window guard holds a replay to
	// the tightest bound of the table and its targets.
	info.windowSeconds = tighterSeconds(info.windowSeconds, targetSeconds)
	have, err := chsql.Strings(ctx, c, fmt.Sprintf(
		"SELECT name AS c0, type AS c1 FROM system.columns WHERE database = %s AND table = %s", chsql.Quote(db), chsql.Quote(table)), 2)
	if err != nil {
		return info, fmt.Errorf("chsink: read columns of %s.%s: %w", db, table, err)
	}
	known := map[string]bool{}
	for _, r := range have {
		known[r[0]] = true
	}
	var missing []string
	for _, name := range columns {
		if !known[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return info, &TableCheckError{Database: db, Table: table, Engine: info.engine,
			Reason: "missing columns " + strings.Join(missing, ", "), Err: ErrTableSchema}
	}
	return info, nil
}

// shape is what the lost-part check needs to know of the table.
func (info tableInfo) shape() repair.Shape {
	return repair.Shape{Engine: info.engine, Replicated: info.replicated, BlockNumbers: info.blockNumbers}
}

// unproven is New's refusal of db.table, whose lost part could not be
// told (repair.Provable or repair.TargetRefused says why).
func unproven(db, table string, info tableInfo, why string) error {
	return &TableCheckError{Database: db, Table: table, Engine: info.engine, Reason: why, Err: ErrUnprovenTarget}
}

// blockNumber returns a counter that grows by one per block inserted into
// the table: the highest block number for a plain MergeTree (numbers are
// table-wide), the sum over partitions of the highest block number for a
// replicated table (numbers are per partition). -1 when unknown.
func blockNumber(ctx context.Context, c *ch.Client, db, table string, replicated bool) (int64, error) {
	q := "SELECT toString(max(max_block_number)) AS c0 FROM system.parts WHERE active AND database = %s AND table = %s"
	if replicated {
		q = "SELECT toString(sum(m)) AS c0 FROM (SELECT max(max_block_number) AS m FROM system.parts WHERE active AND database = %s AND table = %s GROUP BY partition_id)"
	}
	rows, err := chsql.Strings(ctx, c, fmt.Sprintf(q, chsql.Quote(db), chsql.Quote(table)), 1)
	if err != nil {
		return -1, err
	}
	if len(rows) == 0 {
		return 0, nil
	}
	n, err := strconv.ParseInt(rows[0][0], 10, 64)
	if err != nil {
		return 0, nil
	}
	return n, nil
}

// SelectFinal returns a query that reads a ReplacingMergeTree table with
// FINAL, so rows that share a sorting key and were not merged yet are
// collapsed to the one with the highest version at read time:
//
//	SELECT cols FROM db.table FINAL [WHERE where]
//
// where is inserted verbatim; pass "" for none.
func SelectFinal(db, table string, cols []string, where string) string {
	q := "SELECT " + chsql.JoinIdents(cols) + " FROM " + chsql.Ident(db) + "." + chsql.Ident(table) + " FINAL"
	if where != "" {
		q += " WHERE " + where
	}
	return q
}

// SelectLatest returns a query that reads the latest version of each key of
// a ReplacingMergeTree table with argMax, without FINAL:
//
//	SELECT keys, argMax(col, version) AS col, ... FROM db.table GROUP BY keys
//
// It gives the same answer as FINAL for tables without an is_deleted column
// and can be cheaper when only a few columns are read.
func SelectLatest(db, table string, keys []string, version string, cols []string) string {
	parts := make([]string, 0, len(keys)+len(cols))
	for _, k := range keys {
		parts = append(parts, chsql.Ident(k))
	}
	for _, c := range cols {
		parts = append(parts, fmt.Sprintf("argMax(%s, %s) AS %s", chsql.Ident(c), chsql.Ident(version), chsql.Ident(c)))
	}
	return "SELECT " + strings.Join(parts, ", ") + " FROM " + chsql.Ident(db) + "." + chsql.Ident(table) + " GROUP BY " + chsql.JoinIdents(keys)
}

// dedupWindow reads a table's engine and deduplication window and fails
// unless the table deduplicates inserted blocks.
func dedupWindow(ctx context.Context, c *ch.Client, db, table string) (tableInfo, error) {
	rows, err := chsql.Strings(ctx, c, fmt.Sprintf(
		"SELECT engine AS c0, engine_full AS c1 FROM system.tables WHERE database = %s AND name = %s",
		chsql.Quote(db), chsql.Quote(table)), 2)
	if err != nil {
		return tableInfo{}, fmt.Errorf("chsink: check table %s.%s: %w", db, table, err)
	}
	if len(rows) == 0 {
		return tableInfo{}, &TableCheckError{Database: db, Table: table, Reason: "table does not exist", Err: ErrTableSchema}
	}
	info := tableInfo{engine: rows[0][0]}
	full := rows[0][1]
	if !strings.HasSuffix(info.engine, "MergeTree") {
		return info, &TableCheckError{Database: db, Table: table, Engine: info.engine,
			Reason: "only MergeTree-family tables deduplicate inserted blocks", Err: ErrNoDedupWindow}
	}
	info.replicated = strings.HasPrefix(info.engine, "Replicated") || strings.HasPrefix(info.engine, "Shared")

	defaults, err := chsql.Strings(ctx, c, "SELECT name AS c0, value AS c1 FROM system.merge_tree_settings WHERE name IN "+
		"('non_replicated_deduplication_window','replicated_deduplication_window','replicated_deduplication_window_seconds','enable_block_number_column')", 2)
	if err != nil {
		return info, fmt.Errorf("chsink: read merge_tree_settings: %w", err)
	}
	settings := map[string]int64{}
	for _, r := range defaults {
		settings[r[0]] = settingValue(r[1])
	}
	for _, m := range windowSetting.FindAllStringSubmatch(full, -1) {
		settings[m[1]] = settingValue(m[2])
	}
	info.blockNumbers = settings["enable_block_number_column"] == 1
	if info.replicated {
		info.windowBlocks = settings["replicated_deduplication_window"]
		info.windowSeconds = settings["replicated_deduplication_window_seconds"]
	} else {
		info.windowBlocks = settings["non_replicated_deduplication_window"]
	}
	if info.windowBlocks <= 0 {
		setting := "non_replicated_deduplication_window"
		if info.replicated {
			setting = "replicated_deduplication_window"
		}
		return info, &TableCheckError{Database: db, Table: table, Engine: info.engine,
			Reason: fmt.Sprintf("%s = 0: ClickHouse would not deduplicate retried or replayed blocks, so the sink would degrade to at-least-once; "+
				"set it above the replay depth in blocks, e.g. ALTER TABLE %s.%s MODIFY SETTING %s = 1000", setting, db, table, setting),
			Err: ErrNoDedupWindow}
	}
	if info.replicated && info.windowSeconds <= 0 {
		// Not "no time bound": the cleanup counts the bound back from the
		// newest block and drops every hash older than newest - seconds,
		// so 0 keeps only the newest block's (see settings.go).
		return info, &TableCheckError{Database: db, Table: table, Engine: info.engine,
			Reason: fmt.Sprintf("replicated_deduplication_window_seconds = 0: ClickHouse would keep only the newest block's hash, "+
				"so a retried or replayed batch would be inserted again; set it above the longest replay in seconds, "+
				"e.g. ALTER TABLE %s.%s MODIFY SETTING replicated_deduplication_window_seconds = 3600", db, table),
			Err: ErrNoDedupWindow}
	}
	return info, nil
}

// tighterSeconds returns the smaller of two time bounds in seconds, where 0
// means none.
func tighterSeconds(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// checkViews checks the target tables of the materialized views that read
// db.table, recursively, and returns the tightest time bound among their
// windows (replicated_deduplication_window_seconds; 0 if none has one). depthBlocks is the replay depth in blocks of
// db.table: the window guard lets a journaled batch be re-inserted while
// fewer blocks than that went into db.table since, and each of them may
// give the target a block through the view. A target fed by n views (from
// this table and others) takes blocks n times as fast, so its window must
// hold n times the depth, or a replayed block that the source table drops
// as a duplicate would be counted again by a target that forgot its token.
//
// Each target must also be of a shape whose lost part the sink can tell
// exactly, a target fed through another view (a cascade) must be
// replicated, as must the view target that feeds it, and unless distinct
// (Options.DistinctViewRows) a target must not be a plain MergeTree
// either (repair.TargetRefused).
func checkViews(ctx context.Context, c *ch.Client, db, table string, replicated bool, depthBlocks int64, depth int, reinsert, distinct bool) (int64, error) {
	if depth > 8 {
		return 0, nil
	}
	rows, err := chsql.Strings(ctx, c, fmt.Sprintf(
		"SELECT database AS c0, name AS c1, target_database AS c2, target_table AS c3 FROM system.tables "+
			"WHERE engine = 'MaterializedView' AND (database, name) IN "+
			"(SELECT arrayJoin(arrayZip(dependencies_database, dependencies_table)) FROM system.tables WHERE database = %s AND name = %s)",
		chsql.Quote(db), chsql.Quote(table)), 4)
	if err != nil {
		return 0, fmt.Errorf("chsink: list materialized views of %s.%s: %w", db, table, err)
	}
	var seconds int64
	for _, r := range rows {
		tdb, tt := r[2], r[3]
		if tt == "" {
			continue // a view with an inner table: not checked (name it with TO)
		}
		info, err := dedupWindow(ctx, c, tdb, tt)
		var feeders int64 = 1
		if err == nil {
			feeders, err = viewsInto(ctx, c, tdb, tt)
		}
		need := depthBlocks * max(feeders, 1)
		if err == nil && info.windowBlocks < need {
			setting := "non_replicated_deduplication_window"
			if info.replicated {
				setting = "replicated_deduplication_window"
			}
			err = &TableCheckError{Database: tdb, Table: tt, Engine: info.engine,
				Reason: fmt.Sprintf("%s = %d is below the replay depth: %s.%s deduplicates %d blocks and %d view(s) feed this table, "+
					"so a replayed block could be counted twice here; set it to at least %d", setting, info.windowBlocks, db, table, depthBlocks, feeders, need),
				Err: ErrNoDedupWindow}
		}
		if err == nil && reinsert && !idempotentEngine(info.engine) {
			err = &TableCheckError{Database: tdb, Table: tt, Engine: info.engine,
				Reason: "MismatchReinsert: the view sees re-inserted rows again and would count them twice", Err: ErrNotIdempotent}
		}
		if err == nil {
			if why := repair.TargetRefused(db, table, replicated, depth > 0, distinct, tdb, tt, info.shape()); why != "" {
				err = unproven(tdb, tt, info, why)
			}
		}
		if err != nil {
			var tce *TableCheckError
			if errors.As(err, &tce) {
				tce.Reason = fmt.Sprintf("target of materialized view %s.%s over %s.%s: %s", r[0], r[1], db, table, tce.Reason)
			}
			return 0, err
		}
		below, err := checkViews(ctx, c, tdb, tt, info.replicated, need, depth+1, reinsert, distinct)
		if err != nil {
			return 0, err
		}
		seconds = tighterSeconds(seconds, tighterSeconds(info.windowSeconds, below))
	}
	return seconds, nil
}

// idempotentEngine reports whether engine keeps one row per key however
// often rows are inserted again: ReplacingMergeTree, replicated or shared.
// Not the Aggregating family: a re-inserted sumState or countState adds up,
// and whether a table's functions are idempotent (max, any, argMax) is not
// something New can check; not the Collapsing family: a re-inserted row
// counts in sum(sign) until a merge collapses it.
func idempotentEngine(engine string) bool {
	e := strings.TrimPrefix(strings.TrimPrefix(engine, "Replicated"), "Shared")
	return e == "ReplacingMergeTree"
}

// viewsInto counts the materialized views that write into db.table.
func viewsInto(ctx context.Context, c *ch.Client, db, table string) (int64, error) {
	rows, err := chsql.Strings(ctx, c, fmt.Sprintf(
		"SELECT toString(count()) AS c0 FROM system.tables WHERE engine = 'MaterializedView' AND target_database = %s AND target_table = %s",
		chsql.Quote(db), chsql.Quote(table)), 1)
	if err != nil {
		return 0, fmt.Errorf("chsink: count materialized views into %s.%s: %w", db, table, err)
	}
	if len(rows) == 0 {
		return 0, nil
	}
	n, _ := strconv.ParseInt(rows[0][0], 10, 64)
	return n, nil
}

// settingValue reads a MergeTree setting's value: a number, or true/false.
func settingValue(v string) int64 {
	switch strings.ToLower(v) {
	case "true":
		return 1
	case "false":
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}
