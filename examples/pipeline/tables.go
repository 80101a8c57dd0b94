package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/window"
)

// The three tables of the demo, one per stage 3 to 5 of the article:
//   - events: the deduplicated raw events, a plain MergeTree. Every sink
//     batch carries an insert_deduplication_token, so the table deduplicates
//     retried blocks (non_replicated_deduplication_window > 0).
//   - events_hourly: a rollup fed by a materialized view. A view fires on every
//     inserted block, so it counts exactly only because retried blocks are
//     dropped before it sees them (deduplicate_blocks_in_dependent_materialized_views).
//   - org_minute: one-minute windows aggregated in the stream processor,
//     written to a ReplacingMergeTree keyed by window with the emission's
//     version: writing a window again writes the same row.
var schemaDDL = []string{
	`CREATE TABLE IF NOT EXISTS %[1]s.events (
		org_id LowCardinality(String),
		source LowCardinality(String),
		event_id String,
		event_type LowCardinality(String),
		event_time DateTime64(3, 'UTC'),
		latency_s Float64
	) ENGINE = MergeTree ORDER BY (org_id, event_time, event_id)
	SETTINGS non_replicated_deduplication_window = 10000`,
	`CREATE TABLE IF NOT EXISTS %[1]s.events_hourly (
		org_id LowCardinality(String),
		hour DateTime('UTC'),
		events UInt64
	) ENGINE = SummingMergeTree ORDER BY (org_id, hour)
	SETTINGS non_replicated_deduplication_window = 10000`,
	`CREATE MATERIALIZED VIEW IF NOT EXISTS %[1]s.events_hourly_mv TO %[1]s.events_hourly AS
	SELECT org_id, toStartOfHour(event_time) AS hour, count() AS events
	FROM %[1]s.events GROUP BY org_id, hour`,
	`CREATE TABLE IF NOT EXISTS %[1]s.org_minute (
		org_id String,
		window_start DateTime64(3, 'UTC'),
		window_end DateTime64(3, 'UTC'),
		version UInt64,
		events UInt64,
		avg_latency_s Nullable(Float64),
		max_latency_s Nullable(Float64)
	) ENGINE = ReplacingMergeTree(version) ORDER BY (org_id, window_start, window_end)
	SETTINGS non_replicated_deduplication_window = 10000`,
}

func createTables(ctx context.Context, addr, db string) error {
	conn, err := ch.Dial(ctx, ch.Options{Address: addr, DialTimeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("connect to ClickHouse at %s: %w", addr, err)
	}
	defer conn.Close()
	queries := append([]string{"CREATE DATABASE IF NOT EXISTS %[1]s"}, schemaDDL...)
	for _, q := range queries {
		if err := conn.Do(ctx, ch.Query{Body: fmt.Sprintf(q, db)}); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	return nil
}

// eventRow is one row of the events table.
type eventRow = Event

func eventSchema() []chsink.Column[eventRow] {
	return []chsink.Column[eventRow]{
		chsink.LowCardinality("org_id", func(e *eventRow) string { return e.OrgID }),
		chsink.LowCardinality("source", func(e *eventRow) string { return e.Source }),
		chsink.String("event_id", func(e *eventRow) string { return e.EventID }),
		chsink.LowCardinality("event_type", func(e *eventRow) string { return e.Type }),
		chsink.DateTime64("event_time", proto.PrecisionMilli, func(e *eventRow) time.Time { return e.Time }),
		chsink.Float64("latency_s", func(e *eventRow) float64 { return e.LatencyS }),
	}
}

// minuteRow is one emission of a one-minute window.
type minuteRow = window.Row[window.Summary]

func minuteSchema() []chsink.Column[minuteRow] {
	// An average of no samples is NULL, never 0: 0 is the neutral element of
	// a sum, not of an average (the article's avgState(toFloat64(0)) bug).
	nullable := func(r *minuteRow, v float64) proto.Nullable[float64] {
		if !r.Valid {
			return proto.Null[float64]()
		}
		return proto.NewNullable(v)
	}
	return []chsink.Column[minuteRow]{
		chsink.String("org_id", func(r *minuteRow) string { return r.Key }),
		chsink.DateTime64("window_start", proto.PrecisionMilli, func(r *minuteRow) time.Time { return r.Start }),
		chsink.DateTime64("window_end", proto.PrecisionMilli, func(r *minuteRow) time.Time { return r.End }),
		chsink.UInt64("version", func(r *minuteRow) uint64 { return r.Version }),
		chsink.UInt64("events", func(r *minuteRow) uint64 { return r.Result.Count }),
		chsink.Nullable("avg_latency_s", new(proto.ColFloat64), func(r *minuteRow) proto.Nullable[float64] {
			return nullable(r, r.Result.Avg)
		}),
		chsink.Nullable("max_latency_s", new(proto.ColFloat64), func(r *minuteRow) proto.Nullable[float64] {
			return nullable(r, r.Result.Max)
		}),
	}
}
