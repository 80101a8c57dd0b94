package chsink

// Repairs of a lost part: the batch's rows put back into the sink's table
// without firing its views, and a view's rows of the batch derived again
// into its target. Each survives a crash at any step: the staging tables
// are named after the batch, and their state says how far a repair got.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/sink"
)

// scratchName names a table of the sink's own for in's batch and what
// else names its use (a target, a view): one per table, token and use, so
// that work a crash interrupted finds its table again.
func (s *Sink[T]) scratchName(prefix string, in sink.Intent, use ...string) string {
	h := fnv.New64a()
	h.Write([]byte(s.table.Name + "\x00" + in.Token))
	for _, u := range use {
		h.Write([]byte("\x00" + u))
	}
	return fmt.Sprintf("%s%016x", prefix, h.Sum64())
}

// dropTable is the statement that drops db.table if it exists.
func dropTable(db, table string) string {
	return "DROP TABLE IF EXISTS " + ident(db) + "." + ident(table) + " SYNC"
}

// putBack writes input into the table without firing its materialized
// views: into a staging table created AS the table (filled under a
// temporary name and renamed when complete, so that its existence proves
// it holds the whole batch), whose partitions then move into the table.
// Moving empties the staging table, which tells a repeated repair that the
// rows are in: moved says whether this call moved any. The empty staging table is dropped once a completed
// checkpoint covers the batch (dropStaging).
func (s *Sink[T]) putBack(ctx context.Context, input proto.Input, in sink.Intent) (moved bool, err error) {
	db, stage := ident(s.opts.Database), s.scratchName("eo_repair_", in)
	exists, err := queryStrings(ctx, s.conn, fmt.Sprintf(
		"SELECT name AS c0 FROM system.tables WHERE database = %s AND name = %s", quote(s.opts.Database), quote(stage)), 1)
	if err != nil {
		return false, err
	}
	if len(exists) == 0 {
		tmp := stage + "_tmp"
		if err := s.stage(ctx, input, tmp, ""); err != nil {
			return false, fmt.Errorf("chsink: repair %s: %w", s.table.Name, err)
		}
		if err := s.repairStep("filled"); err != nil {
			return false, err
		}
		if err := s.conn.Do(ctx, ch.Query{Body: "RENAME TABLE " + db + "." + ident(tmp) + " TO " + db + "." + ident(stage)}); err != nil {
			return false, fmt.Errorf("chsink: repair %s: rename staging table: %w", s.table.Name, err)
		}
		if err := s.repairStep("renamed"); err != nil {
			return false, err
		}
	}
	parts, err := queryStrings(ctx, s.conn, fmt.Sprintf(
		"SELECT DISTINCT partition_id AS c0 FROM system.parts WHERE active AND database = %s AND table = %s",
		quote(s.opts.Database), quote(stage)), 1)
	if err != nil {
		return false, err
	}
	for _, p := range parts {
		q := "ALTER TABLE " + db + "." + ident(stage) + " MOVE PARTITION ID " + quote(p[0]) + " TO TABLE " + db + "." + ident(s.table.Name)
		if err := s.conn.Do(ctx, ch.Query{Body: q}); err != nil {
			return false, fmt.Errorf("chsink: repair %s: %w", s.table.Name, err)
		}
		moved = true
		if err := s.repairStep("moved"); err != nil {
			return false, err
		}
	}
	s.staged.Lock()
	s.staging = append(s.staging, stagedRepair{table: stage, last: in.Last})
	s.staged.Unlock()
	return moved, nil
}

// stagedRepair is an emptied staging table and the last position of its
// batch.
type stagedRepair struct {
	table string
	last  sink.Position
}

// dropStaging drops the staging tables of repaired batches at or before
// through, which the oldest kept checkpoint covers: no replay can repair
// them again. It dials its own connection (the sink's may be in a flight's
// use); a failure leaves an empty table behind, which the next completed
// checkpoint drops.
func (s *Sink[T]) dropStaging(ctx context.Context, through sink.Position) {
	s.staged.Lock()
	var drop, keep []stagedRepair
	for _, r := range s.staging {
		if r.last.Compare(through) <= 0 {
			drop = append(drop, r)
		} else {
			keep = append(keep, r)
		}
	}
	s.staging = keep
	s.staged.Unlock()
	if len(drop) == 0 {
		return
	}
	c, err := s.dial(ctx)
	if err == nil {
		defer c.Close()
	}
	for i, r := range drop {
		if err == nil {
			err = c.Do(ctx, ch.Query{Body: dropTable(s.opts.Database, r.table)})
		}
		if err != nil {
			s.opts.Logger.Warn("chsink: drop an emptied repair table; retried at the next checkpoint", "table", r.table, "err", err)
			s.staged.Lock()
			s.staging = append(s.staging, drop[i:]...)
			s.staged.Unlock()
			return
		}
	}
}

// rederive inserts into db.target what the materialized views that read
// the sink's table and write to target derive from the batch: each view's
// query runs over src, a staging copy of the table that holds the batch
// alone in insert order (see verifier.source), under the token in.Token +
// ":rederive:" + view, which the target's deduplication drops if a crash
// repeats the repair. A query that reads other tables too (a JOIN) reads
// them as they are now.
func (s *Sink[T]) rederive(ctx context.Context, in sink.Intent, db, target, src string) error {
	views, err := s.viewQueries(ctx, db, target, src)
	if err != nil {
		return err
	}
	if len(views) == 0 {
		return fmt.Errorf("no materialized view of %s.%s writes to %s.%s directly (a cascade of views)", s.opts.Database, s.table.Name, db, target)
	}
	for _, v := range views {
		names, err := outputColumns(ctx, s.conn, v.sel)
		if err != nil {
			return fmt.Errorf("view %s: %w", v.name, err)
		}
		body := "INSERT INTO " + ident(db) + "." + ident(target) + " (" + joinIdents(names) + ") SELECT " + joinIdents(names) + " FROM (" + v.sel + ")"
		err = s.conn.Do(ctx, ch.Query{Body: body, Settings: []ch.Setting{
			{Key: "insert_deduplication_token", Value: in.Token + ":rederive:" + v.name, Important: true},
			ch.SettingInt("insert_deduplicate", 1),
			ch.SettingInt("deduplicate_blocks_in_dependent_materialized_views", 1),
			ch.SettingInt("max_threads", 1),
		}})
		if err != nil {
			return fmt.Errorf("view %s: %w", v.name, err)
		}
		if err := s.repairStep("derived"); err != nil {
			return err
		}
	}
	return nil
}

// repairStep runs the test hook that may stop a repair after step, as a
// crash there would.
func (s *Sink[T]) repairStep(step string) error {
	if s.afterRepairStep == nil {
		return nil
	}
	return s.afterRepairStep(step)
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
func (s *Sink[T]) viewQueries(ctx context.Context, db, target, from string) ([]viewQuery, error) {
	rows, err := queryStrings(ctx, s.conn, fmt.Sprintf(
		"SELECT database AS c0, name AS c1, formatQuery(as_select) AS c2 FROM system.tables "+
			"WHERE engine = 'MaterializedView' AND target_database = %s AND target_table = %s AND (database, name) IN "+
			"(SELECT arrayJoin(arrayZip(dependencies_database, dependencies_table)) FROM system.tables WHERE database = %s AND name = %s) ORDER BY database, name",
		quote(db), quote(target), quote(s.opts.Database), quote(s.table.Name)), 3)
	if err != nil {
		return nil, err
	}
	var views []viewQuery
	for _, r := range rows {
		sel, err := readFrom(r[2], s.opts.Database, s.table.Name, s.opts.Database, from)
		if err != nil {
			return nil, fmt.Errorf("view %s.%s: %w", r[0], r[1], err)
		}
		views = append(views, viewQuery{name: r[0] + "." + r[1], sel: sel})
	}
	return views, nil
}

// stage creates the table name AS the sink's table, without its views
// (with engine, if not empty, in place of the table's), and fills it with
// input.
func (s *Sink[T]) stage(ctx context.Context, input proto.Input, name, engine string) error {
	db, t := ident(s.opts.Database), ident(name)
	for _, q := range []string{
		dropTable(s.opts.Database, name),
		"CREATE TABLE " + db + "." + t + " AS " + db + "." + ident(s.table.Name) + engine,
	} {
		if err := s.conn.Do(ctx, ch.Query{Body: q}); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	body := "INSERT INTO " + db + "." + t + " (" + joinIdents(s.columns) + ") VALUES"
	if err := s.conn.Do(ctx, ch.Query{Body: body, Input: input}); err != nil {
		return fmt.Errorf("fill %s: %w", name, err)
	}
	return nil
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
