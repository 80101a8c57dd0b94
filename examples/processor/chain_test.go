package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// counted wraps a chain's ProcessorFunc so that seen counts the records it
// has handled, through Process or ProcessBatch.
func counted(newProc kafkasource.ProcessorFunc, seen *atomic.Int64) kafkasource.ProcessorFunc {
	return func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc, err := newProc(ctx, p)
		if err != nil {
			return proc, err
		}
		if inner := proc.Process; inner != nil {
			proc.Process = func(ctx context.Context, m kafka.Message) error {
				err := inner(ctx, m)
				if err == nil {
					seen.Add(1)
				}
				return err
			}
		}
		if inner := proc.ProcessBatch; inner != nil {
			proc.ProcessBatch = func(ctx context.Context, ms []kafka.Message) (int, error) {
				n, err := inner(ctx, ms)
				seen.Add(int64(n))
				return n, err
			}
		}
		return proc, nil
	}
}

// TestBatchEqualsPerRecord: the same input through the chain's batch path
// (ProcessBatch: ObserveBatch, AddBatch) and its per-record path (Process)
// ends in byte-identical checkpoints (every participant's state: dedup,
// window, cursor and both sinks' journals) and identical rows in
// ClickHouse. The input has duplicates, retried deliveries and minutes that
// close, so every operator has work; batches are cut at 64 records, so
// they end mid-window.
func TestBatchEqualsPerRecord(t *testing.T) {
	const partitions = 2
	spec := genSpec{partitions: partitions, perPart: 3000, tenants: 20, dupRate: 0.1, seed: 7}
	addr, _ := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	topic := "equal"
	testkit.CreateTopic(t, brokers, topic, partitions)
	distinct := produceEvents(t, brokers, topic, spec)
	db := testkit.NewDatabase(t, addr)

	type result struct {
		states          []map[string][]byte
		events, minutes [][]string
	}
	run := func(perRecord bool, group string) result {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The same database for both runs (a sink's state names its table),
		// with tables created afresh.
		for _, table := range []string{"events", "tenant_minute"} {
			require.NoError(t, testkit.Exec(ctx, addr, db, "DROP TABLE IF EXISTS "+table+" SYNC"))
		}
		require.NoError(t, createTables(ctx, ch.Options{Address: addr}, db))
		storage := checkpoint.NewMemoryStorage()
		store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
		require.NoError(t, err)
		coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Hour}) // only the checkpoint below
		require.NoError(t, err)
		defer coord.Close()
		var seen atomic.Int64
		chain := kafkasource.Chains(store, newChain(chainConfig{
			ClickHouse: chsink.DB{Addr: addr, Database: db},
			// Only the checkpoint flushes, so both runs cut the same batches.
			Sink:   chsink.Options{MaxDelay: time.Hour, MaxRows: 1_000_000},
			Logger: slog.New(slog.DiscardHandler), PerRecord: perRecord,
		}))
		src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}}),
			coord, counted(chain, &seen), kafkasource.Options{MaxBatch: 64, HeartbeatInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- src.Run(ctx) }()
		var early error
		require.Eventually(t, func() bool {
			select {
			case early = <-done:
				return true
			default:
			}
			return seen.Load() == int64(partitions*spec.perPart)
		}, 60*time.Second, 5*time.Millisecond, "records processed")
		require.NoError(t, early, "Run returned early")
		checkpointtest.Checkpoint(t, src.Checkpoint)
		var res result
		for p := range partitions {
			cp, err := store.Latest(ctx, checkpoint.TopicPartition{Topic: topic, Partition: p})
			require.NoError(t, err)
			require.Equal(t, int64(spec.perPart), cp.NextOffset)
			res.states = append(res.states, cp.States)
		}
		res.events = testkit.Rows(t, addr, db, `SELECT CAST(tenant AS String) AS tenant, CAST(source AS String) AS source, event_id,
			CAST(event_type AS String) AS event_type, at FROM events ORDER BY ALL`)
		res.minutes = testkit.Table(t, addr, db, "tenant_minute", testkit.Final)
		cancel()
		require.NoError(t, <-done)
		return res
	}
	one := run(true, "equal-per-record")
	batch := run(false, "equal-batch")

	require.Len(t, one.events, distinct, "every delivery once")
	assert.NotEmpty(t, one.minutes)
	for p := range partitions {
		require.ElementsMatch(t, keys(one.states[p]), keys(batch.states[p]))
		for name, want := range one.states[p] {
			assert.Equal(t, want, batch.states[p][name], "partition %d, participant %q", p, name)
		}
	}
	assert.Equal(t, one.events, batch.events)
	assert.Equal(t, one.minutes, batch.minutes)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
