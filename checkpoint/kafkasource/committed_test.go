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
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestReadsCommittedOnly reads a topic where two transactional producers,
// franz-go's and kafkatxn's, interleave transactions that commit and abort
// on different schedules across partitions, with plain records between:
// Process sees each committed and plain record once, no record of an
// aborted transaction and no control record. The fetches are small, so
// transactions span fetches and fetches end inside them.
func TestReadsCommittedOnly(t *testing.T) {
	const partitions, txns, perTxn = 2, 9, 3
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "txnin")
	testkit.CreateTopic(t, brokers, topic, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	franz, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(topic+"-franz"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer franz.Close()
	plain, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer plain.Close()
	own, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-own", kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer own.Close()

	want := map[string]bool{}
	for i := range txns {
		franzCommit, ownCommit := i%3 != 1, i%2 == 0
		require.NoError(t, franz.BeginTransaction())
		for p := range partitions {
			for j := range perTxn {
				v := fmt.Sprintf("franz%d-p%d-%d-%t", i, p, j, franzCommit)
				require.NoError(t, franz.ProduceSync(ctx, &kgo.Record{Partition: int32(p), Value: []byte(v)}).FirstErr())
				want[v] = franzCommit
				v = fmt.Sprintf("own%d-p%d-%d-%t", i, p, j, ownCommit)
				_, err := own.Produce(ctx, topic, p, kafkatxn.Record{Value: []byte(v)})
				require.NoError(t, err)
				want[v] = ownCommit
			}
		}
		require.NoError(t, franz.EndTransaction(ctx, kgo.TransactionEndTry(franzCommit)))
		if ownCommit {
			require.NoError(t, own.Commit(ctx))
		} else {
			require.NoError(t, own.Abort(ctx))
		}
		v := fmt.Sprintf("plain%d", i)
		require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Partition: int32(i % partitions), Value: []byte(v)}).FirstErr())
		want[v] = true
	}
	for p := range partitions {
		// Past every marker: once it is processed, all before it was read.
		v := fmt.Sprintf("end-p%d", p)
		require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Partition: int32(p), Value: []byte(v)}).FirstErr())
		want[v] = true
	}

	var mu sync.Mutex
	got := map[string]int{}
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Hour})
	require.NoError(t, err)
	defer coord.Close()
	opts := fastGroup
	opts.MaxBytes = 300 // a few batches a fetch
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "g"), Topics: []string{topic}}), coord,
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
		for v, committed := range want {
			if committed && got[v] == 0 {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond)
	rcancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	for v, n := range got {
		assert.True(t, want[v], "record %q processed: aborted, or a control record", v)
		assert.Equal(t, 1, n, "record %s", v)
	}
}
