package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/window"
)

// This file is the processing chain; main.go is the service around it.
// Swap newChain (and tableDDL) for your own chain: main.go only needs a
// kafkasource.BuildChain.

// tableDDL creates the chain's tables in database %[1]s: every event once,
// and the events per tenant and minute (keyed by window and versioned, so a
// window written again replaces itself).
var tableDDL = []string{
	`CREATE TABLE IF NOT EXISTS %[1]s.events (
		tenant LowCardinality(String),
		source LowCardinality(String),
		event_id String,
		event_type LowCardinality(String),
		at DateTime64(3, 'UTC')
	) ENGINE = MergeTree ORDER BY (tenant, at, event_id)
	SETTINGS non_replicated_deduplication_window = 10000, enable_block_number_column = 1`,
	`CREATE TABLE IF NOT EXISTS %[1]s.tenant_minute (
		tenant String,
		start DateTime64(3, 'UTC'),
		version UInt64,
		events UInt64
	) ENGINE = ReplacingMergeTree(version) ORDER BY (tenant, start)
	SETTINGS non_replicated_deduplication_window = 10000`,
}

func createTables(ctx context.Context, opts ch.Options, database string) error {
	c, err := ch.Dial(ctx, opts)
	if err != nil {
		return fmt.Errorf("connect to ClickHouse at %s: %w", opts.Address, err)
	}
	defer c.Close()
	for _, q := range append([]string{"CREATE DATABASE IF NOT EXISTS %[1]s"}, tableDDL...) {
		if err := c.Do(ctx, ch.Query{Body: fmt.Sprintf(q, database)}); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	return nil
}

// event is one delivery as the gateway published it: the tenant is the
// message key (kafkapub keys by the provider's tenant), the time is the
// record's Kafka timestamp, so a replay sees the same time.
type event struct {
	Tenant, Source, ID, Type string
	At                       time.Time
}

func eventSchema() []chsink.Column[event] {
	return []chsink.Column[event]{
		chsink.LowCardinality("tenant", func(e *event) string { return e.Tenant }),
		chsink.LowCardinality("source", func(e *event) string { return e.Source }),
		chsink.String("event_id", func(e *event) string { return e.ID }),
		chsink.LowCardinality("event_type", func(e *event) string { return e.Type }),
		chsink.DateTime64("at", proto.PrecisionMilli, func(e *event) time.Time { return e.At }),
	}
}

type minuteRow = window.Row[uint64]

func minuteSchema() []chsink.Column[minuteRow] {
	return []chsink.Column[minuteRow]{
		chsink.String("tenant", func(r *minuteRow) string { return r.Key }),
		chsink.DateTime64("start", proto.PrecisionMilli, func(r *minuteRow) time.Time { return r.Start }),
		chsink.UInt64("version", func(r *minuteRow) uint64 { return r.Version }),
		chsink.UInt64("events", func(r *minuteRow) uint64 { return r.Result }),
	}
}

// chainConfig is what newChain needs from the service.
type chainConfig struct {
	ClickHouse chsink.DB      // the server and database of the tables
	Sink       chsink.Options // every sink's; Database and KeepCheckpoints zero
	Logger     *slog.Logger
	// PerRecord hands the chain one record at a time (Process) instead of
	// each fetched batch (ProcessBatch). Both give the same checkpoints and
	// rows (TestBatchEqualsPerRecord); the per-record code is the simpler
	// one to read, the batch path the faster (BENCHMARKS.md).
	PerRecord bool
}

// newChain builds one partition's chain: dedup by delivery id → events;
// one-minute counts per tenant → tenant_minute. The Source runs the
// sinks' flush timers and closes every participant when the chain ends.
// The participants' names key their state in every checkpoint: dedup,
// window, cursor, and the sinks under their tables' names, as since the
// first version of the processor (TestUpgradeRestoresHandWiredCheckpoint).
func newChain(cfg chainConfig) kafkasource.BuildChain {
	return func(ctx context.Context, parts *checkpoint.Chain) (*kafkasource.Processor, error) {
		c := &chain{input: parts.Partition().Partition, log: cfg.Logger}
		var err error
		// Incremental: a checkpoint writes the keys added since the last one,
		// not the whole table (a day of keys at the TTL). Measured in
		// BenchmarkEndToEnd: see BENCHMARKS.md.
		if c.dedup, err = dedup.New(dedup.DefaultTTL, dedup.Options{Incremental: true}); err != nil {
			return nil, err
		}
		if err := parts.Add("dedup", c.dedup); err != nil {
			return nil, err
		}
		c.window, err = window.New(window.Tumbling(time.Minute), window.Count[string]{}, window.Options{
			Inputs: []int{c.input}, MaxOutOfOrderness: 5 * time.Second, IdleTimeout: 2 * time.Second,
		})
		if err != nil {
			return nil, err
		}
		if err := parts.Add("window", c.window); err != nil {
			return nil, err
		}
		if c.events, err = chsink.Open(ctx, parts, cfg.ClickHouse, "events", eventSchema, cfg.Sink); err != nil {
			return nil, err
		}
		minuteOpts := cfg.Sink
		minuteOpts.OnMismatch = chsink.MismatchReinsert // windows closed by a tick may move on replay
		if c.minutes, err = chsink.Open(ctx, parts, cfg.ClickHouse, "tenant_minute", minuteSchema, minuteOpts); err != nil {
			return nil, err
		}
		if err := parts.Add("cursor", &c.cursor); err != nil {
			return nil, err
		}
		proc := &kafkasource.Processor{Tick: c.tick, TickInterval: 500 * time.Millisecond}
		if cfg.PerRecord {
			proc.Process = c.process
		} else {
			proc.ProcessBatch = c.processBatch
		}
		return proc, nil
	}
}

// chain is one partition's operators, and the buffers the batch path reuses
// from one batch to the next, so a batch allocates nothing but the events'
// ids (see eventDecoder).
type chain struct {
	input   int // the partition: the window operator's input
	log     *slog.Logger
	dec     eventDecoder
	dedup   *dedup.Deduplicator
	window  *window.Operator[string, uint64, uint64]
	events  *chsink.Sink[event]
	minutes *chsink.Sink[minuteRow]
	cursor  sink.Cursor // positions of the window's rows
	out     window.Output[string, uint64]
	key     []byte

	evs       []event
	keys      []byte // the batch's dedup keys, one after the other
	keyEnds   []int
	sightings []dedup.Sighting
	first     []bool
	kept      []event // first sights, for the events table
	keptPos   []sink.Position
	keptAt    []int // index in the batch of each kept event
	rows      []minuteRow
	rowPos    []sink.Position
	rowAt     []int
}

// process is the chain of one record: decode, dedup, the events table, the
// window and its rows.
func (c *chain) process(ctx context.Context, m kafka.Message) error {
	var ev event
	if err := c.dec.decode(&m, &ev); err != nil {
		return kafkasource.Poison(err) // stops the chain at this offset, or to the dead-letter topic
	}
	c.cursor.At(m.Offset)
	c.key = dedup.AppendKey(c.key[:0], ev.Source, ev.ID)
	// ev.At is the record's timestamp (decode), the time package dedup
	// asks for.
	if first, err := c.dedup.Observe(c.key, ev.At); err != nil || !first {
		return err
	}
	if err := c.events.Add(ctx, sink.Position{Offset: m.Offset}, ev); err != nil {
		return err
	}
	c.out.Reset()
	if err := c.window.Add(window.Event[string]{Input: c.input, Key: ev.Tenant, Time: ev.At, Value: ev.ID}, &c.out); err != nil {
		return err
	}
	return c.emit(ctx)
}

// processBatch is process for consecutive records: it decodes them all,
// decides them in one dedup.ObserveBatch (whose table lookups overlap), runs
// the window over the first sights in order, and hands each sink its rows
// in one AddBatch. The positions, state and rows are those of one process
// call per record. It returns how many records it handled; when fewer than
// len(ms), the error is about the next one.
func (c *chain) processBatch(ctx context.Context, ms []kafka.Message) (int, error) {
	n, stop := len(ms), error(nil)
	c.evs, c.keys, c.keyEnds = c.evs[:0], c.keys[:0], c.keyEnds[:0]
	for i := range ms {
		var ev event
		if err := c.dec.decode(&ms[i], &ev); err != nil {
			n, stop = i, kafkasource.Poison(err)
			break
		}
		c.evs = append(c.evs, ev)
		c.keys = dedup.AppendKey(c.keys, ev.Source, ev.ID)
		c.keyEnds = append(c.keyEnds, len(c.keys))
	}
	c.sightings = c.sightings[:0]
	for i, from := 0, 0; i < n; i++ { // keys sliced once c.keys stopped growing
		c.sightings = append(c.sightings, dedup.Sighting{Key: c.keys[from:c.keyEnds[i]], Time: c.evs[i].At})
		from = c.keyEnds[i]
	}
	var err error
	if c.first, err = c.dedup.ObserveBatch(c.sightings, c.first[:0]); err != nil {
		n, stop = len(c.first), err // the sightings before it are decided
	}

	c.kept, c.keptPos, c.keptAt = c.kept[:0], c.keptPos[:0], c.keptAt[:0]
	c.rows, c.rowPos, c.rowAt = c.rows[:0], c.rowPos[:0], c.rowAt[:0]
	for i := range n {
		c.cursor.At(ms[i].Offset)
		if !c.first[i] {
			continue
		}
		ev := &c.evs[i]
		c.kept, c.keptPos, c.keptAt = append(c.kept, *ev), append(c.keptPos, sink.Position{Offset: ms[i].Offset}), append(c.keptAt, i)
		c.out.Reset()
		if err := c.window.Add(window.Event[string]{Input: c.input, Key: ev.Tenant, Time: ev.At, Value: ev.ID}, &c.out); err != nil {
			n, stop = i, err
			break
		}
		c.warnLate()
		for _, r := range c.out.Rows {
			c.rows, c.rowPos, c.rowAt = append(c.rows, r), append(c.rowPos, c.cursor.Next()), append(c.rowAt, i)
		}
	}
	if k, err := c.events.AddBatch(ctx, c.keptPos, c.kept); err != nil {
		return c.keptAt[k], err
	}
	if k, err := c.minutes.AddBatch(ctx, c.rowPos, c.rows); err != nil {
		return c.rowAt[k], err
	}
	return n, stop
}

// tick closes the windows that processing time closes (an idle partition).
func (c *chain) tick(ctx context.Context) error {
	c.out.Reset()
	c.window.Tick(&c.out)
	return c.emit(ctx)
}

// emit writes the window's output: its rows to tenant_minute, a warning
// for each late event.
func (c *chain) emit(ctx context.Context) error {
	c.warnLate()
	for _, r := range c.out.Rows {
		if err := c.minutes.Add(ctx, c.cursor.Next(), r); err != nil {
			return err
		}
	}
	return nil
}

func (c *chain) warnLate() {
	for _, late := range c.out.Late {
		c.log.Warn("late event missed its window", "tenant", late.Event.Key, "window", late.Start)
	}
}
