package devmetrics

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/window"
)

// DefaultEarlyEvery is Config.EarlyEvery's default: a partial row of an
// hour every 3 events. The demo's hours hold about ten events each, so most
// show a partial row before they close.
const DefaultEarlyEvery = 3

// Config is what BuildChain needs. ClickHouse.Addr is required; the zero
// value of every other field is valid.
type Config struct {
	// ClickHouse is the server and database of the chain's tables.
	ClickHouse chsink.DB
	// Sink configures every sink (Client, User, MaxDelay, ...); leave
	// Database and KeepCheckpoints zero (ClickHouse and the chain give
	// them). OnMismatch and ParticipantName are set per table: see
	// BuildChain.
	Sink chsink.Options
	// DeadLetterTopic receives the records Decode cannot normalize, once
	// each, and the partition goes on. Empty: such a record stops the
	// chain with a *kafkasource.PoisonError.
	DeadLetterTopic string
	// DeadLetterTransport reaches the dead-letter topic's brokers (TLS,
	// SASL). Default: kafka-go's DefaultTransport.
	DeadLetterTransport kafka.RoundTripper
	// EarlyEvery is how many events of an hour's window trigger a partial
	// row of it (window.EarlyFiring.Every). Default DefaultEarlyEvery.
	EarlyEvery uint64
	// Logger receives late events and sink warnings. Default: discards.
	Logger *slog.Logger
	// Naive: NaiveSink adds the naive buffering sink beside the correct
	// ones, writing every event the chain counts to naive_sink_events;
	// NaiveMV a sink to naive_mv_events that inserts without
	// deduplicate_blocks_in_dependent_materialized_views (create their
	// tables with NaiveDDL). Other joints change nothing here. Default:
	// none.
	Naive []Naive
	// Audit counts every record read, first seen and duplicate per
	// organisation and minute of event time into the audit table
	// (package audit; create it with chaudit.CreateTable), exactly once.
	Audit bool
	// Now is the window operator's processing clock (window.Options.Now):
	// idleness and early firings by time. Default time.Now.
	Now func() time.Time
}

// BuildChain returns the chain of one partition, for kafkasource.Chains:
// Decode → dedup by organisation, source and delivery id →
// normalized_events, and hourly per-employee windows with early firings →
// employee_metrics_window. The kafkasource.Source runs the sinks' flush
// timers and closes every participant when the chain ends.
//
// normalized_events refuses a replayed batch whose rows differ from the
// journal's (chsink's default): its views count what it receives.
// employee_metrics_window takes chsink.MismatchReinsert: a window closed by
// a Tick (idleness, the wall clock) may be emitted at another position on
// replay, and writing a window's row again is harmless in a
// ReplacingMergeTree keyed by window.
//
// The participants' names, the keys of their state in every checkpoint,
// are those of the first versions of this chain: dedup, window, cursor,
// events (normalized_events), metrics (employee_metrics_window), and with
// the options that add them naive_mv, audit (the counter) and
// audit_counts (its sink).
func BuildChain(cfg Config) kafkasource.BuildChain {
	if cfg.EarlyEvery == 0 {
		cfg.EarlyEvery = DefaultEarlyEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, parts *checkpoint.Chain) (*kafkasource.Processor, error) {
		p := parts.Partition()
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
		if err != nil {
			return nil, err
		}
		if err := parts.Add("dedup", d); err != nil {
			return nil, err
		}
		w, err := window.New(window.Tumbling(time.Hour), Agg{}, window.Options{
			MaxOutOfOrderness: 5 * time.Second,
			// Retries and redeliveries arrive hours late in event time (the
			// demo compresses hours into seconds); keep windows open long
			// enough to fold them in and re-emit with a higher version.
			AllowedLateness: 12 * time.Hour,
			IdleTimeout:     2 * time.Second,
			Inputs:          []int{p.Partition},
			// The hourly dashboard shows the current hour as it fills: a
			// partial row every EarlyEvery events of a window, Version =
			// events so far, which the final row replaces (the table is
			// ReplacingMergeTree by version, read with FINAL). Every
			// rather than Interval: these rows depend on the input only, so
			// a replay after a kill writes the same rows at the same
			// positions. (A deployment whose hours last an hour would add
			// Interval: a few minutes, which MismatchReinsert allows for.)
			Early: window.EarlyFiring{Every: cfg.EarlyEvery},
			Now:   cfg.Now,
		})
		if err != nil {
			return nil, err
		}
		if err := parts.Add("window", w); err != nil {
			return nil, err
		}
		// The hourly rollup, a plain MergeTree view target, is told by its
		// rows after a server restart: every row carries org_id, and one
		// organisation's events all go to one partition (PartitionKey), so
		// no other partition's insert writes the same rows there.
		eventsOpts := cfg.Sink
		eventsOpts.DistinctViewRows = true
		eventsOpts.ParticipantName = "events"
		events, err := chsink.Open(ctx, parts, cfg.ClickHouse, "normalized_events", EventSchema, eventsOpts)
		if err != nil {
			return nil, err
		}
		metricsOpts := cfg.Sink
		metricsOpts.OnMismatch = chsink.MismatchReinsert
		metricsOpts.ParticipantName = "metrics"
		metrics, err := chsink.Open(ctx, parts, cfg.ClickHouse, "employee_metrics_window", WindowSchema, metricsOpts)
		if err != nil {
			return nil, err
		}
		c := &chain{partition: p.Partition, dedup: d, windows: w, events: events, metrics: metrics, log: cfg.Logger}
		database := cfg.ClickHouse.Database
		if database == "" {
			database = "default"
		}
		client := cfg.Sink.Client
		if cfg.Sink.User != "" {
			client.User, client.Password = cfg.Sink.User, cfg.Sink.Password
		}
		if slices.Contains(cfg.Naive, NaiveSink) {
			c.naive = &naiveSink{addr: cfg.ClickHouse.Addr, database: database, client: client, log: cfg.Logger}
		}
		if slices.Contains(cfg.Naive, NaiveMV) {
			c.naiveView = &naiveViewSink{addr: cfg.ClickHouse.Addr, database: database, client: client, partition: p.Partition}
			if err := parts.Add("naive_mv", c.naiveView); err != nil {
				return nil, err
			}
		}
		if cfg.Audit {
			if c.audit, err = newChainAudit(ctx, cfg, parts); err != nil {
				return nil, err
			}
		}
		if err := parts.Add("cursor", &c.cursor); err != nil {
			return nil, err
		}
		proc := &kafkasource.Processor{Process: c.process, Tick: c.tick, TickInterval: 500 * time.Millisecond}
		if cfg.DeadLetterTopic != "" {
			proc.DeadLetter = &kafkasource.DeadLetter{Topic: cfg.DeadLetterTopic, Transport: cfg.DeadLetterTransport}
		}
		return proc, nil
	}
}

// chain is the processing of one Kafka partition. Everything it remembers is
// in its participants, so the partition can restart or move with its
// checkpoint.
type chain struct {
	partition int
	dedup     *dedup.Deduplicator
	windows   *window.Operator[Event, Metrics, Metrics]
	events    *chsink.Sink[Event]
	metrics   *chsink.Sink[WindowRow]
	cursor    sink.Cursor // positions for window rows, emitted by records and ticks

	out       window.Output[Event, Metrics]
	key       []byte
	log       *slog.Logger
	naive     *naiveSink     // nil unless Config.Naive is NaiveSink
	naiveView *naiveViewSink // nil unless Config.Naive is NaiveMV
	audit     *chainAudit    // nil unless Config.Audit
}

func (c *chain) process(ctx context.Context, m kafka.Message) error {
	c.cursor.At(m.Offset)
	ev, err := Decode(m)
	if errors.Is(err, ErrNotCounted) {
		return nil // a valid event the metrics do not count: nothing to do
	}
	if err != nil {
		return kafkasource.Poison(err)
	}
	// Drop what the gateway let through twice (a lost Kafka ack, a gateway
	// restart, a provider's late redelivery). The key's time is the
	// record's timestamp, not the event's (package dedup says why: an old
	// event redelivered would expire as soon as newer events move the
	// clock past its own time, and its duplicates would pass).
	c.key = dedup.AppendKey(c.key[:0], ev.OrgID, ev.Source, ev.EventID)
	first, err := c.dedup.Observe(c.key, m.Time)
	if err != nil {
		return err
	}
	c.audit.count(m.Offset, ev, first)
	if !first {
		return nil
	}
	if err := c.events.Add(ctx, sink.Position{Offset: m.Offset}, ev); err != nil {
		return err
	}
	c.audit.sunk("normalized_events", ev)
	if c.naive != nil {
		c.naive.add(ctx, ev)
	}
	if c.naiveView != nil {
		if err := c.naiveView.add(ctx, m.Offset, ev); err != nil {
			return err
		}
	}
	c.out.Reset()
	err = c.windows.Add(window.Event[Event]{Input: c.partition, Key: WindowKey(ev), Time: ev.Time, Value: ev}, &c.out)
	if err != nil {
		return err
	}
	return c.emit(ctx)
}

// tick lets the window operator close windows of an idle partition, so the
// last hour of a quiet stream is written too.
func (c *chain) tick(ctx context.Context) error {
	if err := c.audit.flush(ctx); err != nil {
		return err
	}
	if c.naiveView != nil {
		if err := c.naiveView.tick(ctx); err != nil {
			return err
		}
	}
	c.out.Reset()
	c.windows.Tick(&c.out)
	return c.emit(ctx)
}

func (c *chain) emit(ctx context.Context) error {
	for _, late := range c.out.Late {
		// With twelve hours of allowed lateness none is expected. The event
		// is in normalized_events all the same, and the demo's verdict
		// reports the window that misses it.
		c.log.Error("late event missed its window", "key", late.Event.Key, "window", late.Start, "watermark", late.Watermark)
	}
	for _, row := range c.out.Rows {
		if err := c.metrics.Add(ctx, c.cursor.Next(), row); err != nil {
			return err
		}
	}
	return nil
}
