package repair

// Repairs of a lost part: the batch's rows put back into the sink's table
// without firing its views, and a view's rows of the batch derived again
// into its target. Each survives a crash at any step: the staging tables
// are named after the batch, and their state says how far a repair got.

import (
	"context"
	"errors"
	"fmt"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
)

// putBack writes input into the table without firing its materialized
// views: into a staging table created AS the table (filled under a
// temporary name and renamed when complete, so that its existence proves
// it holds the whole batch), whose partitions then move into the table.
// Moving empties the staging table, which tells a repeated repair that the
// rows are in: moved says whether this call moved any. The empty staging
// table is dropped once a completed checkpoint covers the batch
// (DropStaging).
func (r *Repairer) putBack(ctx context.Context, c *ch.Client, input proto.Input, in sink.Intent) (moved bool, err error) {
	db, stage := chsql.Ident(r.db), r.scratchName("eo_repair_", in)
	exists, err := chsql.Strings(ctx, c, fmt.Sprintf(
		"SELECT name AS c0 FROM system.tables WHERE database = %s AND name = %s", chsql.Quote(r.db), chsql.Quote(stage)), 1)
	if err != nil {
		return false, err
	}
	if len(exists) == 0 {
		tmp := stage + "_tmp"
		if err := r.stage(ctx, c, input, tmp, ""); err != nil {
			return false, fmt.Errorf("chsink: repair %s: %w", r.table, err)
		}
		if err := r.step("filled"); err != nil {
			return false, err
		}
		if err := c.Do(ctx, ch.Query{Body: "RENAME TABLE " + db + "." + chsql.Ident(tmp) + " TO " + db + "." + chsql.Ident(stage)}); err != nil {
			return false, fmt.Errorf("chsink: repair %s: rename staging table: %w", r.table, err)
		}
		if err := r.step("renamed"); err != nil {
			return false, err
		}
	}
	// A moved partition may leave an empty active part behind (the server
	// covers what it moved away): only parts with rows are still to move.
	parts, err := chsql.Strings(ctx, c, fmt.Sprintf(
		"SELECT DISTINCT partition_id AS c0 FROM system.parts WHERE active AND rows > 0 AND database = %s AND table = %s",
		chsql.Quote(r.db), chsql.Quote(stage)), 1)
	if err != nil {
		return false, err
	}
	for _, p := range parts {
		q := "ALTER TABLE " + db + "." + chsql.Ident(stage) + " MOVE PARTITION ID " + chsql.Quote(p[0]) + " TO TABLE " + db + "." + chsql.Ident(r.table)
		if err := c.Do(ctx, ch.Query{Body: q}); err != nil {
			return false, fmt.Errorf("chsink: repair %s: %w", r.table, err)
		}
		moved = true
		if err := r.step("moved"); err != nil {
			return false, err
		}
	}
	r.keepStaging(stage, in)
	return moved, nil
}

// rederive inserts into db.target what the materialized views that read
// the sink's table and write to target derive from the batch: each view's
// query runs over src, a staging copy of the table that holds the batch
// alone in insert order (see verifier.source), under the token in.Token +
// ":rederive:" + view, which the target's deduplication drops if a crash
// repeats the repair (see selectSettings). A query that reads other tables
// too (a JOIN) reads them as they are now.
func (r *Repairer) rederive(ctx context.Context, c *ch.Client, in sink.Intent, db, target, src string) error {
	views, err := r.viewQueries(ctx, c, db, target, src)
	if err != nil {
		return err
	}
	if len(views) == 0 {
		return fmt.Errorf("no materialized view of %s.%s writes to %s.%s directly (a cascade of views)", r.db, r.table, db, target)
	}
	for _, v := range views {
		names, err := outputColumns(ctx, c, v.sel)
		if err != nil {
			return fmt.Errorf("view %s: %w", v.name, err)
		}
		sel := "SELECT " + chsql.JoinIdents(names) + " FROM (" + v.sel + ")"
		// ORDER BY ALL on the outer SELECT is what the server takes for a
		// stable SELECT, whose INSERT it deduplicates on every release
		// (from PR 91830 to PR 99206 a token alone was not enough). A
		// column the server cannot compare (an aggregate function's state)
		// cannot be sorted: the server refuses the ordered query when it
		// describes it, and the repair goes without, kept by the token
		// where that counts and refused by force_enable where it does not.
		if _, err := outputColumns(ctx, c, sel+" ORDER BY ALL"); err == nil {
			sel += " ORDER BY ALL"
		} else if !ch.IsException(err) {
			return fmt.Errorf("view %s: %w", v.name, err)
		}
		body := "INSERT INTO " + chsql.Ident(db) + "." + chsql.Ident(target) + " (" + chsql.JoinIdents(names) + ") " + sel
		err = c.Do(ctx, ch.Query{Body: body, Settings: r.selectSettings(in.Token + ":rederive:" + v.name)})
		if err != nil {
			return fmt.Errorf("view %s: %w", v.name, err)
		}
		if err := r.step("derived"); err != nil {
			return err
		}
	}
	return nil
}

// SelectDedupSetting (from 25.12, ClickHouse PR 91830) decides whether an
// INSERT ... SELECT is deduplicated, over insert_deduplicate and
// deduplicate_insert: the sink's inserts send none, a repair's send it
// (see selectSettings).
const SelectDedupSetting = "deduplicate_insert_select"

// selectSettings are the settings of a repair's INSERT ... SELECT under
// token: the sink's insert settings (so a profile that turns deduplication
// off, or makes inserts asynchronous, changes nothing), and
// deduplicate_insert_select = 'force_enable' where the server knows it,
// which overrides insert_deduplicate and deduplicate_insert for an INSERT
// ... SELECT: with 'disable' in a profile a repeated repair would insert
// its rows again, and with the default 'enable_when_possible' some
// releases skip deduplication of a SELECT they do not take for stable;
// 'force_enable' deduplicates or fails the insert. max_threads = 1 reads
// the staging table in one stream: one order, one block.
func (r *Repairer) selectSettings(token string) []ch.Setting {
	out := r.insertSettings(token)
	if r.selectDedup {
		out = append(out, ch.Setting{Key: SelectDedupSetting, Value: "force_enable", Important: true})
	}
	return append(out, ch.SettingInt("max_threads", 1))
}

// viewQuery is a materialized view's query, made to read another table.
type viewQuery struct {
	name string // database.view
	sel  string
}

// viewQueries returns the queries of the materialized views that read the
// sink's table and write to db.target directly (system.tables names each
// view's target), each made to read the table from instead, a staging copy
// in the sink's database (see readFrom). The server formats each query
// first, so that the name is replaced in its own canonical text.
func (r *Repairer) viewQueries(ctx context.Context, c *ch.Client, db, target, from string) ([]viewQuery, error) {
	rows, err := chsql.Strings(ctx, c, fmt.Sprintf(
		"SELECT database AS c0, name AS c1, formatQuery(as_select) AS c2 FROM system.tables "+
			"WHERE engine = 'MaterializedView' AND target_database = %s AND target_table = %s AND (database, name) IN "+
			"(SELECT arrayJoin(arrayZip(dependencies_database, dependencies_table)) FROM system.tables WHERE database = %s AND name = %s) ORDER BY database, name",
		chsql.Quote(db), chsql.Quote(target), chsql.Quote(r.db), chsql.Quote(r.table)), 3)
	if err != nil {
		return nil, err
	}
	var views []viewQuery
	for _, row := range rows {
		sel, err := readFrom(row[2], r.db, r.table, r.db, from)
		if err != nil {
			return nil, fmt.Errorf("view %s.%s: %w", row[0], row[1], err)
		}
		views = append(views, viewQuery{name: row[0] + "." + row[1], sel: sel})
	}
	return views, nil
}

// outputColumns returns the names of the columns query returns: a view
// writes its query's columns into its target by name.
func outputColumns(ctx context.Context, c *ch.Client, query string) ([]string, error) {
	var res proto.Results
	var names []string
	err := c.Do(ctx, ch.Query{Body: "DESCRIBE (" + query + ")", Result: res.Auto(),
		OnResult: func(context.Context, proto.Block) error {
			for _, col := range res {
				if col.Name != "name" {
					continue
				}
				data := col.Data
				if auto, ok := data.(*proto.ColAuto); ok {
					data = auto.Data
				}
				str, ok := data.(*proto.ColStr)
				if !ok {
					return errors.New("DESCRIBE: name is not a String")
				}
				for i := range str.Rows() {
					names = append(names, str.Row(i))
				}
			}
			return nil
		}})
	if err == nil && len(names) == 0 {
		err = errors.New("DESCRIBE: no columns")
	}
	return names, err
}
