package chsink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
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
// during a flush. A sealed batch is inserted by a goroutine of the sink's
// own, one batch at a time (see flight), which takes no lock: while it runs
// it alone uses the batch's column set and the connection.
type Sink[T any] struct {
	opts    Options
	table   Table
	src     checkpoint.TopicPartition
	journal *sink.Journal
	store   checkpoint.Storage

	buf   *colSet[T] // the batch being filled
	spare *colSet[T] // the batch in flight, or empty
	body  string
	info  tableInfo

	mu          sync.Mutex
	conn        *ch.Client // the flight's while one runs (see flight)
	flight      *flight[T] // the sealed batch being inserted, nil if none
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
	settled     *sink.Position  // a short replay was finished through here: later rows up to it are dropped
	err         error           // sticky: the sink is broken until Restore
	closed      bool

	closeCh chan struct{}
	kick    chan struct{}

	scratch T
	block   int64     // cached block counter, a lower bound
	blockAt time.Time // when block was read

	beforeRecord, beforeInsert func() // test hooks

	m metrics
}

// flight is a sealed batch whose intent is journaled and whose insert runs
// in a goroutine started by launch. Until done is closed that goroutine
// alone touches cols (its encoded bytes included), Sink.conn, err and took;
// the sink's goroutines wait for done (Sink.wait) before they use any of
// them.
type flight[T any] struct {
	in     sink.Intent
	cols   *colSet[T]
	cancel context.CancelFunc
	done   chan struct{}
	err    error         // the insert's outcome
	took   time.Duration // from sealing to the insert's end
}

type metrics struct {
	attrs    metric.MeasurementOption
	rows     metric.Int64Counter
	batches  metric.Int64Counter
	retries  metric.Int64Counter
	latency  metric.Float64Histogram
	buffered metric.Int64UpDownCounter
}

type pendingRange struct {
	Count int           `json:"count"`
	First sink.Position `json:"first"`
	Last  sink.Position `json:"last"`
}

type snapshotState struct {
	Version    int           `json:"v"`
	Table      string        `json:"table"`
	Topic      string        `json:"topic"`
	Partition  int           `json:"partition"`
	HasCovered bool          `json:"has_covered"`
	Covered    sink.Position `json:"covered"`
	Pending    pendingRange  `json:"pending"`
}

const snapshotVersion = 1

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
	spare, err := newColSet(schema)
	if err != nil {
		return nil, err
	}
	j, err := sink.OpenJournal(store, opts.Database+"."+table.Name, src)
	if err != nil {
		return nil, err
	}
	s := &Sink[T]{
		opts: opts, table: table, src: src, journal: j, store: store, buf: buf, spare: spare,
		snaps: map[checkpoint.ID]sink.Position{}, closeCh: make(chan struct{}), kick: make(chan struct{}, 1),
		bytesPerRow: 64,
	}
	if len(spare.cols) != len(buf.cols) {
		return nil, fmt.Errorf("%w: schema returned %d columns, then %d", ErrInvalidOptions, len(buf.cols), len(spare.cols))
	}
	names := make([]string, len(buf.cols))
	for i, c := range buf.cols {
		if spare.cols[i].name != c.name {
			return nil, fmt.Errorf("%w: schema returned column %q, then %q at %d", ErrInvalidOptions, c.name, spare.cols[i].name, i)
		}
		names[i] = c.name
	}
	s.body = "INSERT INTO " + ident(opts.Database) + "." + ident(table.Name) + " (" + joinIdents(names) + ") VALUES"
	if err := s.initMetrics(); err != nil {
		return nil, err
	}
	conn, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.conn = conn
	info, err := checkTable(ctx, conn, opts.Database, table.Name, names, opts.OnMismatch == MismatchReinsert)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	s.info = info
	return s, nil
}

func (s *Sink[T]) initMetrics() error {
	mp := s.opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/exactlyonce/exactlyonce/sink/chsink")
	s.m.attrs = metric.WithAttributes(
		attribute.String("table", s.opts.Database+"."+s.table.Name),
		attribute.String("topic", s.src.Topic),
		attribute.Int("partition", s.src.Partition))
	var err, e error
	s.m.rows, e = m.Int64Counter("exactlyonce.sink.rows_written", metric.WithDescription("Rows acknowledged by ClickHouse (replayed batches included)."))
	err = errors.Join(err, e)
	s.m.batches, e = m.Int64Counter("exactlyonce.sink.batches_written", metric.WithDescription("Batches acknowledged by ClickHouse."))
	err = errors.Join(err, e)
	s.m.retries, e = m.Int64Counter("exactlyonce.sink.retries", metric.WithDescription("Insert attempts after a failed one."))
	err = errors.Join(err, e)
	s.m.latency, e = m.Float64Histogram("exactlyonce.sink.batch_duration", metric.WithUnit("s"), metric.WithDescription("Time to write a batch: journal, insert with retries, ack."))
	err = errors.Join(err, e)
	s.m.buffered, e = m.Int64UpDownCounter("exactlyonce.sink.buffered_rows", metric.WithDescription("Rows buffered, not yet flushed, in steps of 1024."))
	err = errors.Join(err, e)
	if err != nil {
		return fmt.Errorf("chsink: metrics: %w", err)
	}
	return nil
}

func (s *Sink[T]) dial(ctx context.Context) (*ch.Client, error) {
	o := s.opts.Client
	o.Address, o.Database, o.DialTimeout, o.ReadTimeout = s.table.Addr, s.opts.Database, s.opts.DialTimeout, s.opts.InsertTimeout
	if s.opts.User != "" {
		o.User = s.opts.User
	}
	if s.opts.Password != "" {
		o.Password = s.opts.Password
	}
	if o.ClientName == "" {
		o.ClientName = "exactlyonce-chsink"
	}
	c, err := ch.Dial(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("chsink: dial %s: %w", s.table.Addr, err)
	}
	return c, nil
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
	if s.hasPos && pos.Compare(s.pos) <= 0 {
		return fmt.Errorf("%w: %s after %s", sink.ErrOutOfOrder, pos, s.pos)
	}
	if !s.restored && !s.hasPos {
		s.dropPassed(pos)
	}
	s.hasPos, s.pos = true, pos
	s.lastRow = time.Now()
	if s.settled != nil {
		if pos.Compare(*s.settled) <= 0 {
			// Inside a journaled batch whose short replay was finished by
			// the timer (see Run): the batch is settled as the version
			// ClickHouse holds, so a late row of it is not inserted again.
			s.opts.Logger.Warn("chsink: row inside a replayed batch already finished; dropped",
				"source", s.src.String(), "position", pos.String(), "batch_last", s.settled.String())
			return nil
		}
		s.settled = nil
	}
	s.scratch = row // a field, so passing its address to the column closures does not allocate
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
	if f := s.flight; f != nil {
		select {
		case <-f.done: // collect it now, so a failure stops the producer early
			if err := s.wait(); err != nil {
				return err
			}
		default:
		}
	}
	return s.ensureInit(ctx)
}

func (s *Sink[T]) add(ctx context.Context, pos sink.Position, row *T) error {
	for len(s.pending) > 0 {
		p := &s.pending[0]
		if s.replaying {
			if pos.Compare(p.Last) <= 0 {
				s.appendRow(pos, row)
				if pos == p.Last {
					return s.finishReplay(ctx)
				}
				return nil
			}
			if err := s.finishReplay(ctx); err != nil {
				return err
			}
			continue
		}
		if pos.Compare(p.First) < 0 {
			if s.restored && s.opts.OnMismatch == MismatchFail {
				return &sink.ContentMismatchError{Intent: *p, Rows: 1, Last: pos, Detached: true}
			}
			break // a row outside any journaled batch: normal batching
		}
		// Rows buffered so far fell before p: they are a batch of their own,
		// never part of p's (finishReplay would insert them under p's token).
		if err := s.flush(ctx); err != nil {
			return err
		}
		if pos.Compare(p.Last) > 0 { // the batch got no rows at all
			if err := s.finishReplay(ctx); err != nil {
				return err
			}
			continue
		}
		s.replaying = true
		s.appendRow(pos, row)
		if pos == p.Last {
			return s.finishReplay(ctx)
		}
		return nil
	}
	s.appendRow(pos, row)
	if s.n >= s.opts.MaxRows || s.n*s.bytesPerRow >= s.opts.MaxBytes {
		return s.flush(ctx)
	}
	if s.n == 1 {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return nil
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

// flush seals the buffered rows as a new batch: it journals the batch's
// intent, waits for the batch in flight, and starts the new batch's insert
// in the background (see launch). Callers that need the rows in ClickHouse
// call wait after it.
//
// The intent is written before this batch's insert can start, which is all
// a replay needs: after a crash the journal holds every batch that may have
// reached ClickHouse, cut as it was. Writing it while the previous batch is
// still being inserted is what keeps the journal's fsync off the critical
// path; that intent cannot carry the previous batch's ack yet, so the ack
// rides one intent later, and after a crash up to two batches (the one in
// flight and the one before it) are re-inserted and deduplicated by their
// tokens.
func (s *Sink[T]) flush(ctx context.Context) error {
	if s.n == 0 || s.replaying {
		return nil
	}
	start := time.Now()
	h, size, err := s.buf.seal()
	if err != nil {
		return err
	}
	if s.n > 0 {
		s.bytesPerRow = max(1, size/s.n)
	}
	in := sink.Intent{
		First: s.first, Last: s.last, Rows: s.n, Hash: h,
		Token:   s.journal.Token(s.first, s.last),
		Created: s.opts.Now(), Block: -1,
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if in.Block, err = s.blockLowerBound(ctx); err != nil {
		return err
	}
	if s.beforeRecord != nil {
		s.beforeRecord()
	}
	if err := s.journal.Record(ctx, &in); err != nil {
		return err
	}
	if err := s.wait(); err != nil {
		return err
	}
	s.launch(ctx, in, start)
	return nil
}

// launch hands the buffered rows, sealed as in, to a goroutine that
// inserts them, and swaps in the empty column set for the next batch. The
// insert belongs to the sink, not to the call that sealed the batch: it
// keeps ctx's values but not its cancellation (a caller may well cancel a
// per-call context as soon as Add returns), and it stops early only when
// Close or Restore abandons it. Only one batch is in flight: every caller
// waited for the previous one.
func (s *Sink[T]) launch(ctx context.Context, in sink.Intent, start time.Time) {
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &flight[T]{in: in, cols: s.buf, cancel: cancel, done: make(chan struct{})}
	hook := s.beforeInsert
	s.flight = f
	s.buf, s.spare = s.spare, s.buf
	s.m.buffered.Add(context.Background(), -int64(s.n&^1023), s.m.attrs)
	s.n = 0
	go func() {
		defer close(f.done)
		f.err = s.insert(ictx, f.cols.sealed, in, hook)
		f.took = time.Since(start)
	}()
}

// wait waits for the batch in flight, if any, and settles it: on success
// its rows count as covered and its ack is noted for the next intent; a
// failure breaks the sink and is returned. Afterwards the caller owns the
// connection again.
func (s *Sink[T]) wait() error {
	f := s.flight
	if f == nil {
		return nil
	}
	<-f.done
	f.cancel()
	s.flight = nil
	f.cols.reset()
	if f.err != nil {
		s.err = f.err
		return f.err
	}
	s.journal.AckLater(&f.in)
	s.written(f.in, f.took)
	return nil
}

// abandon cancels the batch in flight, if any, and waits for its goroutine
// to end. Its outcome is unknown and does not matter: its intent is in the
// journal, so a replay re-inserts it with its token.
func (s *Sink[T]) abandon() {
	if f := s.flight; f != nil {
		f.cancel()
		<-f.done
		s.flight = nil
		f.cols.reset()
	}
}

// written notes that in is in ClickHouse, took after it was sealed.
func (s *Sink[T]) written(in sink.Intent, took time.Duration) {
	s.covered, s.hasCovered = in.Last, true
	s.m.rows.Add(context.Background(), int64(in.Rows), s.m.attrs)
	s.m.batches.Add(context.Background(), 1, s.m.attrs)
	s.m.latency.Record(context.Background(), took.Seconds(), s.m.attrs)
}

// finishReplay resolves pending[0] with the rows buffered for it. It runs
// synchronously, after the batch in flight (rows buffered before pending[0])
// is settled: replays are rare, and their order of acks and inserts then
// stays the plain one.
func (s *Sink[T]) finishReplay(ctx context.Context) error {
	if err := s.wait(); err != nil {
		return err
	}
	start := time.Now()
	p := s.pending[0]
	var h uint64
	if s.n > 0 {
		var err error
		if h, _, err = s.buf.seal(); err != nil {
			return err
		}
	}
	match := s.n == p.Rows && h == p.Hash && (s.n == 0 || s.last == p.Last)
	if !match {
		mis := &sink.ContentMismatchError{Intent: p, Rows: s.n, Hash: h, Last: s.last}
		switch {
		case s.opts.OnMismatch == MismatchFail:
			return mis
		case s.opts.OnMismatch == MismatchReinsert && s.n > 0:
			s.opts.Logger.Warn("chsink: replayed batch differs from the journal; inserting the new version under a fresh token", "err", mis)
			return s.reinsert(ctx, p, h, start)
		}
		s.opts.Logger.Warn("chsink: replayed batch differs from the journal; keeping the first version", "err", mis)
	}
	switch {
	case p.Acked:
		// Already in ClickHouse: the replayed rows are dropped here.
	case s.n == 0:
		// KeepFirst with nothing replayed: the old version landed or nothing did.
	default:
		skip, err := s.guardWindow(ctx, p)
		if err != nil {
			return err
		}
		if !skip {
			if err := s.journal.CheckOwner(ctx); err != nil {
				return err
			}
			if err := s.insert(ctx, s.buf.sealed, p, s.beforeInsert); err != nil {
				return err
			}
		}
	}
	if !p.Acked {
		if err := s.journal.Ack(ctx, &p); err != nil {
			return err
		}
	}
	s.pending = s.pending[1:]
	if s.n > 0 && !p.Acked {
		s.written(p, time.Since(start))
	} else {
		s.covered, s.hasCovered = p.Last, true
	}
	s.resetBuffer()
	return nil
}

// reinsert writes the buffered rows, replayed into pending[0]'s positions
// with a different content hash h, as a new journaled batch that supersedes
// it, under a token derived from the old token and h. The deduplication
// window does not matter here: the token is new, unless this very content
// was reinserted before, and then the superseding entry is what the journal
// returns and what matched. The new batch is acknowledged like any other
// (see flush); until then a replay re-inserts it with its token. Like
// finishReplay, it inserts synchronously.
func (s *Sink[T]) reinsert(ctx context.Context, p sink.Intent, h uint64, start time.Time) error {
	in := sink.Intent{
		First: p.First, Last: p.Last, Rows: s.n, Hash: h,
		Token: sink.ReinsertToken(p.Token, h), Supersedes: p.Token,
		Created: s.opts.Now(),
	}
	var err error
	if in.Block, err = s.blockLowerBound(ctx); err != nil {
		return err
	}
	if err := s.journal.Record(ctx, &in); err != nil {
		return err
	}
	if err := s.insert(ctx, s.buf.sealed, in, s.beforeInsert); err != nil {
		return err
	}
	s.journal.AckLater(&in)
	s.pending = s.pending[1:]
	s.written(in, time.Since(start))
	s.resetBuffer()
	return nil
}

// guardWindow checks that an unacknowledged journaled batch is still inside
// the table's deduplication window; it reports whether to skip the insert.
func (s *Sink[T]) guardWindow(ctx context.Context, p sink.Intent) (bool, error) {
	out := &sink.OutsideWindowError{Intent: p, BlocksSince: -1, WindowBlocks: s.info.windowBlocks}
	outside := false
	if p.Block >= 0 {
		if now, err := s.blockNumber(ctx); err == nil {
			out.BlocksSince = now - p.Block
			outside = out.BlocksSince >= s.info.windowBlocks
		}
	}
	if s.info.windowSeconds > 0 && s.opts.Now().Sub(p.Created) >= time.Duration(s.info.windowSeconds)*time.Second {
		outside = true
	}
	if !outside {
		return false, nil
	}
	switch s.opts.OnOutsideWindow {
	case WindowReinsert:
		s.opts.Logger.Error("chsink: re-inserting a batch outside the deduplication window; it may be duplicated", "err", out)
		return false, nil
	case WindowSkip:
		s.opts.Logger.Error("chsink: skipping a batch outside the deduplication window; it may be lost", "err", out)
		return true, nil
	}
	return false, out
}

// blockProbeInterval bounds how often a flush reads the table's block
// counter (a system.parts scan). A cached reading is a lower bound of the
// counter at the intent, so the window guard can only overestimate the
// blocks since: it may refuse a re-insert that was still inside the window,
// never accept one that was outside.
const blockProbeInterval = 5 * time.Second

// blockLowerBound returns the table's block counter for a new intent: a
// cached reading, or a fresh one once per blockProbeInterval; -1 if none
// could be read yet. A fresh probe needs the connection, which the batch in
// flight holds, so it first waits for that batch (and returns its error):
// once per interval a flush does not overlap the previous insert.
func (s *Sink[T]) blockLowerBound(ctx context.Context) (int64, error) {
	if !s.blockAt.IsZero() && time.Since(s.blockAt) < blockProbeInterval {
		return s.block, nil
	}
	if err := s.wait(); err != nil {
		return -1, err
	}
	if b, err := s.blockNumber(ctx); err == nil {
		s.block, s.blockAt = b, time.Now()
	} else if s.blockAt.IsZero() {
		return -1, nil
	}
	return s.block, nil
}

func (s *Sink[T]) blockNumber(ctx context.Context) (int64, error) {
	if err := s.connect(ctx); err != nil {
		return -1, err
	}
	n, err := blockNumber(ctx, s.conn, s.opts.Database, s.table.Name, s.info.replicated)
	if err != nil {
		s.dropConn()
	}
	return n, err
}

func (s *Sink[T]) connect(ctx context.Context) error {
	if s.conn != nil && !s.conn.IsClosed() {
		return nil
	}
	s.dropConn()
	c, err := s.dial(ctx)
	if err != nil {
		return err
	}
	s.conn = c
	return nil
}

func (s *Sink[T]) dropConn() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// insert sends input with in's token, retrying retryable errors with
// exponential backoff and full jitter; hook, if set, runs before each
// attempt. It runs in the flight's goroutine, or in the sink's with no batch
// in flight: it uses the connection and, of the journal, only CheckOwner.
func (s *Sink[T]) insert(ctx context.Context, input proto.Input, in sink.Intent, hook func()) error {
	settings := []ch.Setting{
		{Key: "insert_deduplication_token", Value: in.Token, Important: true},
		ch.SettingInt("insert_deduplicate", 1),
		ch.SettingInt("deduplicate_blocks_in_dependent_materialized_views", 1),
		ch.SettingInt("async_insert", 0),
	}
	for attempt := 0; ; attempt++ {
		err := ctx.Err()
		if err == nil && attempt > 0 {
			err = s.journal.CheckOwner(ctx)
		}
		if err == nil {
			err = s.connect(ctx)
		}
		timedOut := false
		if err == nil {
			if hook != nil {
				hook()
			}
			actx, cancel := context.WithTimeout(ctx, s.opts.InsertTimeout)
			// ch-go notices a cancelled context only at its next read
			// deadline (InsertTimeout away); closing the connection ends the
			// attempt at once, with an unknown outcome like any cut.
			conn := s.conn
			stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
			err = conn.Do(actx, ch.Query{Body: s.body, Input: input, Settings: settings})
			stop()
			// The attempt's own deadline, not the caller's: the outcome is
			// unknown and a retry with the same token settles it.
			timedOut = err != nil && actx.Err() != nil && ctx.Err() == nil
			cancel()
			if err == nil {
				return nil
			}
			s.dropConn()
		}
		if errors.Is(err, sink.ErrFenced) || ctx.Err() != nil {
			return &InsertError{Intent: in, Attempts: attempt + 1, Err: errors.Join(err, ctx.Err())}
		}
		retryable := timedOut || IsRetryable(err)
		if !retryable || attempt >= s.opts.MaxRetries {
			return &InsertError{Intent: in, Attempts: attempt + 1, Permanent: !retryable, Err: err}
		}
		s.m.retries.Add(ctx, 1, s.m.attrs)
		ceil := s.opts.RetryBase << min(attempt, 20)
		if ceil > s.opts.RetryMax || ceil <= 0 {
			ceil = s.opts.RetryMax
		}
		delay := time.Duration(rand.Int64N(int64(ceil) + 1))
		s.opts.Logger.Debug("chsink: insert failed, retrying", "token", in.Token, "attempt", attempt+1, "delay", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// ensureInit claims the journal and loads the batches to replay.
func (s *Sink[T]) ensureInit(ctx context.Context) error {
	if s.inited {
		return nil
	}
	if err := s.journal.Claim(ctx); err != nil {
		return err
	}
	pruned, ok, err := s.journal.Pruned(ctx)
	if err != nil {
		return err
	}
	var after *sink.Position
	switch {
	case s.hasCovered:
		after = &s.covered
		if ok && s.covered.Compare(pruned) < 0 {
			return fmt.Errorf("%w: restored at %s, journal pruned through %s", sink.ErrStaleCheckpoint, s.covered, pruned)
		}
	case ok && s.restored:
		return fmt.Errorf("%w: restored before any row, journal pruned through %s", sink.ErrStaleCheckpoint, pruned)
	case ok && !s.opts.AllowFreshStart:
		return fmt.Errorf("%w: %s: journal pruned through %s", sink.ErrPrunedJournal, s.src, pruned)
	}
	pending, err := s.journal.Load(ctx, after)
	if err != nil {
		return err
	}
	if e := s.expect; s.restored && e.Count > 0 {
		if len(pending) < e.Count || pending[0].First != e.First || pending[len(pending)-1].Last.Compare(e.Last) < 0 {
			return fmt.Errorf("%w: snapshot expects %d batches %s..%s, journal has %d", sink.ErrJournalMissing, e.Count, e.First, e.Last, len(pending))
		}
	}
	s.pending = pending
	s.inited = true
	return nil
}

// Snapshot flushes every buffered row and waits for ClickHouse to
// acknowledge it and the batch in flight, then returns the sink's state: the
// position through which rows are durable and the journaled batches still to
// be replayed. An error, including that of the batch inserted in the
// background, fails the checkpoint. A barrier inside a journaled batch being
// replayed returns sink.ErrReplayInProgress and leaves the sink usable.
func (s *Sink[T]) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	if s.replaying {
		return nil, fmt.Errorf("%w: %s..%s at %s", sink.ErrReplayInProgress, s.pending[0].First, s.pending[0].Last, s.pos)
	}
	if err := s.flush(ctx); err != nil {
		s.err = err
		return nil, err
	}
	if err := s.wait(); err != nil {
		return nil, err
	}
	st := snapshotState{
		Version: snapshotVersion, Table: s.opts.Database + "." + s.table.Name, Topic: s.src.Topic, Partition: s.src.Partition,
		HasCovered: s.hasCovered || s.hasPos, Covered: s.covered,
	}
	if s.hasPos && s.pos.Compare(st.Covered) > 0 {
		st.Covered = s.pos
	}
	if n := len(s.pending); n > 0 {
		st.Pending = pendingRange{Count: n, First: s.pending[0].First, Last: s.pending[n-1].Last}
	}
	if st.HasCovered {
		s.snaps[id] = st.Covered
	}
	return json.Marshal(st)
}

// Restore replaces the sink's state with a snapshot's, claims the journal
// (fencing the previous owner) and loads the batches to replay.
func (s *Sink[T]) Restore(ctx context.Context, state []byte) error {
	var st snapshotState
	dec := json.NewDecoder(strings.NewReader(string(state)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the state", ErrCorrupt)
	}
	if st.Version != snapshotVersion {
		return fmt.Errorf("%w: state version %d, this sink reads %d", ErrUnsupportedVersion, st.Version, snapshotVersion)
	}
	table := s.opts.Database + "." + s.table.Name
	if st.Table != table || st.Topic != s.src.Topic || st.Partition != s.src.Partition {
		return fmt.Errorf("%w: state of %s %s/%d, this sink writes %s %s",
			ErrIncompatible, st.Table, st.Topic, st.Partition, table, s.src)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return sink.ErrClosed
	}
	s.abandon() // before Claim: the flight's goroutine reads the journal's epoch
	s.resetBuffer()
	s.err, s.inited, s.restored = nil, false, true
	s.hasCovered, s.covered = st.HasCovered, st.Covered
	s.hasPos, s.pos = st.HasCovered, st.Covered
	s.expect = st.Pending
	s.pending = nil
	clear(s.snaps)
	s.completed, s.settled = s.completed[:0], nil
	if err := s.ensureInit(ctx); err != nil {
		s.err = err
		return err
	}
	return nil
}

// CheckpointCompleted prunes the journal entries that no kept checkpoint
// needs: those through the oldest of the newest Options.KeepCheckpoints
// completed checkpoints, so restore can still fall back to any checkpoint
// the store keeps. It is idempotent; skipping it only lets the journal grow.
// A failed delete is logged and retried at the next completion, never
// returned; the error is sink.ErrFenced when another instance took the
// partition over.
func (s *Sink[T]) CheckpointCompleted(ctx context.Context, id checkpoint.ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var through sink.Position
	found := false
	for sid, pos := range s.snaps {
		if sid <= id {
			if !found || pos.Compare(through) > 0 {
				through = pos
			}
			found = true
			delete(s.snaps, sid)
		}
	}
	if !found || s.closed {
		return nil
	}
	s.completed = append(s.completed, through)
	if n := len(s.completed) - s.opts.KeepCheckpoints; n > 0 {
		s.completed = append(s.completed[:0], s.completed[n:]...)
	}
	if len(s.completed) < s.opts.KeepCheckpoints {
		return nil // an older checkpoint of an earlier owner may still be kept
	}
	err := s.journal.Prune(ctx, s.completed[0])
	if errors.Is(err, sink.ErrPruneDeferred) {
		s.opts.Logger.Warn("chsink: journal pruning deferred", "source", s.src.String(), "err", err)
		return nil
	}
	return err
}

// Run flushes a non-empty batch MaxDelay after its first row, so a quiet
// stream still reaches ClickHouse. It returns nil after Close, ctx.Err()
// when ctx ends (the chain's generation ended: no insert starts after), or
// the error of a failed flush, which also breaks the sink.
func (s *Sink[T]) Run(ctx context.Context) error {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return err
		}
		wait := time.Hour
		if s.replaying && s.opts.OnMismatch != MismatchFail && ctx.Err() == nil {
			// A replay that came up short: processing that is not
			// byte-for-byte deterministic produced fewer rows in the
			// journaled batch's positions, and on a quiet partition no row
			// past it comes to finish it. MaxDelay after the last row, the
			// replay is finished with what is buffered, as the policy says.
			wait = s.opts.MaxDelay - time.Since(s.lastRow)
			if wait <= 0 {
				last := s.pending[0].Last
				if err := s.finishReplay(ctx); err != nil {
					s.err = err
					s.mu.Unlock()
					return err
				}
				s.settled = &last
				wait = time.Hour
			}
		} else if s.n > 0 && !s.replaying && ctx.Err() == nil {
			wait = s.opts.MaxDelay - time.Since(s.bufSince)
			if wait <= 0 {
				if err := s.flush(ctx); err != nil {
					// Sticky even when ctx ended: the batch's intent may be
					// journaled, so it must never be re-cut differently.
					s.err = err
					s.mu.Unlock()
					return err
				}
				wait = time.Hour
			}
		}
		s.mu.Unlock()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closeCh:
			return nil
		case <-s.kick:
		case <-t.C:
		}
	}
}

// Close stops Run and the batch in flight, and releases the connection.
// Buffered rows are not flushed and an insert still running is cancelled:
// neither is acknowledged, so the checkpoint that covers them cannot have
// completed, and a replay restores them (the cancelled batch with its
// journaled token, so ClickHouse keeps one copy if it landed). When the
// batch in flight had already failed and no call returned its error yet,
// Close returns it. No goroutine of the sink runs after Close returns. Close
// is safe to call more than once.
func (s *Sink[T]) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.closeCh)
	var err error
	if f := s.flight; f != nil {
		select {
		case <-f.done:
			err = s.wait() // ended before Close: its failure is news
		default:
			s.abandon() // cancelled by Close: its error says nothing
		}
	}
	s.dropConn()
	return err
}
