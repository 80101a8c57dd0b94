package kafkatxn_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestReaderSkipsAbortedTransactions writes, with franz-go's transactional
// producer (test data from outside this package), transactions that commit
// and abort in turn, each spanning every partition, plus plain records in
// between, then reads every partition with a Reader: each committed and
// plain record appears once, no aborted one, no control marker.
func TestReaderSkipsAbortedTransactions(t *testing.T) {
	const partitions, txns, perTxn = 3, 12, 5
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "txn")
	testkit.CreateTopic(t, brokers, topic, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	txcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(topic+"-tx"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer txcl.Close()
	plain, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer plain.Close()

	want := map[string]bool{}
	for i := range txns {
		commit := i%3 != 1 // every third transaction aborts
		require.NoError(t, txcl.BeginTransaction())
		for p := range partitions {
			for j := range perTxn {
				v := fmt.Sprintf("txn%d-p%d-%d-%s", i, p, j, strconv.FormatBool(commit))
				require.NoError(t, txcl.ProduceSync(ctx, &kgo.Record{Partition: int32(p), Value: []byte(v)}).FirstErr())
				if commit {
					want[v] = true
				}
			}
		}
		require.NoError(t, txcl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
		v := fmt.Sprintf("plain%d", i)
		require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Partition: int32(i % partitions), Value: []byte(v)}).FirstErr())
		want[v] = true
	}

	got := map[string]int{}
	for p := range partitions {
		r, err := kafkatxn.NewReader(brokers, topic, p, 0, kafkatxn.ReaderOptions{MaxBytes: 300, MaxWait: 50 * time.Millisecond})
		require.NoError(t, err)
		end := endOffset(t, brokers, topic, p)
		for r.Offset() < end {
			fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
			ms, err := r.Fetch(fctx)
			fcancel()
			if err != nil && r.Offset() >= end {
				break // only a control marker was left
			}
			require.NoError(t, err)
			for _, m := range ms {
				got[string(m.Value)]++
			}
		}
		require.NoError(t, r.Close())
	}
	for v := range want {
		assert.Equal(t, 1, got[v], "committed record %s", v)
	}
	for v, n := range got {
		assert.True(t, want[v], "record %s (seen %d times) is not committed", v, n)
	}
	assert.Len(t, got, len(want))
}
