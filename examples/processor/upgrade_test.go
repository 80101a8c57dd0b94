package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/window"
)

// handWiredChain is newChain as the processor wired it before
// kafkasource.Chains: a Participants map filled by name, chsink.New with
// the Storage and the database repeated. It is the old form a deployment
// upgraded in place wrote its checkpoints with, kept here in what reaches
// a checkpoint (names, operators and their options); the processing is
// the chain's own.
func handWiredChain(addr, db string, storage checkpoint.Storage, opts chsink.Options) kafkasource.ProcessorFunc {
	return func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc := &kafkasource.Processor{Participants: map[string]checkpoint.Participant{}}
		c := &chain{input: p.Partition, log: slog.New(slog.DiscardHandler)}
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
		opts.Database = db
		if c.events, err = chsink.New(ctx, chsink.Table{Addr: addr, Name: "events"}, p, storage, eventSchema, opts); err != nil {
			return proc, err
		}
		proc.Participants["events"] = c.events
		minuteOpts := opts
		minuteOpts.OnMismatch = chsink.MismatchReinsert
		if c.minutes, err = chsink.New(ctx, chsink.Table{Addr: addr, Name: "tenant_minute"}, p, storage, minuteSchema, minuteOpts); err != nil {
			return proc, err
		}
		proc.Participants["tenant_minute"] = c.minutes
		proc.Participants["cursor"] = &c.cursor
		proc.ProcessBatch, proc.Tick, proc.TickInterval = c.processBatch, c.tick, 500*time.Millisecond
		return proc, nil
	}
}

// TestUpgradeRestoresHandWiredCheckpoint: the hand-wired chain (the form
// before kafkasource.Chains) processes deliveries and checkpoints, then
// processes more (flushed to ClickHouse, journaled) and stops without a
// checkpoint, as a deployment stopped for its upgrade may. newChain on
// Chains, as main wires it, then runs over the same checkpoints: it
// registers exactly the names the old checkpoint holds state under (a name
// the chain lacked would fail Attach with ErrUnknownState, a new name
// would start empty), and restores their state: the replay of what
// followed the checkpoint goes into events once (the sinks' journals), and
// deliveries the old chain saw, delivered again after the upgrade, are
// dropped (the dedup keys).
func TestUpgradeRestoresHandWiredCheckpoint(t *testing.T) {
	addr, _ := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "upgrade")
	testkit.CreateTopic(t, brokers, topic, 1)
	db := testkit.NewDatabase(t, addr)
	ctx := context.Background()
	require.NoError(t, createTables(ctx, ch.Options{Address: addr}, db))
	recs, _ := genRecords(genSpec{partitions: 1, perPart: 600, tenants: 5, dupRate: 0.1, seed: 47}, 0)
	// After the upgrade, 30 deliveries of the first 300 again, later.
	last := recs[len(recs)-1].Timestamp
	for i := range 30 {
		dup := *recs[i*10]
		dup.Timestamp = last.Add(time.Duration(i) * time.Millisecond)
		dup.Headers = append(dup.Headers[:len(dup.Headers):len(dup.Headers)], kgo.RecordHeader{Key: kafkapub.HeaderRetry, Value: []byte("2")})
		recs = append(recs, &dup)
	}
	distinct := func(rs []*kgo.Record) string {
		ids := map[string]bool{}
		for _, r := range rs {
			var src, id string
			for _, h := range r.Headers {
				switch h.Key {
				case kafkapub.HeaderSource:
					src = string(h.Value)
				case kafkapub.HeaderEventID:
					id = string(h.Value)
				}
			}
			ids[src+"/"+id] = true
		}
		return fmt.Sprint(len(ids))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(rs []*kgo.Record) {
		t.Helper()
		for _, r := range rs {
			r.Topic = topic
		}
		require.NoError(t, cl.ProduceSync(ctx, rs...).FirstErr())
	}
	rows := func() string {
		return testkit.Rows(t, addr, db, "SELECT toString(count()) FROM events")[0][0]
	}
	storage := checkpoint.NewMemoryStorage()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	run := func(newProc kafkasource.ProcessorFunc, records int, until func() bool, lastCheckpoint bool) {
		t.Helper()
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Hour})
		require.NoError(t, err)
		defer coord.Close()
		var seen atomic.Int64
		src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: topic, Topics: []string{topic}}), coord, counted(newProc, &seen),
			kafkasource.Options{MaxBatch: 64, HeartbeatInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- src.Run(runCtx) }()
		require.Eventually(t, func() bool {
			select {
			case err := <-done:
				done <- err
				return true
			default:
			}
			return seen.Load() == int64(records) && until()
		}, 90*time.Second, 20*time.Millisecond, "records processed")
		select {
		case err := <-done:
			require.NoError(t, err, "Run returned early")
		default:
		}
		if lastCheckpoint {
			checkpointtest.Checkpoint(t, src.Checkpoint)
		}
		cancel()
		require.NoError(t, <-done)
	}
	opts := chsink.Options{MaxDelay: 100 * time.Millisecond}

	// Before the upgrade: 300 records and a checkpoint, then 150 more,
	// flushed but not checkpointed.
	produce(recs[:300])
	old := handWiredChain(addr, db, storage, opts)
	run(old, 300, func() bool { return true }, true)
	p0 := checkpoint.TopicPartition{Topic: topic, Partition: 0}
	cp, err := store.Latest(ctx, p0)
	require.NoError(t, err)
	require.Equal(t, int64(300), cp.NextOffset)
	oldNames := slices.Sorted(maps.Keys(cp.States))
	assert.Equal(t, []string{"cursor", "dedup", "events", "tenant_minute", "window"}, oldNames, "the names today's chain writes")
	produce(recs[300:450])
	want := distinct(recs[:450])
	run(old, 150, func() bool { return rows() == want }, false)
	cp, err = store.Latest(ctx, p0)
	require.NoError(t, err)
	require.Equal(t, int64(300), cp.NextOffset, "what followed the checkpoint is replayed after the upgrade")

	// After: the rest, with the 30 redeliveries.
	produce(recs[450:])
	var mu sync.Mutex
	var registered []string
	build := newChain(chainConfig{ClickHouse: chsink.DB{Addr: addr, Database: db}, Sink: opts, Logger: slog.New(slog.DiscardHandler)})
	upgraded := kafkasource.Chains(store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		proc, err := build(ctx, c)
		mu.Lock()
		registered = slices.Sorted(maps.Keys(c.Participants()))
		mu.Unlock()
		return proc, err
	})
	want = distinct(recs)
	run(upgraded, len(recs)-300, func() bool { return true }, true)
	mu.Lock()
	assert.Equal(t, oldNames, registered, "the new chain's names are the old checkpoint's")
	mu.Unlock()
	assert.Equal(t, want, rows(), "every delivery once: no replayed batch, no redelivery twice")
	assert.Equal(t, want, testkit.Rows(t, addr, db, "SELECT toString(uniqExact(source, event_id)) FROM events")[0][0])
}
