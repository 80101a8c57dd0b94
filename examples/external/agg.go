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
	"log/slog"
	"os"
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

// Service is where the aggregator reads and writes, as its main would
// take it from flags.
type Service struct {
	Brokers []string
	Group   string // the Kafka consumer group of all instances
	Topic   string // the gateway's
	DB      chsink.DB
	Dir     string // checkpoints and sink journals: a disk all instances share
}

// Run runs one instance of the aggregator until ctx ends: what its main
// calls. After a crash, the next instance goes on from the checkpoints in
// Dir, the rows in ClickHouse exactly once.
func Run(ctx context.Context, s Service) error {
	storage, err := checkpoint.NewFSStorage(s.Dir)
	if err != nil {
		return err
	}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 100 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	defer coord.Close()
	src, err := kafkasource.New(kafkasource.Group{Brokers: s.Brokers, ID: s.Group, Topics: []string{s.Topic}},
		coord, NewProcessor(Config{DB: s.DB, Store: store, Logger: log}),
		// Short timings, so that an instance killed is replaced in seconds
		// in the test; 6 s is the broker's least session timeout by default.
		kafkasource.Options{SessionTimeout: 6 * time.Second, RebalanceTimeout: 2 * time.Second,
			HeartbeatInterval: 100 * time.Millisecond, MaxWait: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	return src.Run(ctx)
}

// Config says where the processor writes.
type Config struct {
	DB    chsink.DB         // the ClickHouse server and database of both tables
	Store *checkpoint.Store // the Coordinator's; its Storage holds the sinks' journals too
	// Logger gets the late events, one line each, and the sinks' logs.
	// Default: discards.
	Logger *slog.Logger
}

// NewProcessor builds one partition's chain (the gateway's kafkapub keys
// messages by organization, so one chain holds all windows of one): dedup
// by delivery id, the events sink, a one-minute count per organisation and
// its sink. Each part is declared once, in the chain, which hands the sinks
// the Store's Storage and Keep. The Source runs the sinks' flush timers and
// closes everything when the chain ends, also when a step fails.
//
// An event whose minute had closed (its watermark passed: a later event of
// its partition came first) is late: it is in the events table, not in
// org_minute, and logged, one line each.
func NewProcessor(cfg Config) kafkasource.ProcessorFunc {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return kafkasource.Chains(cfg.Store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
		if err != nil {
			return nil, err
		}
		if err := c.Add("dedup", d); err != nil {
			return nil, err
		}
		opts := chsink.Options{MaxDelay: 100 * time.Millisecond, Logger: log}
		events, err := chsink.Open(ctx, c, cfg.DB, "events", eventSchema, opts)
		if err != nil {
			return nil, err
		}
		p := c.Partition().Partition
		w, err := window.New(window.Tumbling(time.Minute), window.Count[string]{}, window.Options{
			Inputs: []int{p}, IdleTimeout: 200 * time.Millisecond,
		})
		if err != nil {
			return nil, err
		}
		// The window's rows, their positions, Tick's rows and the replay
		// policy in one participant.
		minutes, err := windowsink.Open(ctx, c, cfg.DB, "org_minute", w, minuteSchema, windowsink.Options{Sink: opts})
		if err != nil {
			return nil, err
		}

		var key []byte
		process := func(ctx context.Context, m kafka.Message) error {
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
			if err := minutes.Add(ctx, m.Offset, window.Event[string]{Input: p, Key: ev.Org, Time: ev.At, Value: ev.ID}); err != nil {
				return err
			}
			for _, l := range minutes.Late() {
				log.Warn("late event: its minute had closed; in events, not in org_minute",
					"org", l.Event.Key, "id", l.Event.Value, "at", l.Event.Time, "minute", l.Start, "watermark", l.Watermark)
			}
			return nil
		}
		return &kafkasource.Processor{Process: process, Tick: minutes.Tick, TickInterval: 100 * time.Millisecond}, nil
	})
}
