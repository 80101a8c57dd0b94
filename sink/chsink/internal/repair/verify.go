package repair

// The staging tables of a lost-part check, and the check itself: what
// the insert of a batch wrote into a table, written again into staging
// copies, compared with what the table holds (see partcheck.go).

import (
	"context"
	"fmt"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
)

// verifier checks a batch's rows against the parts that supposedly hold
// them. It makes its staging tables on first use and drops them all in
// drop; their names are fixed per batch (see scratchName), so tables a
// crash left behind are replaced by the next check of the same batch.
type verifier struct {
	r     *Repairer
	c     *ch.Client // the connection the check runs on
	input proto.Input
	in    sink.Intent
	asIs  string   // the batch in a copy of the table: its engine folds it as the table did
	src   string   // the batch in insert order, as a materialized view saw it
	made  []string // every staging table made
	views map[string][]staged
}

// lacks reports whether db.table (the sink's own table when own) lacks
// what the insert of the batch wrote there, given the parts the server
// named (hits). whole says the input is the batch as journaled, so the
// parts can be compared with it exactly; else it is a prefix of what the
// server may hold, and only its rows' presence is checked.
func (v *verifier) lacks(ctx context.Context, own bool, db, table string, hits []string, whole bool) (bool, error) {
	f, err := v.facts(ctx, db, table)
	if err != nil {
		return false, err
	}
	if lostPartProof(f.engine) == proofNone {
		return false, nil // the token is committed with the part
	}
	lost, err := v.lacksRows(ctx, own, db, table, hits, whole, f)
	if err != nil || lost || own || lostPartProof(f.engine) != proofRows || v.r.distinct {
		return lost, err
	}
	// A plain MergeTree target holds rows like the batch's where the named
	// part was: perhaps another insert's, which took the lost part's name
	// with the same rows. New refuses such a target (reproducible); one met
	// here was added since. Stop rather than guess.
	return false, fmt.Errorf("%w: %s.%s (%s) holds the rows the batch's insert wrote there where the server named part %s, "+
		"but another insert's same rows would look the same (Options.DistinctViewRows)", ErrUnproven, db, table, f.engine, hits[0])
}

// lacksRows is lacks for a table whose engine needs a check (f).
func (v *verifier) lacksRows(ctx context.Context, own bool, db, table string, hits []string, whole bool, f tableFacts) (bool, error) {
	var err error
	var want []staged
	if own {
		t, err := v.table(ctx)
		if err != nil {
			return false, err
		}
		want = []staged{{table: t, cols: v.r.columns}}
	} else if want, err = v.derived(ctx, db, table); err != nil {
		return false, err
	}
	var keyed []string // parts the Replacing family's promise settles
	for _, part := range hits {
		if whole {
			held, decided, err := v.exact(ctx, db, table, part, f, want)
			if err != nil {
				return false, err
			}
			if decided && !held {
				return true, nil
			}
			if decided {
				continue
			}
		}
		// The part is merged away, or the input is a prefix of what the
		// insert wrote there.
		switch lostPartProof(f.engine) {
		case proofKeys:
			keyed = append(keyed, part)
			continue
		case proofRows:
			var missing bool
			ok, err := v.readBlock(ctx, db, table, part, f, func(where string) (err error) {
				missing, err = v.missing(ctx, db, table, where, tableFacts{}, want)
				return err
			})
			if err != nil {
				return false, err
			}
			if ok && missing {
				return true, nil
			}
			if ok {
				continue
			}
		}
		// New refuses these shapes (provable); one met here was changed
		// since. Stop rather than guess.
		return false, fmt.Errorf("%w: part %s of %s.%s (%s) is merged and its rows cannot be told from other inserts'",
			ErrUnproven, part, db, table, f.engine)
	}
	if len(keyed) == 0 {
		return false, nil
	}
	return v.missing(ctx, db, table, coveringRows(keyed), f, want)
}

// missing reports whether a row of a staging table in want is not held by
// the rows of db.table matching where. With no sorting key in f, a row is
// held by an equal row. With one (the Replacing family), by a row of the
// same sorting key and, with a version column, a version at least the
// row's: the engine's own promise, under which that row replaces the
// batch's in FINAL (without a version, any row of the key replaces it).
func (v *verifier) missing(ctx context.Context, db, table, where string, f tableFacts, want []staged) (bool, error) {
	for _, w := range want {
		key := f.sortingKey
		if key == "" || lostPartProof(f.engine) != proofKeys {
			key = chsql.JoinIdents(w.cols)
		}
		// A row of NULLs matches itself under transform_null_in.
		q := fmt.Sprintf("SELECT toString(count()) AS c0 FROM %s.%s WHERE (%s) NOT IN (SELECT %s FROM %s.%s WHERE %s) SETTINGS transform_null_in = 1",
			chsql.Ident(v.r.db), chsql.Ident(w.table), key, key, chsql.Ident(db), chsql.Ident(table), where)
		if f.version != "" {
			q = fmt.Sprintf("SELECT toString(count()) AS c0 FROM (SELECT tuple(%[1]s) AS k, %[2]s AS v FROM %[3]s.%[4]s) AS w "+
				"LEFT ANY JOIN (SELECT tuple(%[1]s) AS k, max(%[2]s) AS v, 1 AS found FROM %[5]s.%[6]s WHERE %[7]s GROUP BY k) AS h ON w.k = h.k "+
				"WHERE h.found = 0 OR h.v < w.v SETTINGS join_use_nulls = 0",
				key, chsql.Ident(f.version), chsql.Ident(v.r.db), chsql.Ident(w.table), chsql.Ident(db), chsql.Ident(table), where)
		}
		n, err := chsql.Strings(ctx, v.c, q, 1)
		if err != nil {
			return false, err
		}
		if len(n) == 1 && n[0][0] != "0" {
			return true, nil
		}
	}
	return false, nil
}

// table returns the staging copy of the sink's table (its engine and
// settings) that holds the batch alone, made on first use.
func (v *verifier) table(ctx context.Context) (string, error) {
	if v.asIs == "" {
		name := v.r.scratchName("eo_verify_", v.in)
		v.made = append(v.made, name)
		if err := v.r.stage(ctx, v.c, v.input, name, ""); err != nil {
			return "", err
		}
		v.asIs = name
	}
	return v.asIs, nil
}

// source returns a staging copy of the sink's table that holds the batch
// in the order it was inserted (one part, no sorting key): a view's query
// over it sees the rows as the view saw the insert's block.
func (v *verifier) source(ctx context.Context) (string, error) {
	if v.src == "" {
		name := v.r.scratchName("eo_source_", v.in)
		v.made = append(v.made, name)
		if err := v.r.stage(ctx, v.c, v.input, name, " ENGINE = MergeTree ORDER BY tuple()"); err != nil {
			return "", err
		}
		if err := v.r.step("staged"); err != nil {
			return "", err
		}
		v.src = name
	}
	return v.src, nil
}

// derived returns staging copies of db.target (its engine and settings),
// one per materialized view that reads the sink's table and writes to
// target, each holding what that view derives from the batch.
func (v *verifier) derived(ctx context.Context, db, target string) ([]staged, error) {
	key := db + "." + target
	if got, ok := v.views[key]; ok {
		return got, nil
	}
	src, err := v.source(ctx)
	if err != nil {
		return nil, err
	}
	views, err := v.r.viewQueries(ctx, v.c, db, target, src)
	if err != nil {
		return nil, err
	}
	if len(views) == 0 {
		return nil, fmt.Errorf("no materialized view of %s.%s writes to %s.%s directly (a cascade of views)", v.r.db, v.r.table, db, target)
	}
	var out []staged
	sdb := chsql.Ident(v.r.db)
	for _, q := range views {
		name := v.r.scratchName("eo_derive_", v.in, key, q.name)
		v.made = append(v.made, name)
		names, err := outputColumns(ctx, v.c, q.sel)
		if err != nil {
			return nil, fmt.Errorf("view %s: %w", q.name, err)
		}
		for _, stmt := range []string{
			chsql.DropTable(v.r.db, name),
			"CREATE TABLE " + sdb + "." + chsql.Ident(name) + " AS " + chsql.Ident(db) + "." + chsql.Ident(target),
			"INSERT INTO " + sdb + "." + chsql.Ident(name) + " (" + chsql.JoinIdents(names) + ") SELECT " + chsql.JoinIdents(names) + " FROM (" + q.sel + ") SETTINGS max_threads = 1",
		} {
			if err := v.c.Do(ctx, ch.Query{Body: stmt}); err != nil {
				return nil, fmt.Errorf("view %s: %s: %w", q.name, stmt, err)
			}
		}
		out = append(out, staged{table: name, cols: names})
	}
	if v.views == nil {
		v.views = map[string][]staged{}
	}
	v.views[key] = out
	return out, nil
}

// drop removes the staging tables made.
func (v *verifier) drop(ctx context.Context) {
	for _, name := range v.made {
		_ = v.c.Do(context.WithoutCancel(ctx), ch.Query{Body: chsql.DropTable(v.r.db, name)})
	}
	v.made = nil
}
