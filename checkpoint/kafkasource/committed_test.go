package kafkasource_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestFilterAborted reads a topic where franz-go's transactional producer
// committed and aborted transactions in turn across partitions: with
// Options.FilterAborted, Process sees each committed record once and no
// aborted one; without it (kafka-go's ReadCommitted), it sees aborted ones.
func TestFilterAborted(t *testing.T) {
	const partitions, txns, perTxn = 2, 9, 4
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "txnin")
	testkit.CreateTopic(t, brokers, topic, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	want := map[string]bool{}
	for i := range txns {
		commit := i%3 != 1
		require.NoError(t, cl.BeginTransaction())
		for p := range partitions {
			for j := range perTxn {
				v := fmt.Sprintf("%d-%d-%d-%t", i, p, j, commit)
				require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Partition: int32(p), Value: []byte(v)}).FirstErr())
				if commit {
					want[v] = true
				}
			}
		}
		require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}

	run := func(filter bool) map[string]int {
		var mu sync.Mutex
		got := map[string]int{}
		store, err := checkpoint.NewStore(checkpoint.NewMemStorage(), checkpoint.StoreOptions{})
		require.NoError(t, err)
		coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Hour})
		require.NoError(t, err)
		opts := fastGroup
		opts.FilterAborted = filter
		src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "g"), Topics: []string{topic}}, coord,
			func(context.Context, checkpoint.TopicPartition) (*kafkasource.Processor, error) {
				return &kafkasource.Processor{Process: func(_ context.Context, m kafka.Message) error {
					mu.Lock()
					got[string(m.Value)]++
					mu.Unlock()
					return nil
				}}, nil
			}, opts)
		require.NoError(t, err)
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- src.Run(rctx) }()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for v := range want {
				n += min(got[v], 1)
			}
			return n == len(want)
		}, 30*time.Second, 20*time.Millisecond)
		time.Sleep(200 * time.Millisecond) // anything left would show up now
		rcancel()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		return got
	}

	got := run(true)
	for v, n := range got {
		assert.True(t, want[v], "aborted record %s processed", v)
		assert.Equal(t, 1, n, "record %s", v)
	}
	assert.Len(t, got, len(want))

	aborted := 0
	for v := range run(false) {
		if !want[v] {
			aborted++
		}
	}
	assert.Positive(t, aborted, "kafka-go's ReadCommitted is expected to hand out aborted records")
	t.Logf("without FilterAborted: %d aborted records processed", aborted)
}
