package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

type lingeringConfig struct {
	Brokers     []string
	Topic, TxID string
}

// endOffsets returns the high watermark and the last stable offset
// (ListOffsets read_committed) of partition 0 of topic.
func endOffsets(t *testing.T, brokers []string, topic string) (hwm, lso int64) {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	for _, iso := range []kafka.IsolationLevel{kafka.ReadUncommitted, kafka.ReadCommitted} {
		res, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{IsolationLevel: iso,
			Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}}})
		require.NoError(t, err)
		require.Len(t, res.Topics[topic], 1)
		require.NoError(t, res.Topics[topic][0].Error)
		if iso == kafka.ReadUncommitted {
			hwm = res.Topics[topic][0].LastOffset
		} else {
			lso = res.Topics[topic][0].LastOffset
		}
	}
	return hwm, lso
}

// TestTxnAbortKilledProducer: a producer process opens a transaction and
// is killed with SIGKILL; its transaction lingers (the transaction timeout
// is ten minutes) and pins the partition's last stable offset, so
// read_committed readers see nothing written after it. txn list shows it
// with its partition, txn abort without -yes only says what it would do,
// and txn abort -yes aborts it: the last stable offset reaches the high
// watermark and txn list no longer shows it.
func TestTxnAbortKilledProducer(t *testing.T) {
	cfg := testkit.Setup(t, "kafka", func() lingeringConfig {
		brokers := testkit.Kafka(t)
		topic := testkit.Name(t, "lingering")
		testkit.CreateTopic(t, brokers, topic, 1)
		return lingeringConfig{Brokers: brokers, Topic: topic, TxID: topic + "-out-3"}
	})
	producer := testkit.Func(t, "producer", func(ctx context.Context) error {
		p, err := kafkatxn.NewTxProducer(ctx, cfg.Brokers, cfg.TxID, kafkatxn.TxOptions{TransactionTimeout: 10 * time.Minute})
		if err != nil {
			return err
		}
		if _, err := p.Produce(ctx, cfg.Topic, 0, kafkatxn.Record{Value: []byte("lingering")}); err != nil {
			return err
		}
		<-ctx.Done() // the transaction stays open until the process dies
		return nil
	})
	brokers := strings.Join(cfg.Brokers, ",")
	var out string
	require.Eventually(t, func() bool {
		var code int
		code, out, _ = exec(t, nil, "txn", "list", "-brokers", brokers, "-prefix", cfg.TxID)
		return code == exitOK && strings.Contains(out, cfg.TxID)
	}, 60*time.Second, 100*time.Millisecond, "the child's open transaction listed")
	require.Eventually(t, func() bool {
		hwm, _ := endOffsets(t, cfg.Brokers, cfg.Topic)
		return hwm == 1
	}, 60*time.Second, 100*time.Millisecond, "the child's record written")
	producer.Kill()
	t.Logf("txn list:\n%s", out)
	assert.Regexp(t, cfg.TxID+`\s+Ongoing\s+\d+\s+\d+\s+\d+\s+\S+\s+10m0s\s+`+cfg.Topic+`/0`, out)

	// A record written after the dead producer's: the LSO stays at the
	// open transaction's first record.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	plain, err := kafkatxn.NewProducer(ctx, cfg.Brokers, kafkatxn.ProducerOptions{})
	require.NoError(t, err)
	defer plain.Close()
	_, err = plain.Produce(ctx, cfg.Topic, 0, kafkatxn.Record{Value: []byte("after")})
	require.NoError(t, err)
	hwm, lso := endOffsets(t, cfg.Brokers, cfg.Topic)
	require.Equal(t, [2]int64{2, 0}, [2]int64{hwm, lso}, "high watermark and LSO while the transaction lingers")

	code, out, errOut := exec(t, nil, "txn", "describe", "-brokers", brokers, "-json", cfg.TxID)
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	var rows []txnRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 1)
	assert.Equal(t, kafkatxn.StateOngoing, rows[0].State)
	assert.Equal(t, map[string][]int{cfg.Topic: {0}}, rows[0].Partitions)

	code, out, errOut = exec(t, nil, "txn", "abort", "-brokers", brokers, cfg.TxID)
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	assert.Contains(t, out, "would abort")
	_, lso = endOffsets(t, cfg.Brokers, cfg.Topic)
	assert.Equal(t, int64(0), lso, "abort without -yes changes nothing")

	code, out, errOut = exec(t, nil, "txn", "abort", "-brokers", brokers, "-yes", cfg.TxID)
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	assert.Contains(t, out, "aborted the transaction of "+cfg.TxID)
	hwm, lso = endOffsets(t, cfg.Brokers, cfg.Topic)
	assert.Equal(t, hwm, lso, "the LSO reaches the high watermark once the abort returned")
	assert.Equal(t, int64(3), hwm, "the abort marker")

	code, out, errOut = exec(t, nil, "txn", "list", "-brokers", brokers, "-prefix", cfg.TxID)
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	assert.NotContains(t, out, cfg.TxID, "no open transaction left")
	code, _, errOut = exec(t, nil, "txn", "abort", "-brokers", brokers, "-yes", cfg.TxID)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "no open transaction")
}
