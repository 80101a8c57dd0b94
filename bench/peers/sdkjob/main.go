// Command sdkjob is the SDK's side of make bench-peers (bench/peers): the
// job of examples/processor (kafkasource, dedup, a one-minute tumbling
// count per tenant, two chsink sinks, checkpoints every second) over the
// peers' input, whose records are JSON values, as the Flink and Kafka
// Streams jobs decode theirs with Jackson. It decodes them in one pass
// (decodeEvent), accepting exactly what encoding/json does.
//
//	sdkjob -brokers 127.0.0.1:9092 -topic in -clickhouse 127.0.0.1:9000 -database sdk -state /tmp/ck
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/window"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "sdkjob:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sdkjob", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "Kafka bootstrap brokers, comma-separated")
	topic := fs.String("topic", "", "input topic")
	chAddr := fs.String("clickhouse", "", "ClickHouse native address")
	database := fs.String("database", "", "ClickHouse database (tables exist)")
	state := fs.String("state", "", "checkpoint directory")
	interval := fs.Duration("interval", time.Second, "checkpoint interval; negative: none")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address (PEERS_SDK_PPROF)")
	group := fs.String("group", "peers-sdk", "consumer group")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pprofAddr != "" {
		// A profile of the running job, for where its CPU goes:
		// go tool pprof http://ADDR/debug/pprof/profile?seconds=5
		go func() { _ = http.ListenAndServe(*pprofAddr, nil) }()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	storage, err := checkpoint.NewFSStorage(*state)
	if err != nil {
		return err
	}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Logger: log})
	if err != nil {
		return err
	}
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: *interval, Logger: log})
	if err != nil {
		return err
	}
	defer coord.Close()
	sinkOpts := chsink.Options{Database: *database, Logger: log}
	src, err := kafkasource.New(kafkasource.Group{Brokers: strings.Split(*brokers, ","), ID: *group, Topics: []string{*topic}},
		coord, newChain(chsink.Table{Addr: *chAddr}, sinkOpts, storage, log), kafkasource.Options{Logger: log})
	if err != nil {
		return err
	}
	return src.Run(ctx)
}

// event is one input record: {"id":…,"tenant":…,"ts":<Unix ms>,"kind":…,"payload":…}.
type event struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	TS     int64  `json:"ts"`
	Kind   string `json:"kind"`
}

func eventSchema() []chsink.Column[event] {
	return []chsink.Column[event]{
		chsink.LowCardinality("tenant", func(e *event) string { return e.Tenant }),
		chsink.String("event_id", func(e *event) string { return e.ID }),
		chsink.DateTime64("at", proto.PrecisionMilli, func(e *event) time.Time { return time.UnixMilli(e.TS).UTC() }),
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

// newChain builds one partition's chain, as examples/processor's: dedup by
// event id, first sights to events, their one-minute counts per tenant to
// tenant_minute. The generator puts every tenant on one partition, so a
// (tenant, minute) row comes from one chain.
func newChain(table chsink.Table, opts chsink.Options, storage checkpoint.Storage, log *slog.Logger) kafkasource.ProcessorFunc {
	return func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc := &kafkasource.Processor{Participants: map[string]checkpoint.Participant{}}
		c := &chain{input: p.Partition, log: log}
		var err error
		if c.dedup, err = dedup.New(dedup.DefaultTTL, dedup.Options{Incremental: true}); err != nil {
			return proc, err
		}
		proc.Participants["dedup"] = c.dedup
		c.window, err = window.New(window.Tumbling(time.Minute), window.Count[string]{}, window.Options{
			Inputs: []int{p.Partition}, MaxOutOfOrderness: 5 * time.Second, IdleTimeout: 2 * time.Second,
		})
		if err != nil {
			return proc, err
		}
		proc.Participants["window"] = c.window
		table.Name = "events"
		if c.events, err = chsink.New(ctx, table, p, storage, eventSchema, opts); err != nil {
			return proc, err
		}
		proc.Participants["events"] = c.events
		table.Name = "tenant_minute"
		opts.OnMismatch = chsink.MismatchReinsert
		if c.minutes, err = chsink.New(ctx, table, p, storage, minuteSchema, opts); err != nil {
			return proc, err
		}
		proc.Participants["tenant_minute"] = c.minutes
		proc.Participants["cursor"] = &c.cursor
		proc.ProcessBatch = c.processBatch
		proc.Tick = c.tick
		proc.TickInterval = 500 * time.Millisecond
		return proc, nil
	}
}

type chain struct {
	input   int
	log     *slog.Logger
	dedup   *dedup.Deduplicator
	window  *window.Operator[string, uint64, uint64]
	events  *chsink.Sink[event]
	minutes *chsink.Sink[minuteRow]
	cursor  sink.Cursor
	out     window.Output[string, uint64]

	evs       []event
	keys      []byte
	keyEnds   []int
	sightings []dedup.Sighting
	first     []bool
	kept      []event
	keptPos   []sink.Position
	keptAt    []int
	rows      []minuteRow
	rowPos    []sink.Position
	rowAt     []int
}

// processBatch is examples/processor's, with decodeEvent for the decoder:
// a record json.Unmarshal would refuse, or one without an id, is poison.
func (c *chain) processBatch(ctx context.Context, ms []kafka.Message) (int, error) {
	n, stop := len(ms), error(nil)
	c.evs, c.keys, c.keyEnds = c.evs[:0], c.keys[:0], c.keyEnds[:0]
	for i := range ms {
		var ev event
		if err := decodeEvent(ms[i].Value, &ev); err != nil || ev.ID == "" {
			n, stop = i, kafkasource.Poison(fmt.Errorf("offset %d: not an event: %v", ms[i].Offset, err))
			break
		}
		c.evs = append(c.evs, ev)
		c.keys = append(c.keys, ev.ID...)
		c.keyEnds = append(c.keyEnds, len(c.keys))
	}
	c.sightings = c.sightings[:0]
	for i, from := 0, 0; i < n; i++ {
		c.sightings = append(c.sightings, dedup.Sighting{Key: c.keys[from:c.keyEnds[i]], Time: time.UnixMilli(c.evs[i].TS)})
		from = c.keyEnds[i]
	}
	var err error
	if c.first, err = c.dedup.ObserveBatch(c.sightings, c.first[:0]); err != nil {
		n, stop = len(c.first), err
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
		if err := c.window.Add(window.Event[string]{Input: c.input, Key: ev.Tenant, Time: time.UnixMilli(ev.TS), Value: ev.ID}, &c.out); err != nil {
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

func (c *chain) tick(ctx context.Context) error {
	c.out.Reset()
	c.window.Tick(&c.out)
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
