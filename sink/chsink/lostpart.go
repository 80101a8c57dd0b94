package chsink

// Lost parts: a plain MergeTree table writes a block's token to its
// deduplication log before it renames the block's part into the table.
// A server killed between the two restarts with the token and without the
// part, and every retry of that block is then dropped as a duplicate of
// rows the table does not hold: silent loss, which no token can prevent.
// internal/testenv's TestDedupLogOutlivesPart reproduces it on ClickHouse
// 26.7 (a few blocks in 200 kills, in the table or in a view's target).
//
// The sink settles it where it can see it: every insert attempt that may
// repeat an earlier one asks for the server's log, which names the part each
// dropped block was a duplicate of; the sink then checks that an active part
// still covers that part's blocks and, if the server restarted since the
// batch was journaled, that those parts hold the batch's keys: the restarted
// server gives the lost part's name to the next insert, whoever's it is.
// If the table itself lost the part, the
// sink puts the batch's rows back without firing the views (whose targets
// got their own rows from this retry, or still hold them): it fills a
// staging table created AS the table, renames it into place (the marker
// that it is complete) and moves its partitions into the table, so a crash
// at any step resumes without a second copy. If a view's target lost its
// part, the rows that view derived from the batch are gone: the sink runs
// the view's query over the batch alone (a staging copy of the table holding
// only the batch) and inserts the result into the target under a token
// derived from the batch's, so that a repeated repair is dropped by the
// target. A target it cannot repair that way stops the sink with a
// *LostPartError.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/sink"
)

// ErrLostPart is wrapped by a *LostPartError.
var ErrLostPart = errors.New("chsink: ClickHouse deduplicated a block against a part it no longer has")

// LostPartError reports a re-inserted batch that ClickHouse dropped as a
// duplicate of a part that is not in the table: the server lost the part
// but kept its token (a plain MergeTree killed between writing its
// deduplication log and renaming the part in; see TestDedupLogOutlivesPart).
// The sink repairs its own table (see putBack) and the target of a view
// that selects from its table (see rederive); this error means a target
// could not be repaired: it is fed through another view (a cascade), or the
// view's query could not be run over the batch alone (Err says why). It is
// permanent: the batch's intent stays in the journal, and the sink fails at
// the same batch until an operator restores that target's rows of the batch
// (Intent.First..Intent.Last of the source).
type LostPartError struct {
	Intent sink.Intent
	Table  string // database.table whose part is gone
	Part   string // the part its deduplication log names
	Err    error  // why the view's rows could not be derived again
}

func (e *LostPartError) Error() string {
	return fmt.Sprintf("chsink: batch %s..%s (token %s): %s deduplicated it against part %s, which it does not hold, and the view's rows of this batch cannot be derived again: %v",
		e.Intent.First, e.Intent.Last, e.Intent.Token, e.Table, e.Part, e.Err)
}

func (e *LostPartError) Unwrap() []error { return []error{ErrLostPart, e.Err} }

// dedupLine is how a plain MergeTree logs a dropped duplicate block.
var dedupLine = regexp.MustCompile(`Block with ID \S+ already exists as part (\S+); ignoring it`)

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

// partBlocks parses a part name, partition_min_max_level[_mutation].
func partBlocks(part string) (partition string, lo, hi int64, ok bool) {
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

// covering lists the active parts of db.table that cover part's blocks:
// the part itself, or what merges or mutations made of it. old says every
// one of them is older than the server's last start. Both clocks have
// seconds (uptime is floored too), so now() - uptime() can be a second
// after the start, and the part another insert wrote under a lost part's
// name in the first second after a restart (other partitions retry at once)
// looked older than the start: a 1 M-event chaos run lost 15 rows of a
// view's target that way. Two seconds of margin make such a part young.
func covering(ctx context.Context, c *ch.Client, db, table, part string) (parts []string, old bool, err error) {
	where := "name = " + quote(part)
	if p, lo, hi, ok := partBlocks(part); ok {
		where = fmt.Sprintf("partition_id = %s AND min_block_number <= %d AND max_block_number >= %d", quote(p), lo, hi)
	}
	rows, err := queryStrings(ctx, c, fmt.Sprintf(
		"SELECT name AS c0, toString(modification_time < now() - uptime() - 2) AS c1 FROM system.parts WHERE active AND database = %s AND table = %s AND %s",
		quote(db), quote(table), where), 2)
	if err != nil {
		return nil, false, err
	}
	old = true
	for _, r := range rows {
		parts = append(parts, r[0])
		old = old && r[1] == "1"
	}
	return parts, old, nil
}

// settleLost checks the parts that the insert of in was deduplicated
// against (hits) and repairs what the tables lost; see the top of this
// file. It returns the parts of the sink's own table that hold the batch.
//
// A part's name is no proof: the server numbers blocks on from its highest
// active part when it starts, so the next insert after the kill (another
// partition's, say) takes the lost part's name, and a merge may span its
// number. When the server restarted since the batch was journaled and the
// covering parts are younger than that start, the sink checks that they
// hold every key of the batch (see lacks). Only input as journaled can be
// checked both ways; a stalled replay's rows are checked to be there, and
// another version's not at all (its keys may differ: the name is all there
// is to go on).
func (s *Sink[T]) settleLost(ctx context.Context, input proto.Input, in sink.Intent, rows content, hits []dedupHit) ([]string, error) {
	type target struct {
		db, table string
		hits      []string // parts the log named
		parts     []string // active parts covering them when looked up
		lost      bool     // a named part is covered by none
		young     bool     // some covering part is younger than the server's start
	}
	var targets []*target
	for _, h := range hits {
		i := slices.IndexFunc(targets, func(t *target) bool { return t.db == h.db && t.table == h.table })
		if i < 0 {
			i = len(targets)
			targets = append(targets, &target{db: h.db, table: h.table})
		}
		t := targets[i]
		parts, old, err := covering(ctx, s.conn, h.db, h.table, h.part)
		if err != nil {
			return nil, fmt.Errorf("chsink: check part %s of %s.%s: %w", h.part, h.db, h.table, err)
		}
		t.hits = append(t.hits, h.part)
		t.parts = append(t.parts, parts...)
		t.lost = t.lost || len(parts) == 0
		t.young = t.young || !old
	}
	restarted, err := s.restartedSince(ctx, in)
	if err != nil {
		return nil, err
	}
	v := &verifier[T]{s: s, input: input, in: in}
	defer v.drop(ctx)
	var held []string
	for _, t := range targets {
		own := t.db == s.opts.Database && t.table == s.table.Name
		if !t.lost && restarted && t.young && rows != differsFrom {
			var err error
			var named []string // unmerged parts the log named, to hold nothing but the batch
			if rows == asJournaled {
				named = slices.DeleteFunc(slices.Clone(t.hits), func(p string) bool { return !slices.Contains(t.parts, p) })
			}
			if t.lost, err = v.lacks(ctx, own, t.db, t.table, t.hits, named); err != nil {
				return nil, fmt.Errorf("chsink: check that %s.%s holds batch %s..%s: %w", t.db, t.table, in.First, in.Last, err)
			}
		}
		switch {
		case !t.lost && own:
			held = append(held, t.hits...)
		case !t.lost:
		case own:
			moved, err := s.putBack(ctx, input, in)
			if err != nil {
				return nil, err
			}
			if moved {
				s.opts.Logger.Warn("chsink: ClickHouse deduplicated a re-inserted batch against a part it lost; wrote the batch's rows into the table again, without its views",
					"table", s.table.Name, "parts", t.hits, "token", in.Token, "first", in.First.String(), "last", in.Last.String())
				s.m.partsRepaired.Add(ctx, 1, s.m.attrs)
			}
		default:
			lost := &LostPartError{Intent: in, Table: t.db + "." + t.table, Part: t.hits[0]}
			s.opts.Logger.Warn("chsink: ClickHouse deduplicated a re-inserted batch against a view target's part it lost; deriving the view's rows of the batch again",
				"table", s.table.Name, "target", lost.Table, "parts", t.hits, "token", in.Token)
			stage, err := v.table(ctx)
			if err == nil {
				err = s.rederive(ctx, in, t.db, t.table, stage)
			}
			if err != nil {
				lost.Err = err
				return nil, lost
			}
			s.m.partsRepaired.Add(ctx, 1, s.m.attrs)
		}
	}
	return held, nil
}

// restartedSince reports whether the server may have restarted since in
// was journaled: a part can be lost only by a kill while the batch was
// being inserted, so a server up since before that holds what its log
// names. It compares durations (the server's uptime, the time since the
// journal entry) so that the two clocks need not agree; the margin covers
// a skewed rate and the entry's own write.
func (s *Sink[T]) restartedSince(ctx context.Context, in sink.Intent) (bool, error) {
	if in.Created.IsZero() {
		return true, nil
	}
	rows, err := queryStrings(ctx, s.conn, "SELECT toString(uptime()) AS c0", 1)
	if err != nil {
		return false, fmt.Errorf("chsink: read server uptime: %w", err)
	}
	if len(rows) != 1 {
		return true, nil
	}
	up, err := strconv.ParseInt(rows[0][0], 10, 64)
	if err != nil {
		return true, nil
	}
	const margin = 10 * time.Second
	return time.Duration(up)*time.Second < s.opts.Now().Sub(in.Created)+margin, nil
}

// verifier checks a batch's rows against the parts that supposedly hold
// them, through a staging copy of the table holding the batch alone (made
// on first use by table, dropped by drop), which rederive reads too.
type verifier[T any] struct {
	s      *Sink[T]
	input  proto.Input
	in     sink.Intent
	staged string
}

// lacks reports whether the parts of db.table that cover the log's hits do
// not hold the batch (own: the sink's table) or what the views writing to
// db.table derive from it. They do not if they miss a row's sorting key (all
// its columns for a table without one), or if a part the log named, still
// unmerged, holds a key the batch has not: one insert makes one part per
// partition, so that part is another insert's under the lost part's name.
// A row's key is enough because a ReplacingMergeTree may have replaced the
// row with a newer version and an aggregating target summed it with others
// of its key; so the check is exact where keys identify rows, and on an
// aggregating target whose parts merged it only sees keys no other batch
// has.
func (v *verifier[T]) lacks(ctx context.Context, own bool, db, table string, hits, named []string) (bool, error) {
	c, sdb := v.s.conn, v.s.opts.Database
	staged, err := v.table(ctx)
	if err != nil {
		return false, err
	}
	rows := []string{"SELECT * FROM " + ident(sdb) + "." + ident(staged)}
	if !own {
		views, err := v.s.viewQueries(ctx, db, table, staged)
		if err != nil {
			return false, err
		}
		rows = rows[:0]
		for _, q := range views {
			rows = append(rows, q.sel)
		}
		if len(rows) == 0 {
			return false, fmt.Errorf("no materialized view of %s.%s writes to %s.%s directly (a cascade of views)", sdb, v.s.table.Name, db, table)
		}
	}
	keys, err := queryStrings(ctx, c, fmt.Sprintf(
		"SELECT sorting_key AS c0 FROM system.tables WHERE database = %s AND name = %s", quote(db), quote(table)), 1)
	if err != nil {
		return false, err
	}
	sortingKey := ""
	if len(keys) == 1 {
		sortingKey = keys[0][0]
	}
	count := func(q string) (bool, error) {
		n, err := queryStrings(ctx, c, q, 1)
		return err == nil && (len(n) != 1 || n[0][0] != "0"), err
	}
	var batchKeys []string
	for _, q := range rows {
		key := sortingKey
		if key == "" {
			names, err := outputColumns(ctx, c, q)
			if err != nil {
				return false, err
			}
			key = joinIdents(names)
		}
		batchKeys = append(batchKeys, "SELECT "+key+" FROM ("+q+")")
		missing, err := count(fmt.Sprintf(
			"SELECT toString(count()) AS c0 FROM (%s) WHERE (%s) NOT IN (SELECT %s FROM %s.%s WHERE %s)",
			q, key, key, ident(db), ident(table), coveringRows(hits)))
		if missing || err != nil {
			return missing, err
		}
	}
	if len(named) == 0 || (sortingKey == "" && len(rows) > 1) {
		return false, nil
	}
	key := sortingKey
	if key == "" {
		names, err := outputColumns(ctx, c, rows[0])
		if err != nil {
			return false, err
		}
		key = joinIdents(names)
	}
	return count(fmt.Sprintf(
		"SELECT toString(count()) AS c0 FROM %s.%s WHERE _part IN (%s) AND (%s) NOT IN (%s)",
		ident(db), ident(table), quoteAll(named), key, strings.Join(batchKeys, " UNION ALL ")))
}

// coveringRows is a condition on a table's rows: they are in a part that
// covers one of the parts named. It reads the range from each row's part
// name rather than naming the parts that cover them now, because a merge
// may replace those before the query runs (and a query reads active parts
// only: it would find none of the batch's rows).
func coveringRows(named []string) string {
	var or []string
	for _, part := range named {
		p, lo, hi, ok := partBlocks(part)
		if !ok {
			or = append(or, "_part = "+quote(part))
			continue
		}
		or = append(or, fmt.Sprintf("(_partition_id = %s AND toInt64(splitByChar('_', _part)[2]) <= %d AND toInt64(splitByChar('_', _part)[3]) >= %d)", quote(p), lo, hi))
	}
	return strings.Join(or, " OR ")
}

// quoteAll quotes each string and joins them with commas.
func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, ", ")
}

// table returns the staging copy of the table that holds the batch alone,
// made on first use.
func (v *verifier[T]) table(ctx context.Context) (string, error) {
	if v.staged == "" {
		name := v.s.scratchName("eo_verify_", v.in)
		if err := v.s.stage(ctx, v.input, name); err != nil {
			return "", err
		}
		v.staged = name
	}
	return v.staged, nil
}

// drop removes the staging table, if one was made.
func (v *verifier[T]) drop(ctx context.Context) {
	if v.staged != "" {
		_ = v.s.conn.Do(context.WithoutCancel(ctx), ch.Query{Body: dropTable(v.s.opts.Database, v.staged)})
	}
}

// scratchName names a table of the sink's own for in's batch: one per table
// and token, so that work a crash interrupted finds its table again.
func (s *Sink[T]) scratchName(prefix string, in sink.Intent) string {
	h := fnv.New64a()
	h.Write([]byte(s.table.Name + "\x00" + in.Token))
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
		if err := s.stage(ctx, input, tmp); err != nil {
			return false, fmt.Errorf("chsink: repair %s: %w", s.table.Name, err)
		}
		if err := s.conn.Do(ctx, ch.Query{Body: "RENAME TABLE " + db + "." + ident(tmp) + " TO " + db + "." + ident(stage)}); err != nil {
			return false, fmt.Errorf("chsink: repair %s: rename staging table: %w", s.table.Name, err)
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
// the sink's table and write to target derive from the batch input: each
// view's query runs over a staging copy of the table that holds the batch
// alone, under the token in.Token + ":rederive:" + view, which the target's
// deduplication drops if a crash repeats the repair. A query that reads
// other tables too (a JOIN) reads them as they are now. stage is the
// staging copy holding the batch (the verifier's).
func (s *Sink[T]) rederive(ctx context.Context, in sink.Intent, db, target, stage string) error {
	views, err := s.viewQueries(ctx, db, target, stage)
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
		}})
		if err != nil {
			return fmt.Errorf("view %s: %w", v.name, err)
		}
	}
	return nil
}

// viewQuery is a materialized view's query, made to read another table.
type viewQuery struct {
	name string // database.view
	sel  string
}

// viewQueries returns the queries of the materialized views that read the
// sink's table and write to db.target directly, each made to read the
// table from instead (a staging copy in the sink's database).
func (s *Sink[T]) viewQueries(ctx context.Context, db, target, from string) ([]viewQuery, error) {
	deps, err := queryStrings(ctx, s.conn, fmt.Sprintf(
		"SELECT d.1 AS c0, d.2 AS c1 FROM system.tables ARRAY JOIN arrayZip(dependencies_database, dependencies_table) AS d WHERE database = %s AND name = %s",
		quote(s.opts.Database), quote(s.table.Name)), 2)
	if err != nil {
		return nil, err
	}
	src := []string{s.opts.Database + "." + s.table.Name, ident(s.opts.Database) + "." + ident(s.table.Name)}
	to := regexp.MustCompile(`\sTO\s+(` + regexp.QuoteMeta(db+"."+target) + `|` + regexp.QuoteMeta(ident(db)+"."+ident(target)) + `)[\s(]`)
	var views []viewQuery
	for _, d := range deps {
		q, err := queryStrings(ctx, s.conn, fmt.Sprintf(
			"SELECT as_select AS c0, create_table_query AS c1 FROM system.tables WHERE database = %s AND name = %s AND engine = 'MaterializedView'",
			quote(d[0]), quote(d[1])), 2)
		if err != nil {
			return nil, err
		}
		if len(q) != 1 || !to.MatchString(q[0][1]) {
			continue
		}
		sel := q[0][0]
		for _, name := range src {
			sel = strings.ReplaceAll(sel, name, ident(s.opts.Database)+"."+ident(from))
		}
		if sel == q[0][0] {
			return nil, fmt.Errorf("view %s.%s: its query does not name %s.%s", d[0], d[1], s.opts.Database, s.table.Name)
		}
		views = append(views, viewQuery{name: d[0] + "." + d[1], sel: sel})
	}
	return views, nil
}

// stage creates the table name AS the sink's table, without its views,
// and fills it with input.
func (s *Sink[T]) stage(ctx context.Context, input proto.Input, name string) error {
	db, t := ident(s.opts.Database), ident(name)
	for _, q := range []string{
		dropTable(s.opts.Database, name),
		"CREATE TABLE " + db + "." + t + " AS " + db + "." + ident(s.table.Name),
	} {
		if err := s.conn.Do(ctx, ch.Query{Body: q}); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	body := strings.Replace(s.body, db+"."+ident(s.table.Name), db+"."+t, 1)
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
