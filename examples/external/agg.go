// Package webhookagg is what a user of the SDK writes in a module of their
// own: a processor that counts GitHub webhook deliveries per organisation
// and minute, exactly once, into ClickHouse. Its test (agg_test.go) starts
// every server with the public test kit and runs the gateway and this
// processor end to end. It imports only public packages of the SDK; the
// SDK's repository runs its test (testkit/external_test.go) so that a
// change to the public API that breaks it is caught there.
package webhookagg

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/window"
)

// DDL creates the two tables in database %[1]s: every event once, and one
// row per organisation and minute (a ReplacingMergeTree keyed by window, so
// a window written again after a restart replaces itself).
var DDL = []string{
	`CREATE TABLE %[1]s.events (org String, id String, at DateTime64(3, 'UTC'))
	ENGINE = MergeTree ORDER BY (org, at, id)
	SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`,
	`CREATE TABLE %[1]s.org_minute (org String, start DateTime64(3, 'UTC'), version UInt64, events UInt64)
	ENGINE = ReplacingMergeTree(version) ORDER BY (org, start)
	SETTINGS non_replicated_deduplication_window = 1000`,
}

// Event is what the processor keeps of a GitHub push delivery.
type Event struct {
	Org string    // organization.login
	At  time.Time // head_commit.timestamp
	ID  string    // the delivery id, from the event-id header
}

// parseEvent reads the fields of a GitHub push payload the processor uses.
func parseEvent(m kafka.Message) (Event, error) {
	var p struct {
		Organization struct{ Login string } `json:"organization"`
		HeadCommit   struct {
			Timestamp time.Time `json:"timestamp"`
		} `json:"head_commit"`
	}
	if err := json.Unmarshal(m.Value, &p); err != nil {
		return Event{}, fmt.Errorf("offset %d: %w", m.Offset, err)
	}
	md, err := kafkapub.ReadMetadata(m)
	if err != nil {
		return Event{}, fmt.Errorf("offset %d: %w", m.Offset, err)
	}
	return Event{Org: p.Organization.Login, At: p.HeadCommit.Timestamp, ID: md.EventID}, nil
}

type minuteRow = window.Row[uint64]

func eventSchema() []chsink.Column[Event] {
	return []chsink.Column[Event]{
		chsink.String("org", func(e *Event) string { return e.Org }),
		chsink.String("id", func(e *Event) string { return e.ID }),
		chsink.DateTime64("at", proto.PrecisionMilli, func(e *Event) time.Time { return e.At }),
	}
}

// minuteSchema maps a window row to org_minute's columns; windowsink adds
// the version.
func minuteSchema() []chsink.Column[minuteRow] {
	return []chsink.Column[minuteRow]{
		chsink.String("org", func(r *minuteRow) string { return r.Key }),
		chsink.DateTime64("start", proto.PrecisionMilli, func(r *minuteRow) time.Time { return r.Start }),
		chsink.UInt64("events", func(r *minuteRow) uint64 { return r.Result }),
	}
}

// Config says where the processor writes.
type Config struct {
	ClickHouse string // host:port
	Database   string
	Storage    checkpoint.Storage // checkpoints and sink journals
}

// NewProcessor builds one partition's chain (the gateway's kafkapub keys
// messages by organization, so one chain holds all windows of one): dedup by delivery id, the
// events sink, a one-minute count per organisation and its sink. The
// Source runs the sinks' flush timers and closes everything when the
// chain ends.
func NewProcessor(cfg Config) kafkasource.NewProcessor {
	return func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc := &kafkasource.Processor{Participants: map[string]checkpoint.Participant{}}
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
		if err != nil {
			return proc, err
		}
		proc.Participants["dedup"] = d
		opts := chsink.Options{Database: cfg.Database, MaxDelay: 100 * time.Millisecond}
		events, err := chsink.New(ctx, chsink.Table{Addr: cfg.ClickHouse, Name: "events"}, p, cfg.Storage, eventSchema, opts)
		if err != nil {
			return proc, err // the Source closes dedup
		}
		proc.Participants["events"] = events
		w, err := window.New(window.Tumbling(time.Minute), window.Count[string]{}, window.Options{
			Inputs: []int{p.Partition}, IdleTimeout: 200 * time.Millisecond,
		})
		if err != nil {
			return proc, err
		}
		// The window's rows, their positions, Tick's rows and the replay
		// policy in one participant.
		minutes, err := windowsink.New(ctx, chsink.Table{Addr: cfg.ClickHouse, Name: "org_minute"}, p, cfg.Storage, w, minuteSchema,
			windowsink.Options{Sink: opts})
		if err != nil {
			return proc, err // the Source closes events too
		}
		proc.Participants["org_minute"] = minutes

		var key []byte
		proc.Process = func(ctx context.Context, m kafka.Message) error {
			ev, err := parseEvent(m)
			if err != nil {
				return err // stop, never skip
			}
			key = dedup.AppendKey(key[:0], ev.Org, ev.ID)
			if first, err := d.Observe(key, m.Time); err != nil || !first { // the record's timestamp: see package dedup
				return err
			}
			if err := events.Add(ctx, sink.Position{Offset: m.Offset}, ev); err != nil {
				return err
			}
			return minutes.Add(ctx, m.Offset, window.Event[string]{Input: p.Partition, Key: ev.Org, Time: ev.At, Value: ev.ID})
		}
		proc.Tick = minutes.Tick
		proc.TickInterval = 100 * time.Millisecond
		return proc, nil
	}
}
