package windowsink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chainopt"
	"github.com/exactlyonce/exactlyonce/window"
)

// Default column names.
const (
	DefaultVersionColumn = "version"
	DefaultDeletedColumn = "deleted"
)

// ErrNotReplacing is matched by the *chsink.TableCheckError New returns for
// a table that cannot hold window rows: not a ReplacingMergeTree, one
// without the version column (or, for sessions, the deleted column), or
// one whose version or deleted column is another than Options names or of
// another type than UInt64 and UInt8.
var ErrNotReplacing = errors.New("windowsink: table does not replace window rows by version")

// ErrInvalidOptions is wrapped by the error New returns for unusable
// arguments; the message names the field and what it accepts.
var ErrInvalidOptions = errors.New("windowsink: invalid options")

// Options configures a Sink. The zero value is valid.
type Options struct {
	// Sink configures the ClickHouse sink underneath (database, batching,
	// retries, TLS, logger). Leave its OnMismatch unset: a window's rows
	// depend on the clock (Tick, Early.Interval, idleness), so a replay may
	// emit other rows at a batch's positions, and the Sink always uses
	// chsink.MismatchReinsert, which inserts them under a fresh token (the
	// table's versions keep the right one).
	Sink chsink.Options
	// VersionColumn is the table's version column, which gets Row.Version
	// (UInt64); default DefaultVersionColumn. It must be the
	// ReplacingMergeTree's version argument.
	VersionColumn string
	// DeletedColumn is the table's is_deleted column, which gets
	// Row.Deleted (UInt8); default DefaultDeletedColumn. Session windows
	// need it (a merge retracts a session's row); for other windows it is
	// written when the table's engine has one.
	DeletedColumn string
}

// Sink writes the rows of one window.Operator into a ReplacingMergeTree
// table through a chsink.Sink, for one source partition's chain. It owns
// the operator's output, the positions of its rows (a sink.Cursor) and the
// sink: feed events with Add, call Tick when the chain ticks, and register
// the Sink as the chain's one participant for both (it is a
// checkpoint.Participant whose state holds the operator's, the cursor's
// and the sink's). It has Run and Close like a chsink.Sink: a kafkasource
// chain runs and closes it.
//
// Like the operator, it is used from the chain goroutine only, except Run
// and Close.
type Sink[In, Acc, Out any] struct {
	op     *window.Operator[In, Acc, Out]
	rows   *chsink.Sink[window.Row[Out]]
	cursor sink.Cursor
	out    window.Output[In, Out]
	late   lateLog[In]

	// What the table may hold beyond what the operator emitted (see
	// track): known says the journal's reach was read, since the last
	// Restore or on a fresh start; while assuming, the operator counts
	// every session it holds as written (window.Operator.AssumeWritten),
	// until the input passes offset reach.
	known, assuming bool
	reach           int64
}

var _ checkpoint.Participant = (*Sink[float64, window.StatsAcc, window.Summary])(nil)

// New checks the table, builds the chsink.Sink for it and returns a Sink
// feeding it from op. columns maps a row to the table's columns other than
// the version and deleted ones, which the Sink adds: the key, the start
// (and for sessions, the end) and the results.
//
// The table must be a ReplacingMergeTree(version) or, for session windows,
// a ReplacingMergeTree(version, deleted) with those columns of types
// UInt64 and UInt8; any other is refused with a *chsink.TableCheckError
// matching ErrNotReplacing that says why. The table's other requirements
// are chsink.New's (a deduplication window).
func New[In, Acc, Out any](ctx context.Context, table chsink.Table, src checkpoint.TopicPartition, store checkpoint.Storage,
	op *window.Operator[In, Acc, Out], columns chsink.Schema[window.Row[Out]], opts Options) (*Sink[In, Acc, Out], error) {
	if op == nil {
		return nil, fmt.Errorf("%w: op is nil: pass the window.Operator whose rows the sink writes", ErrInvalidOptions)
	}
	if columns == nil {
		return nil, fmt.Errorf("%w: columns is nil: pass the table's columns for the key, start and results", ErrInvalidOptions)
	}
	switch opts.Sink.OnMismatch {
	case chsink.MismatchFail, chsink.MismatchReinsert: // unset, or what the sink sets anyway
	default:
		return nil, fmt.Errorf("%w: Sink.OnMismatch is %d; leave it unset (the window sink always uses MismatchReinsert)", ErrInvalidOptions, opts.Sink.OnMismatch)
	}
	opts.Sink.OnMismatch = chsink.MismatchReinsert
	if opts.VersionColumn == "" {
		opts.VersionColumn = DefaultVersionColumn
	}
	if opts.DeletedColumn == "" {
		opts.DeletedColumn = DefaultDeletedColumn
	}
	if opts.VersionColumn == opts.DeletedColumn {
		return nil, fmt.Errorf("%w: VersionColumn and DeletedColumn are both %q; they must differ", ErrInvalidOptions, opts.VersionColumn)
	}
	for _, c := range columns() {
		if c.Name() == opts.VersionColumn || c.Name() == opts.DeletedColumn {
			return nil, fmt.Errorf("%w: columns has %q; leave the version and deleted columns out, the sink writes them", ErrInvalidOptions, c.Name())
		}
	}
	withDeleted, err := checkReplacing(ctx, table, opts, op.Spec().Gap > 0)
	if err != nil {
		return nil, err
	}
	version, deleted := opts.VersionColumn, opts.DeletedColumn
	schema := func() []chsink.Column[window.Row[Out]] {
		cols := append(columns(), chsink.UInt64(version, func(r *window.Row[Out]) uint64 { return r.Version }))
		if withDeleted {
			cols = append(cols, chsink.UInt8(deleted, func(r *window.Row[Out]) uint8 {
				if r.Deleted {
					return 1
				}
				return 0
			}))
		}
		return cols
	}
	rows, err := chsink.New(ctx, table, src, store, schema, opts.Sink)
	if err != nil {
		return nil, err
	}
	late := lateLog[In]{log: opts.Sink.Logger, now: opts.Sink.Now, table: table.Name}
	if late.log == nil {
		late.log = slog.New(slog.DiscardHandler)
	}
	if late.now == nil {
		late.now = time.Now
	}
	return &Sink[In, Acc, Out]{op: op, rows: rows, late: late}, nil
}

// Open builds the window sink for table in db as part of the
// checkpoint.Chain c, over the chain's partition and Storage, keeping the
// journal for as many checkpoints as the chain's Store keeps, and registers
// it in the chain under opts.Sink.ParticipantName (default: the table's
// name). The returned Sink is the handle the chain's Process feeds with
// Add and its Tick calls; the chain's owner (a kafkasource Source) runs and
// closes it.
//
// opts is as for New; leave opts.Sink.Database and
// opts.Sink.KeepCheckpoints zero, as for chsink.Open. A participant name
// already registered in the chain is refused with an error wrapping
// checkpoint.ErrInvalidOptions; nothing is left open then.
func Open[In, Acc, Out any](ctx context.Context, c *checkpoint.Chain, db chsink.DB, table string,
	op *window.Operator[In, Acc, Out], columns chsink.Schema[window.Row[Out]], opts Options) (*Sink[In, Acc, Out], error) {
	r, err := chainopt.Resolve(c, chainopt.Sink{Addr: db.Addr, Database: db.Database, Table: table,
		OptsDatabase: opts.Sink.Database, OptsKeep: opts.Sink.KeepCheckpoints, Participant: opts.Sink.ParticipantName},
		chsink.ErrInvalidOptions)
	if err != nil {
		return nil, err
	}
	opts.Sink.Database, opts.Sink.KeepCheckpoints = r.OptsDatabase, r.OptsKeep
	s, err := New(ctx, chsink.Table{Addr: r.Addr, Name: r.Table}, c.Partition(), c.Storage(), op, columns, opts)
	if err != nil {
		return nil, err
	}
	if err := c.Add(r.Participant, s); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// checkReplacing reads the table's engine and the types of its version and
// deleted columns, and says whether the sink writes the deleted column.
func checkReplacing(ctx context.Context, table chsink.Table, opts Options, session bool) (bool, error) {
	db := opts.Sink.Database
	if db == "" {
		db = "default"
	}
	o := opts.Sink.Client
	o.Address, o.Database = table.Addr, db
	if opts.Sink.DialTimeout > 0 {
		o.DialTimeout = opts.Sink.DialTimeout
	}
	if opts.Sink.User != "" {
		o.User = opts.Sink.User
	}
	if opts.Sink.Password != "" {
		o.Password = opts.Sink.Password
	}
	if o.ClientName == "" {
		o.ClientName = "exactlyonce-windowsink"
	}
	c, err := ch.Dial(ctx, o)
	if err != nil {
		return false, fmt.Errorf("windowsink: dial %s: %w", table.Addr, err)
	}
	defer c.Close()
	rows, err := query(ctx, c, fmt.Sprintf("SELECT engine AS c0, engine_full AS c1 FROM system.tables WHERE database = %s AND name = %s",
		quote(db), quote(table.Name)), 2)
	if err != nil {
		return false, &chsink.ServerError{Op: "inspect " + db + "." + table.Name, Err: err}
	}
	if len(rows) == 0 {
		return false, &chsink.TableCheckError{Database: db, Table: table.Name, Reason: "table does not exist", Err: chsink.ErrTableSchema}
	}
	engine := rows[0][0]
	refuse := func(reason string) (bool, error) {
		return false, &chsink.TableCheckError{Database: db, Table: table.Name, Engine: engine, Reason: reason, Err: ErrNotReplacing}
	}
	want := fmt.Sprintf("ReplacingMergeTree(%s)", opts.VersionColumn)
	if session {
		want = fmt.Sprintf("ReplacingMergeTree(%s, %s)", opts.VersionColumn, opts.DeletedColumn)
	}
	r := parseEngine(engine, rows[0][1])
	switch {
	case !r.family:
		return refuse("window rows need " + want + ": a window's row is written again with a higher version as it fills " +
			"(early firings, late events, replays), and only a ReplacingMergeTree keeps the latest")
	case r.version == "":
		return refuse("the engine has no version column, so it keeps an arbitrary row of a window, not the latest: use " + want)
	case r.version != opts.VersionColumn:
		return refuse(fmt.Sprintf("the engine's version column is %q, Options.VersionColumn is %q: make them the same", r.version, opts.VersionColumn))
	case session && r.deleted == "":
		return refuse("session windows need " + want + ": a merge of sessions retracts a row by a deleted one, which FINAL drops only with an is_deleted column")
	case r.deleted != "" && r.deleted != opts.DeletedColumn:
		return refuse(fmt.Sprintf("the engine's is_deleted column is %q, Options.DeletedColumn is %q: make them the same", r.deleted, opts.DeletedColumn))
	}
	types, err := query(ctx, c, fmt.Sprintf("SELECT name AS c0, type AS c1 FROM system.columns WHERE database = %s AND table = %s",
		quote(db), quote(table.Name)), 2)
	if err != nil {
		return false, &chsink.ServerError{Op: "inspect " + db + "." + table.Name, Err: err}
	}
	for _, t := range types {
		switch {
		case t[0] == r.version && t[1] != "UInt64":
			return refuse(fmt.Sprintf("version column %q is %s; the sink writes Row.Version as UInt64", t[0], t[1]))
		case t[0] == r.deleted && r.deleted != "" && t[1] != "UInt8":
			return refuse(fmt.Sprintf("is_deleted column %q is %s; the sink writes Row.Deleted as UInt8", t[0], t[1]))
		}
	}
	return r.deleted != "", nil
}

// Add feeds the event read at offset of the source partition to the
// operator and writes the rows it emits. Events must come in offset order,
// each once (deduplicate first). Late events are kept until the next call
// and returned by Late. On a fresh start the first Add (or Tick) reads the
// sink's journal, for what a run that died may have written (see the
// package's Guarantees).
func (s *Sink[In, Acc, Out]) Add(ctx context.Context, offset int64, ev window.Event[In]) error {
	if err := s.track(ctx, offset); err != nil {
		return err
	}
	s.cursor.At(offset)
	s.out.Reset()
	if err := s.op.Add(ev, &s.out); err != nil {
		return err
	}
	s.late.note(s.out.Late)
	return s.write(ctx)
}

// Tick lets the operator close idle windows and fire early by interval
// (window.Operator.Tick), and writes the rows. Call it from the chain's
// Tick; NextTick of the operator says when it is next due.
func (s *Sink[In, Acc, Out]) Tick(ctx context.Context) error {
	if err := s.track(ctx, s.cursor.Peek().Offset); err != nil {
		return err
	}
	s.out.Reset()
	s.op.Tick(&s.out)
	return s.write(ctx)
}

// EndInput fires every open window (window.Operator.EndInput) and writes
// the rows: the end of a bounded input.
func (s *Sink[In, Acc, Out]) EndInput(ctx context.Context) error {
	if err := s.track(ctx, s.cursor.Peek().Offset); err != nil {
		return err
	}
	s.out.Reset()
	s.op.EndInput(&s.out)
	return s.write(ctx)
}

// Late returns the late events of the last Add (window.Output.Late), valid
// until the next call of the Sink. The Sink writes none of them; it logs a
// warning with their count (Options.Sink.Logger, at most one line per 10
// s), and the operator counts them in the exactlyonce.window.late_events
// metric. Write them elsewhere, or count them, here.
func (s *Sink[In, Acc, Out]) Late() []window.LateEvent[In] { return s.out.Late }

func (s *Sink[In, Acc, Out]) write(ctx context.Context) error {
	for _, r := range s.out.Rows {
		if err := s.rows.Add(ctx, s.cursor.Next(), r); err != nil {
			return err
		}
	}
	return nil
}

// stateVersion is the first byte of a Sink's state, followed by three
// length-prefixed (uvarint) states: the operator's, the cursor's and the
// chsink.Sink's.
const stateVersion = 1

// Snapshot flushes the rows (chsink.Sink.Snapshot) and returns the state of
// the operator, the cursor and the sink together.
func (s *Sink[In, Acc, Out]) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	b := []byte{stateVersion}
	for _, p := range []checkpoint.Participant{s.op, &s.cursor, s.rows} {
		st, err := p.Snapshot(ctx, id)
		if err != nil {
			return nil, err
		}
		b = binary.AppendUvarint(b, uint64(len(st)))
		b = append(b, st...)
	}
	return b, nil
}

// Restore restores the operator, the cursor and the sink from a Snapshot.
// A state of another version is refused with sink.ErrUnsupportedVersion, a
// damaged one with sink.ErrCorrupt, one the operator, cursor or sink
// refuses with their error; a refused state leaves the Sink as it was.
func (s *Sink[In, Acc, Out]) Restore(ctx context.Context, state []byte) error {
	if len(state) == 0 {
		return fmt.Errorf("%w: empty window sink state", sink.ErrCorrupt)
	}
	if state[0] != stateVersion {
		return fmt.Errorf("%w: window sink state version %d, this build reads %d", sink.ErrUnsupportedVersion, state[0], stateVersion)
	}
	var parts [3][]byte
	rest := state[1:]
	for i := range parts {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return fmt.Errorf("%w: window sink state truncated", sink.ErrCorrupt)
		}
		parts[i], rest = rest[k:k+int(n)], rest[k+int(n):]
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: window sink state has %d trailing bytes", sink.ErrCorrupt, len(rest))
	}
	// A refused state loads nothing: the cursor is decoded aside, the
	// operator (whose Restore changes nothing when it refuses) goes before
	// the sink, and is put back from its own snapshot when the sink refuses
	// the journal; the sink's Restore, which reads the journal, goes last.
	var cursor sink.Cursor
	if err := cursor.Restore(ctx, parts[1]); err != nil {
		return err
	}
	prev, err := s.op.Snapshot(ctx, 0)
	if err != nil {
		return err
	}
	if err := s.op.Restore(ctx, parts[0]); err != nil {
		return err
	}
	if err := s.rows.Restore(ctx, parts[2]); err != nil {
		if uerr := s.op.Restore(ctx, prev); uerr != nil {
			return errors.Join(err, fmt.Errorf("windowsink: putting the operator back: %w", uerr))
		}
		return err
	}
	s.cursor = cursor
	// The sessions restored may have been shown after the checkpoint by a
	// run that died: readReach marks them when the journal says it wrote.
	return s.readReach(ctx)
}

// CheckpointCompleted tells the sink a checkpoint is durable (it prunes its
// journal).
func (s *Sink[In, Acc, Out]) CheckpointCompleted(ctx context.Context, id checkpoint.ID) error {
	return s.rows.CheckpointCompleted(ctx, id)
}

// Run runs the sink's flush timer until ctx ends or the sink is closed
// (chsink.Sink.Run); kafkasource runs it for the chain.
func (s *Sink[In, Acc, Out]) Run(ctx context.Context) error { return s.rows.Run(ctx) }

// Close closes the sink (chsink.Sink.Close); safe to call twice.
func (s *Sink[In, Acc, Out]) Close() error { return s.rows.Close() }

// Compile-time check that the Sink is run and closed by its chain.
var _ interface {
	Run(context.Context) error
	Close() error
} = (*Sink[float64, window.StatsAcc, window.Summary])(nil)

// query runs body and returns the rows of its ncols String columns c0...
func query(ctx context.Context, c *ch.Client, body string, ncols int) ([][]string, error) {
	cols := make([]*proto.ColStr, ncols)
	var res proto.Results
	for i := range cols {
		cols[i] = new(proto.ColStr)
		res = append(res, proto.ResultColumn{Name: fmt.Sprintf("c%d", i), Data: cols[i]})
	}
	var rows [][]string
	err := c.Do(ctx, ch.Query{Body: body, Result: res, OnResult: func(context.Context, proto.Block) error {
		for r := range cols[0].Rows() {
			row := make([]string, ncols)
			for i, col := range cols {
				row[i] = col.Row(r)
			}
			rows = append(rows, row)
		}
		for _, col := range cols {
			col.Reset()
		}
		return nil
	}})
	return rows, err
}

// quote returns s as a ClickHouse string literal.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
