package kafkasink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestRestoreWhileAnotherProducerHoldsATransaction: a sink's checkpoint
// completed and its transaction committed, the sink began its next
// transaction (a new epoch) and died; meanwhile a producer of another
// transactional id (another chain, a Flink job) has held a transaction
// open on the same output partition since before the sink's commit
// marker. The restore finds the marker past the partition's last stable
// offset and succeeds. Before the fetch path honoured read_uncommitted,
// Restore retried CONCURRENT_TRANSACTIONS until its delivery timeout and
// failed: the chain stayed down until the other transaction ended
// (issue 42, finding 1).
func TestRestoreWhileAnotherProducerHoldsATransaction(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "out")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tx := kafkatxn.TxOptions{ProducerOptions: kafkatxn.ProducerOptions{DeliveryTimeout: 20 * time.Second}}
	newSink := func() *kafkasink.Sink {
		s, err := kafkasink.New(brokers, topic, checkpoint.TopicPartition{Topic: "in", Partition: 3}, kafkasink.Options{Tx: tx, BatchSize: 1})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}

	old := newSink()
	write(t, old, topic, "a")
	other, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-other-chain", tx)
	require.NoError(t, err)
	defer other.Close()
	_, err = other.Produce(ctx, topic, 0, kafkatxn.Record{Value: []byte("open")}) // held open from here
	require.NoError(t, err)
	state, err := old.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, old.CheckpointCompleted(ctx, 1)) // the commit marker, past the LSO
	write(t, old, topic, "b")                           // the next transaction, a new epoch; then the sink dies
	require.NoError(t, old.Close())

	next := newSink()
	start := time.Now()
	require.NoError(t, next.Restore(ctx, state), "restore while another producer's transaction is open")
	t.Logf("restored in %v with another transaction open", time.Since(start).Round(time.Millisecond))

	require.NoError(t, other.Abort(ctx))
	assert.Equal(t, map[string]int{"a": 1}, readCommitted(t, brokers, topic, 1))
}
