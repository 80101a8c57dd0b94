package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/harness/internal/chaos/history"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestHistoryCatchesAbortedReads records, as the chaos run does, a
// committed and an aborted transaction on a real broker and the polls of
// two consumers: kafka-go's Reader, whose ReadCommitted stops at the last
// stable offset but hands out aborted records, and kafkatxn.Reader, which
// filters them. The checkers flag the first consumer's reads of the aborted
// transaction, and nothing of the second's.
func TestHistoryCatchesAbortedReads(t *testing.T) {
	if testing.Short() {
		t.Skip("a real broker")
	}
	brokers := testkit.Kafka(t)
	topic := fmt.Sprintf("chaos-history-%d", time.Now().UnixNano())
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := history.NewRecorder(nil)
	tp, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-writer", kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer tp.Close()
	for i, commit := range []bool{true, false, true} {
		keys := []string{fmt.Sprintf("k%d-a", i), fmt.Sprintf("k%d-b", i)}
		v := history.Value{Table: streamTxn, Keys: keys}
		rec.Add(history.Op{Process: "writer", Type: history.Invoke, F: history.Txn, Value: v})
		for _, k := range keys {
			_, err := tp.Produce(ctx, topic, 0, kafkatxn.Record{Key: []byte(k), Value: []byte(k)})
			require.NoError(t, err)
		}
		typ := history.Fail
		if commit {
			require.NoError(t, tp.Commit(ctx))
			typ = history.OK
		} else {
			require.NoError(t, tp.Abort(ctx))
		}
		rec.Add(history.Op{Process: "writer", Type: typ, F: history.Txn, Value: v})
	}
	store := "kafka." + topic
	// kafka-go's Reader: read_committed in name.
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, IsolationLevel: kafka.ReadCommitted, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	for last := ""; last != "k2-b"; {
		m, err := r.FetchMessage(ctx)
		require.NoError(t, err)
		rec.Add(history.Op{Process: "kafka-go", Type: history.OK, F: history.Poll,
			Value: history.Value{Table: store, Offsets: []int64{m.Offset}, Keys: []string{string(m.Key)}}})
		last = string(m.Key)
	}
	// kafkatxn.Reader, and the final read through it.
	err = readPartition(ctx, brokers, topic, 0, func(m kafka.Message) {
		v := history.Value{Table: store, Offsets: []int64{m.Offset}, Keys: []string{string(m.Key)}}
		rec.Add(history.Op{Process: "kafkatxn", Type: history.OK, F: history.Poll, Value: v})
	})
	require.NoError(t, err)
	final := history.Value{Table: store, Of: streamTxn}
	require.NoError(t, readPartition(ctx, brokers, topic, 0, func(m kafka.Message) {
		final.Offsets, final.Keys = append(final.Offsets, m.Offset), append(final.Keys, string(m.Key))
	}))
	rec.Add(history.Op{Process: "verifier", Type: history.OK, F: history.Read, Value: final})

	var aborted []string
	for _, f := range history.Check(rec.Ops(), history.Options{}) {
		t.Log(f)
		assert.Contains(t, f.Detail, "kafka-go", "a finding about kafkatxn.Reader")
		if f.Checker == history.AbortedRead {
			aborted = append(aborted, f.Key)
		}
	}
	assert.Equal(t, []string{"k1-a", "k1-b"}, aborted)
	assert.Equal(t, []string{"k0-a", "k0-b", "k2-a", "k2-b"}, final.Keys)
}
