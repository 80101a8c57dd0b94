package repair

// The lost-part repairer: the one type that checks and repairs what a plain
// MergeTree lost while keeping its tokens (see lostpart.go). A chsink.Sink
// holds one and calls two of its methods: Settle, from an insert whose
// block the server dropped as a duplicate, and DropStaging, when a
// checkpoint completes. Everything it reads of the server's text (its log, a view's
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

// Repairer checks and repairs the parts of one sink's table, and of its
// views' targets, that the server lost while keeping their tokens.
//
// Its checks and repairs run on the connection they are given: the one the
// insert that met the lost part used, which only that insert's goroutine
// uses meanwhile. Only DropStaging dials a connection of its own, because
// it runs in the checkpoint's goroutine while a batch may be in flight. The
// staging list is the one state shared between the two, under mu.
type Repairer struct {
	db, table string                                    // the sink's table: Options.Database, Table.Name
	columns   []string                                  // the columns the sink's insert writes
	distinct  bool                                      // Options.DistinctViewRows
	dial      func(context.Context) (*ch.Client, error) // a connection of DropStaging's own
	logger    *slog.Logger
	// sent are the settings the sink sends with every insert besides its
	// token (chsink's checkServer decides them); every insert of a repair sends
	// them too, so that a user's profile decides no more of a repair than
	// of an insert. insertSettings are the sink's insert's under a token:
	// the token, then sent. selectDedup says the server knows
	// deduplicate_insert_select.
	sent           []ch.Setting
	insertSettings func(token string) []ch.Setting
	selectDedup    bool

	repaired metric.Int64Counter // batches whose lost part was repaired
	attrs    metric.MeasurementOption

	// afterStep is a test hook that runs after each step of a check or
	// repair; an error it returns stops the repair there, as a crash would.
	afterStep func(step string) error

	mu      sync.Mutex
	staging []stagedRepair // emptied repair tables, dropped by DropStaging
}

// Config is what a Repairer is made of: the sink's table, its insert,
// and what New read of the server.
type Config struct {
	Database, Table string   // the sink's table: Options.Database, Table.Name
	Columns         []string // the columns the sink's insert writes
	Distinct        bool     // Options.DistinctViewRows
	// Dial makes a connection of DropStaging's own.
	Dial   func(context.Context) (*ch.Client, error)
	Logger *slog.Logger
	// Sent are the settings the sink's insert sends besides its token;
	// InsertSettings those of its insert under a token (the token, then
	// Sent). SelectDedup says the server knows SelectDedupSetting.
	Sent           []ch.Setting
	InsertSettings func(token string) []ch.Setting
	SelectDedup    bool
	// Repaired counts the batches whose lost part was repaired, under
	// Attrs; nil counts none.
	Repaired metric.Int64Counter
	Attrs    metric.MeasurementOption
}

// New returns the repairer of cfg's table.
func New(cfg Config) *Repairer {
	return &Repairer{
		db: cfg.Database, table: cfg.Table, columns: cfg.Columns, distinct: cfg.Distinct, dial: cfg.Dial, logger: cfg.Logger,
		sent: cfg.Sent, insertSettings: cfg.InsertSettings, selectDedup: cfg.SelectDedup,
		repaired: cfg.Repaired, attrs: cfg.Attrs,
	}
}

// SetAfterStep installs a test hook that runs after each step of a check
// or repair ("staged", "located", "filled", "renamed", "moved",
// "derived"); an error it returns stops the repair there, as a crash
// would. It must not be called while a check or repair runs.
func (r *Repairer) SetAfterStep(f func(step string) error) { r.afterStep = f }

// stagedRepair is an emptied staging table and the last position of its
// batch.
type stagedRepair struct {
	table string
	last  sink.Position
}

// step runs the test hook that may stop a repair after step, as a crash
// there would.
func (r *Repairer) step(step string) error {
	if r.afterStep == nil {
		return nil
	}
	return r.afterStep(step)
}

// count records a repaired batch.
func (r *Repairer) count(ctx context.Context) {
	if r.repaired != nil {
		r.repaired.Add(ctx, 1, r.attrs)
	}
}

// scratchName names a table of the sink's own for in's batch and what
// else names its use (a target, a view): one per table, token and use, so
// that work a crash interrupted finds its table again.
func (r *Repairer) scratchName(prefix string, in sink.Intent, use ...string) string {
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
func (r *Repairer) stage(ctx context.Context, c *ch.Client, input proto.Input, name, engine string) error {
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
// DropStaging.
func (r *Repairer) keepStaging(stage string, in sink.Intent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.staging = append(r.staging, stagedRepair{table: stage, last: in.Last})
}

// DropStaging drops the staging tables of repaired batches at or before
// through, which the oldest kept checkpoint covers: no replay can repair
// them again. It dials its own connection (the sink's may be in a flight's
// use); a failure leaves an empty table behind, which the next completed
// checkpoint drops.
func (r *Repairer) DropStaging(ctx context.Context, through sink.Position) {
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
