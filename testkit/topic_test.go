package testkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestReadTopic writes, with franz-go, a committed transaction, an aborted
// one, a plain record and, last, another aborted transaction (so the
// partition ends with records and a marker ReadTopic must skip), and reads
// the partition: the committed and plain records in offset order, nothing
// of the aborted ones.
func TestReadTopic(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "read")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	tx, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(topic+"-tx"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer tx.Close()
	plain, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer plain.Close()

	txn := func(commit bool, values ...string) {
		t.Helper()
		require.NoError(t, tx.BeginTransaction())
		for _, v := range values {
			require.NoError(t, tx.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte(v)}).FirstErr())
		}
		require.NoError(t, tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	txn(true, "c1", "c2")
	txn(false, "a1", "a2")
	require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("p1")}).FirstErr())
	txn(false, "a3")

	read := func() []string {
		t.Helper()
		var got []string
		var offsets []int64
		for _, m := range testkit.ReadTopic(t, brokers, topic, 1) {
			got = append(got, string(m.Value))
			offsets = append(offsets, m.Offset)
			assert.Equal(t, topic, m.Topic)
			assert.Equal(t, 1, m.Partition)
		}
		assert.IsIncreasing(t, offsets)
		return got
	}
	assert.Equal(t, []string{"c1", "c2", "p1"}, read())
	assert.Empty(t, testkit.ReadTopic(t, brokers, topic, 0), "an empty partition")

	// A transaction left open hides its records and the plain one after
	// it, as from any read_committed consumer, until it commits.
	require.NoError(t, tx.BeginTransaction())
	require.NoError(t, tx.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("o1")}).FirstErr())
	require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("p2")}).FirstErr())
	assert.Equal(t, []string{"c1", "c2", "p1"}, read(), "with a transaction open")
	require.NoError(t, tx.EndTransaction(ctx, kgo.TryCommit))
	assert.Equal(t, []string{"c1", "c2", "p1", "o1", "p2"}, read(), "after its commit")
}
