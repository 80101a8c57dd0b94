package main

import (
	"context"
	"errors"
	"fmt"
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
	StateDir string     // checkpoints and sink journals, unless S3 names a bucket
	S3       s3Location // see s3.go
	Logger   *slog.Logger
}

// runProcessor is the stream processor: Kafka → dedup → (events table,
// one-minute windows → org_minute table), checkpointed every second. It runs
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
	windows   *window.Operator[float64, window.StatsAcc, window.Summary]
	events    *chsink.Sink[eventRow]
	minutes   *chsink.Sink[minuteRow]
	cursor    sink.Cursor // positions for window rows, emitted by records and ticks

	out window.Output[float64, window.Summary]
	key []byte
	log *slog.Logger
}

func newChain(ctx context.Context, cfg processorConfig, storage checkpoint.Storage, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
	d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
	if err != nil {
		return nil, err
	}
	w, err := window.New(window.Tumbling(time.Minute), window.Stats{}, window.Options{
		MaxOutOfOrderness: 5 * time.Second,
		// Webhook retries arrive minutes late in event time; keep windows
		// open long enough to fold them in and re-emit with a higher version.
		AllowedLateness: 2 * time.Hour,
		IdleTimeout:     2 * time.Second,
		Inputs:          []int{p.Partition},
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
	events, err := chsink.New(ctx, chsink.Table{Addr: cfg.CHAddr, Name: "events"}, p, storage, eventSchema, sinkOpts)
	if err != nil {
		return nil, err
	}
	// Window rows closed by idleness depend on the wall clock, so a replay may
	// emit them at other positions than the first run did. org_minute is a
	// ReplacingMergeTree keyed by window, where writing a row again is
	// harmless: let the sink insert such a batch under a new token instead of
	// stopping (the events table keeps the default, which refuses).
	minuteOpts := sinkOpts
	minuteOpts.OnMismatch = chsink.MismatchReinsert
	minutes, err := chsink.New(ctx, chsink.Table{Addr: cfg.CHAddr, Name: "org_minute"}, p, storage, minuteSchema, minuteOpts)
	if err != nil {
		_ = events.Close()
		return nil, err
	}
	c := &chain{partition: p.Partition, dedup: d, windows: w, events: events, minutes: minutes, log: cfg.Logger}

	// The sinks' flush timers: a quiet stream still reaches ClickHouse. They
	// stop when the partition's ownership ends (ctx) or at Close.
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{events.Run, minutes.Run} {
		wg.Go(func() {
			if err := run(ctx); err != nil && ctx.Err() == nil {
				cfg.Logger.Warn("sink flush failed; the next checkpoint fails", "partition", p.Partition, "err", err)
			}
		})
	}
	return &kafkasource.Processor{
		Participants: map[string]checkpoint.Participant{
			"dedup": d, "window": w, "events": events, "org_minute": minutes, "cursor": &c.cursor,
		},
		Process:      c.process,
		Tick:         c.tick,
		TickInterval: 500 * time.Millisecond,
		Close: func() error {
			err := errors.Join(events.Close(), minutes.Close())
			wg.Wait()
			return err
		},
	}, nil
}

func (c *chain) process(ctx context.Context, m kafka.Message) error {
	ev, err := parseEvent(m.Value)
	if err != nil {
		return fmt.Errorf("offset %d: %w", m.Offset, err)
	}
	c.cursor.At(m.Offset)

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
	err = c.windows.Add(window.Event[float64]{Input: c.partition, Key: ev.OrgID, Time: ev.Time, Value: ev.LatencyS}, &c.out)
	if err != nil {
		return err
	}
	return c.emit(ctx)
}

// tick lets the window operator close windows of an idle partition, so the
// last minute of a quiet stream is written too.
func (c *chain) tick(ctx context.Context) error {
	c.out.Reset()
	c.windows.Tick(&c.out)
	return c.emit(ctx)
}

func (c *chain) emit(ctx context.Context) error {
	for _, late := range c.out.Late {
		// With two hours of allowed lateness none is expected. The raw event
		// is in the events table all the same, and the verification reports
		// the window that misses it.
		c.log.Error("late event missed its window", "org", late.Event.Key, "window", late.Start, "watermark", late.Watermark)
	}
	for _, row := range c.out.Rows {
		if err := c.minutes.Add(ctx, c.cursor.Next(), row); err != nil {
			return err
		}
	}
	return nil
}
