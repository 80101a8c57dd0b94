package chsink

// The lost-part repairer: the one type that checks and repairs what a plain
// MergeTree lost while keeping its tokens (see lostpart.go). A Sink holds
// one and calls two of its methods: settle, from an insert whose block the
// server dropped as a duplicate, and dropStaging, when a checkpoint
// completes. Everything it reads of the server's text (its log, a view's
// query) goes through pure parsers pinned by fixtures under testdata
// (serverlog.go, viewsql.go).

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
)

// repairer checks and repairs the parts of one sink's table, and of its
// views' targets, that the server lost while keeping their tokens.
//
// Its checks and repairs run on the connection they are given: the one the
// insert that met the lost part used, which only that insert's goroutine
// uses meanwhile. Only dropStaging dials a connection of its own, because
// it runs in the checkpoint's goroutine while a batch may be in flight. The
// staging list is the one state shared between the two, under mu.
type repairer struct {
	db, table string                                    // the sink's table: Options.Database, Table.Name
	columns   []string                                  // the columns the sink's insert writes
	distinct  bool                                      // Options.DistinctViewRows
	dial      func(context.Context) (*ch.Client, error) // a connection of dropStaging's own
	logger    *slog.Logger
	// sent are the settings the sink sends with every insert besides its
	// token (see checkServer), set once New has read them; every insert
	// of a repair sends them too, so that a user's profile decides no
	// more of a repair than of an insert. selectDedup says the server
	// knows deduplicate_insert_select.
	sent        []ch.Setting
	selectDedup bool

	repaired metric.Int64Counter // batches whose lost part was repaired
	attrs    metric.MeasurementOption

	// afterStep is a test hook that runs after each step of a check or
	// repair; an error it returns stops the repair there, as a crash would.
	afterStep func(step string) error

	mu      sync.Mutex
	staging []stagedRepair // emptied repair tables, dropped by dropStaging
}

// stagedRepair is an emptied staging table and the last position of its
// batch.
type stagedRepair struct {
	table string
	last  sink.Position
}

// step runs the test hook that may stop a repair after step, as a crash
// there would.
func (r *repairer) step(step string) error {
	if r.afterStep == nil {
		return nil
	}
	return r.afterStep(step)
}

// count records a repaired batch.
func (r *repairer) count(ctx context.Context) {
	if r.repaired != nil {
		r.repaired.Add(ctx, 1, r.attrs)
	}
}

// scratchName names a table of the sink's own for in's batch and what
// else names its use (a target, a view): one per table, token and use, so
// that work a crash interrupted finds its table again.
func (r *repairer) scratchName(prefix string, in sink.Intent, use ...string) string {
	h := fnv.New64a()
	h.Write([]byte(r.table + "\x00" + in.Token))
	for _, u := range use {
		h.Write([]byte("\x00" + u))
	}
	return fmt.Sprintf("%s%016x", prefix, h.Sum64())
}

// stage creates the table name AS the sink's table, without its views
// (with engine, if not empty, in place of the table's), and fills it with
// input.
func (r *repairer) stage(ctx context.Context, c *ch.Client, input proto.Input, name, engine string) error {
	db, t := chsql.Ident(r.db), chsql.Ident(name)
	for _, q := range []string{
		chsql.DropTable(r.db, name),
		"CREATE TABLE " + db + "." + t + " AS " + db + "." + chsql.Ident(r.table) + engine,
	} {
		if err := c.Do(ctx, ch.Query{Body: q}); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	// The sink's settings, without a token (the table is new, so there is
	// nothing to deduplicate against): async_insert = 0 above all, since an
	// asynchronous insert may return before its rows are written, and the
	// repair reads them next.
	body := "INSERT INTO " + db + "." + t + " (" + chsql.JoinIdents(r.columns) + ") VALUES"
	if err := c.Do(ctx, ch.Query{Body: body, Input: input, Settings: r.sent}); err != nil {
		return fmt.Errorf("fill %s: %w", name, err)
	}
	return nil
}

// keepStaging records stage, the emptied staging table of in's repair, for
// dropStaging.
func (r *repairer) keepStaging(stage string, in sink.Intent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.staging = append(r.staging, stagedRepair{table: stage, last: in.Last})
}

// dropStaging drops the staging tables of repaired batches at or before
// through, which the oldest kept checkpoint covers: no replay can repair
// them again. It dials its own connection (the sink's may be in a flight's
// use); a failure leaves an empty table behind, which the next completed
// checkpoint drops.
func (r *repairer) dropStaging(ctx context.Context, through sink.Position) {
	r.mu.Lock()
	var drop, keep []stagedRepair
	for _, s := range r.staging {
		if s.last.Compare(through) <= 0 {
			drop = append(drop, s)
		} else {
			keep = append(keep, s)
		}
	}
	r.staging = keep
	r.mu.Unlock()
	if len(drop) == 0 {
		return
	}
	c, err := r.dial(ctx)
	if err == nil {
		defer c.Close()
	}
	for i, s := range drop {
		if err == nil {
			err = c.Do(ctx, ch.Query{Body: chsql.DropTable(r.db, s.table)})
		}
		if err != nil {
			r.logger.Warn("chsink: drop an emptied repair table; retried at the next checkpoint", "table", s.table, "err", err)
			r.mu.Lock()
			r.staging = append(r.staging, drop[i:]...)
			r.mu.Unlock()
			return
		}
	}
}
