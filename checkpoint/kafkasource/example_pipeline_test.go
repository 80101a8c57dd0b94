package kafkasource_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/window"
)

// pushEvent is a record of the example's topic.
type pushEvent struct {
	ID   string    `json:"id"`
	Repo string    `json:"repo"`
	At   time.Time `json:"at"`
}

type repoMinute = window.Row[uint64]

var pipelineDDL = []string{
	`CREATE TABLE pushes (id String, repo String, at DateTime64(3, 'UTC'))
	ENGINE = MergeTree ORDER BY (repo, at, id) SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`,
	// Keyed by window, versioned: a window written again replaces itself.
	`CREATE TABLE repo_minute (repo String, start DateTime64(3, 'UTC'), version UInt64, pushes UInt64)
	ENGINE = ReplacingMergeTree(version) ORDER BY (repo, start) SETTINGS non_replicated_deduplication_window = 1000`,
}

// A whole chain: Kafka → dedup → the raw events to one ClickHouse table,
// and one-minute counts per repository (a window sink) to another. Each
// part is declared once, in the partition's checkpoint.Chain: the sinks
// take its Storage and Keep, and the chsink.DB names the server and the
// database once. The Source starts the sinks' flush timers and closes
// every participant when the chain ends.
func Example_pipeline() {
	ctx := context.Background()
	// Servers: yours in production; testkit starts these in tests.
	k, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "pushes"))
	defer k.Close()
	chSrv, err := testkit.StandaloneClickHouse(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer chSrv.Close()
	conn, _ := ch.Dial(ctx, ch.Options{Address: chSrv.Addr()})
	defer conn.Close()
	for _, q := range pipelineDDL {
		if err := conn.Do(ctx, ch.Query{Body: q}); err != nil {
			fmt.Println(err)
			return
		}
	}
	cl, _ := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...))
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range 7 { // push-3 arrives twice: a redelivery
		id := []int{0, 1, 2, 3, 3, 4, 5}[i]
		at := base.Add(time.Duration(id) * 25 * time.Second) // minutes 0, 0, 0, 1, 1, 1, 2
		v, _ := json.Marshal(pushEvent{ID: fmt.Sprintf("push-%d", id), Repo: "api", At: at})
		cl.ProduceSync(ctx, &kgo.Record{Topic: "pushes", Value: v})
	}
	cl.Close()

	storage := checkpoint.NewMemoryStorage() // shared storage (FSStorage on a shared disk, S3) in production
	store, _ := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	coord, _ := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 100 * time.Millisecond})
	defer coord.Close()

	db := chsink.DB{Addr: chSrv.Addr()} // the database: "default"
	build := func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
		if err != nil {
			return nil, err
		}
		if err := c.Add("dedup", d); err != nil {
			return nil, err
		}
		pushes, err := chsink.Open(ctx, c, db, "pushes", func() []chsink.Column[pushEvent] {
			return []chsink.Column[pushEvent]{
				chsink.String("id", func(e *pushEvent) string { return e.ID }),
				chsink.String("repo", func(e *pushEvent) string { return e.Repo }),
				chsink.DateTime64("at", proto.PrecisionMilli, func(e *pushEvent) time.Time { return e.At }),
			}
		}, chsink.Options{})
		if err != nil {
			return nil, err // the Source closes what the chain holds
		}
		w, err := window.New(window.Tumbling(time.Minute), window.Count[string]{}, window.Options{Inputs: []int{c.Partition().Partition}})
		if err != nil {
			return nil, err
		}
		minutes, err := windowsink.Open(ctx, c, db, "repo_minute", w, func() []chsink.Column[repoMinute] {
			return []chsink.Column[repoMinute]{
				chsink.String("repo", func(r *repoMinute) string { return r.Key }),
				chsink.DateTime64("start", proto.PrecisionMilli, func(r *repoMinute) time.Time { return r.Start }),
				chsink.UInt64("pushes", func(r *repoMinute) uint64 { return r.Result }),
			}
		}, windowsink.Options{})
		if err != nil {
			return nil, err
		}

		var key []byte
		return &kafkasource.Processor{Process: func(ctx context.Context, m kafka.Message) error {
			var ev pushEvent
			if err := json.Unmarshal(m.Value, &ev); err != nil {
				return err // stop: never skip a record
			}
			key = dedup.AppendKey(key[:0], ev.ID)
			if first, err := d.Observe(key, m.Time); err != nil || !first { // the record's timestamp: see package dedup
				return err
			}
			if err := pushes.Add(ctx, sink.Position{Offset: m.Offset}, ev); err != nil {
				return err
			}
			return minutes.Add(ctx, m.Offset, window.Event[string]{Input: m.Partition, Key: ev.Repo, Time: ev.At, Value: ev.ID})
		}}, nil
	}
	src, _ := kafkasource.New(kafkasource.Group{Brokers: k.ListenAddrs(), ID: "pushes", Topics: []string{"pushes"}},
		coord, kafkasource.Chains(store, build), kafkasource.Options{HeartbeatInterval: 100 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()

	query := func(q string) []string {
		var repo, start proto.ColStr
		var n proto.ColUInt64
		var rows []string
		_ = conn.Do(ctx, ch.Query{Body: q, Result: proto.Results{{Name: "repo", Data: &repo}, {Name: "start", Data: &start}, {Name: "n", Data: &n}},
			OnResult: func(context.Context, proto.Block) error {
				for i := range n.Rows() {
					rows = append(rows, fmt.Sprintf("%s %s %d", repo.Row(i), start.Row(i), n.Row(i)))
				}
				return nil
			}})
		return rows
	}
	const (
		pushesQuery  = "SELECT 'api' AS repo, '' AS start, count() AS n FROM pushes"
		minutesQuery = "SELECT repo, toString(start) AS start, pushes AS n FROM repo_minute FINAL ORDER BY start"
	)
	// Wait for the checkpoint that covers every record (the minute of
	// push-5 stays open: no later event closes it).
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		cp, _ := store.Latest(ctx, checkpoint.TopicPartition{Topic: "pushes", Partition: 0})
		if cp != nil && cp.NextOffset == 7 {
			break
		}
	}
	stop()
	fmt.Println("Run:", <-done)
	fmt.Println(query(pushesQuery))
	for _, r := range query(minutesQuery) {
		fmt.Println(r)
	}
	// Output:
	// Run: <nil>
	// [api  6]
	// api 2026-11-30 12:00:00.000 3
	// api 2026-11-30 12:01:00.000 2
}
