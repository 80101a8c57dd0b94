package chsink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/repair"
	"github.com/exactlyonce/exactlyonce/sink/internal/journal"
)

var _ checkpoint.Participant = (*Sink[struct{}])(nil)

// Table names the ClickHouse server and table a sink writes to.
type Table struct {
	Addr string // host:port of the native protocol
	Name string // table name; the database is Options.Database
}

// Sink writes rows of type T for one source partition into one ClickHouse
// table, exactly once, as a checkpoint.Participant. See the package doc.
//
// Add, Snapshot, Restore and CheckpointCompleted are called by the chain's
// goroutine; Run runs in a goroutine of its own (the flush timer); Close may
// be called from anywhere. The sink synchronises them with one mutex, held
// while a batch is cut. A cut batch is sealed, journaled and inserted by a
// goroutine of the sink's own (see flight), which takes no lock: it alone
// uses the batch's column set, and the connection while it inserts; the
// batches are inserted one at a time, in order.
type Sink[T any] struct {
	opts    Options
	table   Table
	src     checkpoint.TopicPartition
	journal *journal.Journal
	store   checkpoint.Storage

	buf     *colSet[T]   // the batch being filled
	spare   []*colSet[T] // empty sets, one for each batch that may be in flight
	body    string       // the insert statement
	columns []string     // the schema's column names
	info    tableInfo
	server  ServerSettings // what New read of the server (settings.go)
	sent    []ch.Setting   // the settings every insert carries besides its token

	mu          sync.Mutex
	conn        *ch.Client   // the flights' while any runs (see flight)
	flights     []*flight[T] // the batches cut and not settled, oldest first (at most maxFlights)
	inited      bool
	restored    bool
	expect      pendingRange
	n           int
	first, last sink.Position // of the buffered rows
	bufSince    time.Time
	bytesPerRow int
	hasPos      bool
	pos         sink.Position // last position added
	covered     sink.Position // every row at or before it is in ClickHouse
	hasCovered  bool
	pending     []sink.Intent // journaled batches after covered, not replayed yet
	replaying   bool          // the buffer holds rows of pending[0]
	snaps       map[checkpoint.ID]sink.Position
	completed   []sink.Position // covered positions of the newest completed checkpoints, oldest first
	lastRow     time.Time       // when the last row was added
	settled     *sink.Position  // a short replay of a batch ClickHouse held was finished through here: later rows up to it are dropped
	err         error           // sticky: the sink is broken until Restore

	// Flushing ahead of the barrier (see Options.NoFlushAhead).
	barrierAt time.Time     // when the last Snapshot started
	cadence   time.Duration // expected time between barriers; 0 until two were seen
	jitter    time.Duration // mean deviation of the intervals from cadence
	aheadDone bool          // this interval's flush ahead started, or was passed up
	aheadTook time.Duration // what the flushes ahead took, sealing to ack (moving average)
	async     bool          // snapshotted with SnapshotAsync: no flush ahead
	closed    bool

	closeCh chan struct{}
	kick    chan struct{}
	running atomic.Bool // a Run is flushing: a second one returns at once

	boot atomic.Pointer[string] // the server's run when the connection was made (see repair.ReadBoot)

	scratch T
	block   int64     // cached block counter, a lower bound
	blockAt time.Time // when block was read

	repairer *repair.Repairer // checks and repairs parts the server lost, once New has read the server

	beforeRecord, beforeInsert func()         // test hooks
	beforeJournal              func()         // test hook: a batch's goroutine is about to journal its intent
	afterWrite                 func(rows int) // test hook: a batch of rows is acknowledged

	m metrics
}

// New connects to the table, checks that it deduplicates inserted blocks
// (see TableCheckError) and has the schema's columns, and returns a sink for
// src whose journal lives in store. New does not read the journal: that
// happens in Restore, or before the first row on a fresh start.
func New[T any](ctx context.Context, table Table, src checkpoint.TopicPartition, store checkpoint.Storage, schema Schema[T], opts Options) (*Sink[T], error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if schema == nil {
		return nil, fmt.Errorf("%w: nil schema", ErrInvalidOptions)
	}
	buf, err := newColSet(schema)
	if err != nil {
		return nil, err
	}
	var spare []*colSet[T]
	for range barrierFlights {
		set, err := newColSet(schema)
		if err != nil {
			return nil, err
		}
		spare = append(spare, set)
	}
	j, err := journal.Open(store, opts.Database+"."+table.Name, src)
	if err != nil {
		return nil, err
	}
	s := &Sink[T]{
		opts: opts, table: table, src: src, journal: j, store: store, buf: buf, spare: spare,
		snaps: map[checkpoint.ID]sink.Position{}, closeCh: make(chan struct{}), kick: make(chan struct{}, 1),
		bytesPerRow: 64,
	}
	names := make([]string, len(buf.cols))
	for i, c := range buf.cols {
		names[i] = c.name
	}
	for _, set := range spare {
		if len(set.cols) != len(buf.cols) {
			return nil, fmt.Errorf("%w: schema returned %d columns, then %d", ErrInvalidOptions, len(buf.cols), len(set.cols))
		}
		for i, c := range buf.cols {
			if set.cols[i].name != c.name {
				return nil, fmt.Errorf("%w: schema returned column %q, then %q at %d", ErrInvalidOptions, c.name, set.cols[i].name, i)
			}
		}
	}
	s.columns = names
	s.body = "INSERT INTO " + chsql.Ident(opts.Database) + "." + chsql.Ident(table.Name) + " (" + chsql.JoinIdents(names) + ") VALUES"
	if err := s.initMetrics(); err != nil {
		return nil, err
	}
	conn, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.conn = conn
	srv, sent, err := checkServer(ctx, conn, s.dial)
	var info tableInfo
	if err == nil {
		info, err = checkTable(ctx, conn, opts.Database, table.Name, names, opts.OnMismatch == MismatchReinsert, opts.DistinctViewRows)
	}
	if err != nil {
		_ = conn.Close()
		if _, wrong := errors.AsType[*TableCheckError](err); wrong {
			return nil, err
		}
		if _, unsafe := errors.AsType[*SettingError](err); unsafe {
			return nil, err
		}
		// The server failed to answer, which a restart of it may cure.
		return nil, &ServerError{Op: "inspect " + opts.Database + "." + table.Name, Err: err}
	}
	s.info, s.sent = info, sent
	// A repair's inserts carry the same settings.
	_, selectDedup := srv.Defaults[selectDedupSetting]
	s.repairer = repair.New(repair.Config{
		Database: opts.Database, Table: table.Name, Columns: names, Distinct: opts.DistinctViewRows, Dial: s.dial, Logger: opts.Logger,
		Sent: sent, InsertSettings: func(token string) []ch.Setting { return insertSettingsFor(sent, token) }, SelectDedup: selectDedup,
		Repaired: s.m.partsRepaired, Attrs: s.m.attrs,
	})
	// The server's run, read with the settings in hand: its insert sends
	// them too.
	boot := repair.ReadBoot(ctx, conn, opts.Database, sent)
	s.boot.Store(&boot)
	srv.WindowBlocks, srv.WindowSeconds = info.windowBlocks, info.windowSeconds
	s.server = srv
	opts.Logger.Info("chsink: server checked", "table", opts.Database+"."+table.Name, "server", srv.logValue())
	return s, nil
}

// Server returns what New read of the server: its version, the settings
// that decide the sink's guarantees (the server's and the user's values,
// and those every insert sends instead) and the table's deduplication
// window.
func (s *Sink[T]) Server() ServerSettings {
	srv := s.server
	srv.Defaults, srv.Sent = maps.Clone(srv.Defaults), maps.Clone(srv.Sent)
	return srv
}

// Add buffers row at pos, flushing when the batch is full. pos must be after
// the previous row's. A full batch is journaled and its insert starts in the
// background; Add returns while it runs, and the next flush waits for it
// first. An error other than ErrOutOfOrder breaks the sink until Restore:
// the checkpoint must fail. That includes the failure of the batch inserted
// in the background, which the first Add after it ended returns (or, at the
// latest, the next flush, Snapshot or Close).
func (s *Sink[T]) Add(ctx context.Context, pos sink.Position, row T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.lastRow = time.Now()
	return s.addLocked(ctx, pos, &row)
}

// addLocked is Add after the lock and the usability check.
func (s *Sink[T]) addLocked(ctx context.Context, pos sink.Position, row *T) error {
	if s.hasPos && pos.Compare(s.pos) <= 0 {
		return fmt.Errorf("%w: %s after %s", sink.ErrOutOfOrder, pos, s.pos)
	}
	if !s.restored && !s.hasPos {
		s.dropPassed(pos)
	}
	s.hasPos, s.pos = true, pos
	if s.settled != nil {
		if pos.Compare(*s.settled) <= 0 {
			// Inside a journaled batch whose short replay was finished by
			// the timer (see Run) while ClickHouse held the batch as first
			// inserted, which MismatchKeepFirst keeps: the row is in it.
			s.opts.Logger.Debug("chsink: row of a replayed batch ClickHouse holds; dropped",
				"source", s.src.String(), "position", pos.String(), "batch_last", s.settled.String())
			return nil
		}
		s.settled = nil
	}
	s.scratch = *row // a field, so passing its address to the column closures does not allocate
	if err := s.add(ctx, pos, &s.scratch); err != nil {
		s.err = err
		return err
	}
	return nil
}

// dropPassed discards, on a fresh start, journaled batches that end before
// the first row: the source did not replay them.
func (s *Sink[T]) dropPassed(pos sink.Position) {
	i := 0
	for i < len(s.pending) && s.pending[i].Last.Compare(pos) < 0 {
		s.opts.Logger.Warn("chsink: fresh start after journaled batch; not replayed by the source",
			"source", s.src.String(), "first", s.pending[i].First.String(), "last", s.pending[i].Last.String(), "acked", s.pending[i].Acked)
		i++
	}
	s.pending = s.pending[i:]
}

func (s *Sink[T]) usable(ctx context.Context) error {
	if s.closed {
		return sink.ErrClosed
	}
	if s.err != nil {
		return s.err
	}
	if err := s.collect(); err != nil {
		return err
	}
	return s.ensureInit(ctx)
}

func (s *Sink[T]) add(ctx context.Context, pos sink.Position, row *T) error {
	for len(s.pending) > 0 {
		p := &s.pending[0]
		step := journal.NextStep(p, s.replaying, s.n, pos, s.restored && s.opts.OnMismatch == MismatchFail)
		switch step {
		case journal.StepMismatch:
			return &sink.ContentMismatchError{Intent: *p, Rows: 1, Last: pos, Detached: true}
		case journal.StepFlush:
			if err := s.flush(ctx); err != nil {
				return err
			}
			continue
		case journal.StepFinish:
			if err := s.finishReplay(ctx, false); err != nil {
				return err
			}
			continue
		case journal.StepAppend, journal.StepAppendFinish:
			if !s.replaying {
				// Run may be waiting an hour on an empty buffer: it must
				// now finish a short replay MaxDelay after the last row.
				s.kickRun()
			}
			s.replaying = true
			s.appendRow(pos, row)
			if step == journal.StepAppendFinish {
				return s.finishReplay(ctx, false)
			}
			return nil
		}
		break // journal.StepBatch
	}
	s.appendRow(pos, row)
	if s.n >= s.opts.MaxRows || s.n*s.bytesPerRow >= s.opts.MaxBytes {
		return s.flush(ctx)
	}
	if s.n == 1 {
		s.kickRun()
	}
	return nil
}

// kickRun wakes Run to compute its next deadline again.
func (s *Sink[T]) kickRun() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Sink[T]) appendRow(pos sink.Position, row *T) {
	for i := range s.buf.cols {
		s.buf.cols[i].add(row)
	}
	if s.n == 0 {
		s.first = pos
		s.bufSince = time.Now()
	}
	s.last = pos
	s.n++
	if s.n&1023 == 0 {
		s.m.buffered.Add(context.Background(), 1024, s.m.attrs)
	}
}

func (s *Sink[T]) resetBuffer() {
	s.m.buffered.Add(context.Background(), -int64(s.n&^1023), s.m.attrs)
	s.buf.reset()
	s.n = 0
	s.replaying = false
}
