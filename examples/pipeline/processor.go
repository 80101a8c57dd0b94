package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/window"
)

// processorConfig is what the stream processor needs to know; the supervisor
// passes it on the command line of the child process.
type processorConfig struct {
	Brokers  []string
	Topic    string
	Group    string
	CHAddr   string
	Database string
	DLQ      string     // dead-letter topic of poison records
	StateDir string     // checkpoints and sink journals, unless S3 names a bucket
	S3       s3Location // see s3.go
	Logger   *slog.Logger
}

// runProcessor is the stream processor: Kafka → normalize → dedup →
// (normalized_events table, hourly per-employee windows →
// employee_metrics_window table), checkpointed every second. A record it
// cannot normalize goes to the dead-letter topic, once. It runs
// until ctx ends or a chain fails; the supervisor restarts it after a failure
// or a kill -9, and it resumes from its last checkpoint.
func runProcessor(ctx context.Context, cfg processorConfig) error {
	storage, err := processorStorage(cfg)
	if err != nil {
		return err
	}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Logger: cfg.Logger})
	if err != nil {
		return err
	}
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Second, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	defer coord.Close()

	newChain := func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		return newChain(ctx, cfg, storage, p)
	}
	src, err := kafkasource.New(
		kafkasource.Group{Brokers: cfg.Brokers, ID: cfg.Group, Topics: []string{cfg.Topic}},
		coord, newChain,
		kafkasource.Options{
			SessionTimeout:    6 * time.Second,
			RebalanceTimeout:  3 * time.Second,
			HeartbeatInterval: 200 * time.Millisecond,
			MaxWait:           100 * time.Millisecond,
			Logger:            cfg.Logger,
		})
	if err != nil {
		return err
	}
	return src.Run(ctx)
}

// chain is the processing of one Kafka partition. Everything it remembers is
// in its participants, so the partition can restart or move with its
// checkpoint.
type chain struct {
	partition int
	dedup     *dedup.Deduplicator
	windows   *window.Operator[Event, employeeMetrics, employeeMetrics]
	events    *chsink.Sink[Event]
	metrics   *chsink.Sink[windowRow]
	cursor    sink.Cursor // positions for window rows, emitted by records and ticks

	out window.Output[Event, employeeMetrics]
	key []byte
	log *slog.Logger
}

func newChain(ctx context.Context, cfg processorConfig, storage checkpoint.Storage, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
	d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
	if err != nil {
		return nil, err
	}
	w, err := window.New(window.Tumbling(time.Hour), metricsAgg{}, window.Options{
		MaxOutOfOrderness: 5 * time.Second,
		// Retries and redeliveries arrive hours late in event time (the
		// demo compresses hours into seconds); keep windows open long enough
		// to fold them in and re-emit with a higher version.
		AllowedLateness: 12 * time.Hour,
		IdleTimeout:     2 * time.Second,
		Inputs:          []int{p.Partition},
		// The hourly dashboard shows the current hour as it fills: a partial
		// row every earlyEvery events of a window, Version = events so far,
		// which the final row replaces (the table is ReplacingMergeTree by
		// version, read with FINAL). Every rather than Interval: these rows
		// depend on the input only, so a replay after a kill writes the
		// same rows at the same positions. (A real deployment, whose hours
		// last an hour, would add Interval: a few minutes, which the metrics
		// sink's MismatchReinsert already allows for.)
		Early: window.EarlyFiring{Every: earlyEvery},
	})
	if err != nil {
		return nil, err
	}
	sinkOpts := chsink.Options{
		Database:   cfg.Database,
		MaxDelay:   200 * time.Millisecond,
		MaxRetries: 4,
		Logger:     cfg.Logger,
	}
	events, err := chsink.New(ctx, chsink.Table{Addr: cfg.CHAddr, Name: "normalized_events"}, p, storage, eventSchema, sinkOpts)
	if err != nil {
		return nil, err
	}
	// Window rows closed by idleness depend on the wall clock, so a replay may
	// emit them at other positions than the first run did.
	// employee_metrics_window is a ReplacingMergeTree keyed by window, where
	// writing a row again is harmless: let the sink insert such a batch under
	// a new token instead of stopping (normalized_events keeps the default,
	// which refuses: its views count what it receives).
	metricsOpts := sinkOpts
	metricsOpts.OnMismatch = chsink.MismatchReinsert
	metrics, err := chsink.New(ctx, chsink.Table{Addr: cfg.CHAddr, Name: "employee_metrics_window"}, p, storage, windowSchema, metricsOpts)
	if err != nil {
		_ = events.Close()
		return nil, err
	}
	c := &chain{partition: p.Partition, dedup: d, windows: w, events: events, metrics: metrics, log: cfg.Logger}

	// The sinks' flush timers: a quiet stream still reaches ClickHouse. They
	// stop when the partition's ownership ends (ctx) or at Close.
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{events.Run, metrics.Run} {
		wg.Go(func() {
			if err := run(ctx); err != nil && ctx.Err() == nil {
				cfg.Logger.Warn("sink flush failed; the next checkpoint fails", "partition", p.Partition, "err", err)
			}
		})
	}
	return &kafkasource.Processor{
		Participants: map[string]checkpoint.Participant{
			"dedup": d, "window": w, "events": events, "metrics": metrics, "cursor": &c.cursor,
		},
		Process:      c.process,
		Tick:         c.tick,
		TickInterval: 500 * time.Millisecond,
		// A record that cannot be normalized (the gateway rejects those, so
		// it came from elsewhere) goes to the dead-letter topic, once, and
		// the partition goes on.
		DeadLetter: &kafkasource.DeadLetter{Topic: cfg.DLQ},
		Close: func() error {
			err := errors.Join(events.Close(), metrics.Close())
			wg.Wait()
			return err
		},
	}, nil
}

// earlyEvery is the demo's early-firing period in events: a window holds
// about ten events (3000 over 4 hours of 72 employees), so most hours show
// a partial row or more before they close.
const earlyEvery = 3

func (c *chain) process(ctx context.Context, m kafka.Message) error {
	c.cursor.At(m.Offset)
	ev, err := decode(m)
	if errors.Is(err, errNotCounted) {
		return nil // a valid event the metrics do not count: nothing to do
	}
	if err != nil {
		return kafkasource.Poison(err)
	}

	// Stage 2: drop what the gateway let through twice (a lost Kafka ack, a
	// gateway restart, a provider's late redelivery).
	c.key = dedup.AppendKey(c.key[:0], ev.OrgID, ev.Source, ev.EventID)
	first, err := c.dedup.Observe(c.key, ev.Time)
	if err != nil || !first {
		return err
	}
	if err := c.events.Add(ctx, sink.Position{Offset: m.Offset}, ev); err != nil {
		return err
	}
	c.out.Reset()
	err = c.windows.Add(window.Event[Event]{Input: c.partition, Key: windowKey(ev), Time: ev.Time, Value: ev}, &c.out)
	if err != nil {
		return err
	}
	return c.emit(ctx)
}

// tick lets the window operator close windows of an idle partition, so the
// last hour of a quiet stream is written too.
func (c *chain) tick(ctx context.Context) error {
	c.out.Reset()
	c.windows.Tick(&c.out)
	return c.emit(ctx)
}

func (c *chain) emit(ctx context.Context) error {
	for _, late := range c.out.Late {
		// With twelve hours of allowed lateness none is expected. The event
		// is in normalized_events all the same, and the verification reports
		// the window that misses it.
		c.log.Error("late event missed its window", "key", late.Event.Key, "window", late.Start, "watermark", late.Watermark)
	}
	for _, row := range c.out.Rows {
		if err := c.metrics.Add(ctx, c.cursor.Next(), row); err != nil {
			return err
		}
	}
	return nil
}
