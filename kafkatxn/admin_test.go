package kafkatxn_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestListDescribeAbortTransaction: an open transaction is listed (by
// prefix and state) and described with its producer, epoch, timeout, start
// and partitions; AbortTransaction aborts it and returns once it is
// complete, the producer that held it is fenced, a second abort finds
// nothing open, and an unknown id is an error.
func TestListDescribeAbortTransaction(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "admin")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := kafkatxn.TxOptions{TransactionTimeout: 5 * time.Minute}
	p, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", opts)
	require.NoError(t, err)
	defer p.Close()
	before := time.Now().Add(-time.Second)
	_, err = p.Produce(ctx, topic, 1, rec("open"))
	require.NoError(t, err)
	pid, epoch := p.Txn().ProducerID, p.Txn().Epoch

	ls, err := kafkatxn.ListTransactions(ctx, brokers, kafkatxn.ListFilter{Prefix: topic, States: []string{kafkatxn.StateOngoing}}, opts)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	assert.Equal(t, kafkatxn.TxnListing{TransactionalID: topic + "-tx", ProducerID: pid, State: kafkatxn.StateOngoing,
		Coordinator: ls[0].Coordinator}, ls[0])

	ds, err := kafkatxn.DescribeTransactions(ctx, brokers, []string{topic + "-tx"}, opts)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	d := ds[0]
	assert.True(t, d.Open())
	assert.True(t, d.Started.After(before) && d.Started.Before(time.Now().Add(time.Second)), "started %v", d.Started)
	d.Started = time.Time{}
	assert.Equal(t, kafkatxn.TxnDescription{TransactionalID: topic + "-tx", State: kafkatxn.StateOngoing, ProducerID: pid,
		ProducerEpoch: epoch, Timeout: 5 * time.Minute, Partitions: map[string][]int{topic: {1}}, Coordinator: ls[0].Coordinator}, d)

	_, err = kafkatxn.AbortTransaction(ctx, brokers, topic+"-tx", opts)
	require.NoError(t, err)
	ds, err = kafkatxn.DescribeTransactions(ctx, brokers, []string{topic + "-tx"}, opts)
	require.NoError(t, err)
	assert.Equal(t, kafkatxn.StateEmpty, ds[0].State, "aborted, then initialised as a new producer of the id would be")
	assert.Greater(t, ds[0].ProducerEpoch, epoch, "the epoch moved on: the old producer is fenced")
	assert.ErrorIs(t, p.Commit(ctx), kafkatxn.ErrFenced)
	assert.Empty(t, readCommitted(t, brokers, topic, 2))

	_, err = kafkatxn.AbortTransaction(ctx, brokers, topic+"-tx", opts)
	assert.ErrorIs(t, err, kafkatxn.ErrNoOpenTransaction)
	_, err = kafkatxn.DescribeTransactions(ctx, brokers, []string{topic + "-nobody"}, opts)
	assert.Error(t, err)
}
