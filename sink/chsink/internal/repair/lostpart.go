package repair

// Lost parts: a plain MergeTree table writes a block's token to its
// deduplication log before it renames the block's part into the table.
// A server killed between the two restarts with the token and without the
// part, and every retry of that block is then dropped as a duplicate of
// rows the table does not hold: silent loss, which no token can prevent.
// testkit's TestDedupLogOutlivesPart reproduces it on ClickHouse
// 26.7 (a few blocks in 200 kills, in the table or in a view's target).
//
// The sink settles it where it can see it: every insert attempt that may
// repeat an earlier one asks for the server's log, which names the part each
// dropped block was a duplicate of (serverlog.go). If no active part covers
// that part's blocks, it is lost. If the server has not restarted since the
// batch was journaled (boot.go), the part is the batch's own. Otherwise the
// name proves nothing (the restarted server gives it to the next insert,
// whoever's), and the sink compares content (partcheck.go, verify.go),
// which another insert of the same rows would pass: chsink's New refuses a
// plain MergeTree view target unless Options.DistinctViewRows
// (proofcheck.go).
//
// If the table itself lost the part, the sink puts the batch's rows back
// without firing the views (repair.go). If a view's target lost its part,
// the sink runs the view's query over the batch alone and inserts the result
// into the target under a token derived from the batch's. A target it
// cannot repair that way stops the sink with a *Lost (chsink's
// *LostPartError).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
)

// Lost reports a table Settle could not repair, or could not check: it
// has the fields of chsink.LostPartError, field for field, and chsink
// converts it into that public error (see there for what each field
// means). ErrUnproven in Err says a part's loss could not be proven or
// ruled out.
type Lost struct {
	Intent sink.Intent
	Table  string // database.table whose part is gone
	// ViewTarget says Table is the target of a materialized view over the
	// sink's table; false, Table is the sink's table itself.
	ViewTarget bool
	Part       string // the part its deduplication log names
	Err        error  // why the rows could not be checked or derived again
}

func (e *Lost) Error() string {
	return fmt.Sprintf("chsink: batch %s..%s (token %s): part %s of %s is lost: %v", e.Intent.First, e.Intent.Last, e.Intent.Token, e.Part, e.Table, e.Err)
}

func (e *Lost) Unwrap() error { return e.Err }

// covering lists the active parts of db.table that cover part's blocks:
// the part itself, or what merges or mutations made of it.
func covering(ctx context.Context, c *ch.Client, db, table, part string) ([]string, error) {
	where := "name = " + chsql.Quote(part)
	if p, lo, hi, ok := PartBlocks(part); ok {
		where = fmt.Sprintf("partition_id = %s AND min_block_number <= %d AND max_block_number >= %d", chsql.Quote(p), lo, hi)
	}
	rows, err := chsql.Strings(ctx, c, fmt.Sprintf(
		"SELECT name AS c0 FROM system.parts WHERE active AND database = %s AND table = %s AND %s",
		chsql.Quote(db), chsql.Quote(table), where), 1)
	if err != nil {
		return nil, err
	}
	var parts []string
	for _, r := range rows {
		parts = append(parts, r[0])
	}
	return parts, nil
}

// Content says how an insert's rows relate to the batch journaled under
// its token: what a check of the parts that hold the batch can expect to
// find there (see Settle).
type Content uint8

const (
	AsJournaled Content = iota // the batch itself
	PrefixOf                   // its first rows: a replay that stalled
	DiffersFrom                // another version: processing is not deterministic
)

// Settle checks the parts that the insert of in was deduplicated against,
// as log collected them from the insert's server log, and repairs what the
// tables lost (see settle); with none, it does nothing.
func (r *Repairer) Settle(ctx context.Context, c *ch.Client, input proto.Input, in sink.Intent, rows Content, log *Log) ([]string, error) {
	if log == nil || len(log.hits) == 0 {
		return nil, nil
	}
	return r.settle(ctx, c, input, in, rows, log.hits)
}

// settle checks the parts that the insert of in was deduplicated
// against (hits) and repairs what the tables lost; see the top of this
// file. It returns the parts of the sink's own table that hold the batch.
// Only input as journaled can be compared whole; a stalled replay's rows
// (a prefix of the version the server may hold) are checked to be there,
// and another version's not at all (the name is all there is to go on).
func (r *Repairer) settle(ctx context.Context, c *ch.Client, input proto.Input, in sink.Intent, rows Content, hits []dedupHit) ([]string, error) {
	type target struct {
		db, table string
		hits      []string // parts the log named
		lost      bool     // a named part is covered by none, or holds other rows
	}
	var targets []*target
	for _, h := range hits {
		i := slices.IndexFunc(targets, func(t *target) bool { return t.db == h.db && t.table == h.table })
		if i < 0 {
			i = len(targets)
			targets = append(targets, &target{db: h.db, table: h.table})
		}
		t := targets[i]
		parts, err := covering(ctx, c, h.db, h.table, h.part)
		if err != nil {
			return nil, fmt.Errorf("chsink: check part %s of %s.%s: %w", h.part, h.db, h.table, err)
		}
		t.hits = append(t.hits, h.part)
		t.lost = t.lost || len(parts) == 0
	}
	same, err := sameRun(ctx, c, r.db, in)
	if err != nil {
		return nil, err
	}
	v := &verifier{r: r, c: c, input: input, in: in}
	defer v.drop(ctx)
	var held []string
	for _, t := range targets {
		own := t.db == r.db && t.table == r.table
		if !t.lost && !same && rows != DiffersFrom {
			var err error
			if t.lost, err = v.lacks(ctx, own, t.db, t.table, t.hits, rows == AsJournaled); errors.Is(err, ErrUnproven) {
				return nil, &Lost{Intent: in, Table: t.db + "." + t.table, ViewTarget: !own, Part: t.hits[0], Err: err}
			} else if err != nil {
				return nil, fmt.Errorf("chsink: check that %s.%s holds batch %s..%s: %w", t.db, t.table, in.First, in.Last, err)
			}
		}
		switch {
		case !t.lost && own:
			held = append(held, t.hits...)
		case !t.lost:
		case own:
			moved, err := r.putBack(ctx, c, input, in)
			if err != nil {
				return nil, err
			}
			if moved {
				r.logger.Warn("chsink: ClickHouse deduplicated a re-inserted batch against a part it lost; wrote the batch's rows into the table again, without its views",
					"table", r.table, "parts", t.hits, "token", in.Token, "first", in.First.String(), "last", in.Last.String())
				r.count(ctx)
			}
		default:
			lost := &Lost{Intent: in, Table: t.db + "." + t.table, ViewTarget: true, Part: t.hits[0]}
			r.logger.Warn("chsink: ClickHouse deduplicated a re-inserted batch against a view target's part it lost; deriving the view's rows of the batch again",
				"table", r.table, "target", lost.Table, "parts", t.hits, "token", in.Token)
			src, err := v.source(ctx)
			if err == nil {
				err = r.rederive(ctx, c, in, t.db, t.table, src)
			}
			if err != nil {
				lost.Err = err
				return nil, lost
			}
			r.count(ctx)
		}
	}
	return held, nil
}

// coveringRows is a condition on a table's rows: they are in a part that
// covers one of the parts named. It reads the range from each row's part
// name rather than naming the parts that cover them now, because a merge
// may replace those before the query runs (and a query reads active parts
// only: it would find none of the batch's rows).
func coveringRows(named []string) string {
	var or []string
	for _, part := range named {
		p, lo, hi, ok := PartBlocks(part)
		if !ok {
			or = append(or, "_part = "+chsql.Quote(part))
			continue
		}
		or = append(or, fmt.Sprintf("(_partition_id = %s AND toInt64(splitByChar('_', _part)[2]) <= %d AND toInt64(splitByChar('_', _part)[3]) >= %d)", chsql.Quote(p), lo, hi))
	}
	return strings.Join(or, " OR ")
}
