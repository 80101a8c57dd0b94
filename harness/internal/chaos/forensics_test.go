package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/harness/internal/chaos/history"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestDumpPartitions: the dump of a partition a finding names shows each
// transaction's records with their keys and the marker that ended it, so a
// failed run says whether the broker wrote the abort marker.
func TestDumpPartitions(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := fmt.Sprintf("dump_%d", time.Now().UnixNano())
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer tp.Close()
	for _, k := range []string{"kept", "dropped"} {
		_, err := tp.Produce(ctx, topic, 0, kafkatxn.Record{Key: []byte(k), Value: []byte(k)})
		require.NoError(t, err)
		if k == "kept" {
			require.NoError(t, tp.Commit(ctx))
		} else {
			require.NoError(t, tp.Abort(ctx))
		}
	}

	// The coordinator writes a transaction's markers after EndTxn returned.
	require.Eventually(t, func() bool {
		conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, 0)
		if err != nil {
			return false
		}
		defer conn.Close()
		end, err := conn.ReadLastOffset()
		return err == nil && end == 4
	}, time.Minute, 50*time.Millisecond, "the abort marker")

	files, err := dumpPartitions(ctx, brokers, []history.Finding{
		{Checker: history.AbortedRead, Table: "kafka." + topic, Partition: 0},
		{Checker: history.AbortedRead, Table: "kafka." + topic, Partition: 0}, // once per partition
		{Checker: history.Lost, Table: "clickhouse.events"},                   // not Kafka's
	}, t.TempDir())
	require.NoError(t, err)
	require.Len(t, files, 1)
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	dump := string(b)
	assert.Regexp(t, `(?m)^0-0\tpid \d+ epoch \d+ seq 0\ttransactional data\tkept$`, dump)
	assert.Regexp(t, `(?m)^1-1\tpid \d+ epoch \d+ seq -1\tCOMMIT marker$`, dump)
	assert.Regexp(t, `(?m)^2-2\tpid \d+ epoch \d+ seq \d+\ttransactional data\tdropped$`, dump)
	assert.Regexp(t, `(?m)^3-3\tpid \d+ epoch \d+ seq -1\tABORT marker$`, dump)
	assert.Contains(t, dump, "# high watermark 4")
}
