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
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/window"
)

// This file is the processing chain; main.go is the service around it.
// Swap newChain (and tableDDL) for your own chain: main.go only needs a
// kafkasource.NewProcessor.

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
	SETTINGS non_replicated_deduplication_window = 10000`,
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
	ClickHouse chsink.Table // Addr; Name is set per table
	Sink       chsink.Options
	Storage    checkpoint.Storage
	Logger     *slog.Logger
}

// newChain builds one partition's chain: dedup by delivery id → events;
// one-minute counts per tenant → tenant_minute. The Source runs the
// sinks' flush timers and closes every participant when the chain ends.
func newChain(cfg chainConfig) kafkasource.NewProcessor {
	return func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc := &kafkasource.Processor{Participants: map[string]checkpoint.Participant{}}
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
		if err != nil {
			return proc, err
		}
		proc.Participants["dedup"] = d
		w, err := window.New(window.Tumbling(time.Minute), window.Count[string]{}, window.Options{
			Inputs: []int{p.Partition}, MaxOutOfOrderness: 5 * time.Second, IdleTimeout: 2 * time.Second,
		})
		if err != nil {
			return proc, err
		}
		proc.Participants["window"] = w
		table := cfg.ClickHouse
		table.Name = "events"
		events, err := chsink.New(ctx, table, p, cfg.Storage, eventSchema, cfg.Sink)
		if err != nil {
			return proc, err
		}
		proc.Participants["events"] = events
		table.Name = "tenant_minute"
		minuteOpts := cfg.Sink
		minuteOpts.OnMismatch = chsink.MismatchReinsert // windows closed by a tick may move on replay
		minutes, err := chsink.New(ctx, table, p, cfg.Storage, minuteSchema, minuteOpts)
		if err != nil {
			return proc, err
		}
		proc.Participants["tenant_minute"] = minutes
		cursor := new(sink.Cursor)
		proc.Participants["cursor"] = cursor

		var out window.Output[string, uint64]
		var key []byte
		emit := func(ctx context.Context) error {
			for _, late := range out.Late {
				cfg.Logger.Warn("late event missed its window", "tenant", late.Event.Key, "window", late.Start)
			}
			for _, r := range out.Rows {
				if err := minutes.Add(ctx, cursor.Next(), r); err != nil {
					return err
				}
			}
			return nil
		}
		proc.Process = func(ctx context.Context, m kafka.Message) error {
			md, err := kafkapub.ReadMetadata(m)
			if err != nil {
				return fmt.Errorf("offset %d: %w", m.Offset, err) // stop, never skip
			}
			ev := event{Tenant: string(m.Key), Source: md.Source, ID: md.EventID, Type: md.EventType, At: m.Time.UTC()}
			cursor.At(m.Offset)
			key = dedup.AppendKey(key[:0], ev.Source, ev.ID)
			if first, err := d.Observe(key, ev.At); err != nil || !first {
				return err
			}
			if err := events.Add(ctx, sink.Position{Offset: m.Offset}, ev); err != nil {
				return err
			}
			out.Reset()
			if err := w.Add(window.Event[string]{Input: p.Partition, Key: ev.Tenant, Time: ev.At, Value: ev.ID}, &out); err != nil {
				return err
			}
			return emit(ctx)
		}
		proc.Tick = func(ctx context.Context) error {
			out.Reset()
			w.Tick(&out)
			return emit(ctx)
		}
		proc.TickInterval = 500 * time.Millisecond
		return proc, nil
	}
}
