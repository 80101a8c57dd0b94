package kafkasink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestSinkMetrics: what an operator watches moves with the protocol:
// records sent, each pre-commit and commit timed, transactions committed at
// CheckpointCompleted or Restore, found aborted, failed, and a fenced
// zombie. Every series carries the chain's source partition.
func TestSinkMetrics(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "out")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	src := checkpoint.TopicPartition{Topic: "in", Partition: 3}
	newSink := func() *kafkasink.Sink {
		s, err := kafkasink.New(brokers, topic, src, kafkasink.Options{BatchSize: 2, MeterProvider: mp})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}

	s := newSink()
	write(t, s, topic, "a", "b", "c") // two sent now, one at the barrier
	_, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, s.CheckpointCompleted(ctx, 1))
	_, err = s.Snapshot(ctx, 2) // nothing to commit
	require.NoError(t, err)
	require.NoError(t, s.CheckpointCompleted(ctx, 2))

	// A crash after the pre-commit: the next incarnation commits at
	// Restore, and the zombie's own commit is fenced.
	write(t, s, topic, "d")
	state, err := s.Snapshot(ctx, 3)
	require.NoError(t, err)
	require.NoError(t, newSink().Restore(ctx, state))
	assert.ErrorIs(t, s.CheckpointCompleted(ctx, 3), kafkatxn.ErrFenced)

	// A prepared transaction aborted by a fresh start before any restore.
	zombie := newSink()
	write(t, zombie, topic, "lost")
	state, err = zombie.Snapshot(ctx, 5)
	require.NoError(t, err)
	write(t, newSink(), topic, "x", "y") // starts its producer: fences, aborts
	assert.ErrorIs(t, newSink().Restore(ctx, state), kafkatxn.ErrAborted)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					assertSource(t, dp.Attributes, m.Name)
					name := m.Name
					if o, ok := dp.Attributes.Value("outcome"); ok {
						name += "/" + o.AsString()
					}
					counts[name] += dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					assertSource(t, dp.Attributes, m.Name)
					counts[m.Name] += int64(dp.Count)
				}
			}
		}
	}
	assert.Equal(t, map[string]int64{
		"exactlyonce.kafkasink.records_written":        7, // a b c d lost x y
		"exactlyonce.kafkasink.precommit.duration":     4, // checkpoints 1, 2, 3, 5
		"exactlyonce.kafkasink.commit.duration":        4,
		"exactlyonce.kafkasink.transactions/committed": 1,
		"exactlyonce.kafkasink.transactions/restored":  1,
		"exactlyonce.kafkasink.transactions/failed":    1,
		"exactlyonce.kafkasink.transactions/aborted":   1,
		"exactlyonce.kafkasink.fenced":                 1,
	}, counts)
}

func assertSource(t *testing.T, attrs attribute.Set, name string) {
	t.Helper()
	topic, _ := attrs.Value("messaging.destination.name")
	part, _ := attrs.Value("messaging.destination.partition.id")
	assert.Equal(t, []string{"in", "3"}, []string{topic.AsString(), part.AsString()}, name)
}

// TestSinkTransactionAge: the age gauge follows the sink's transaction,
// open from just before its first record, prepared after the snapshot
// (counted from the producer's own start), gone once committed, and
// beside it the timeout the alert divides by. A closed sink reports
// nothing.
func TestSinkTransactionAge(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "out")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	src := checkpoint.TopicPartition{Topic: "in", Partition: 3}
	s, err := kafkasink.New(brokers, topic, src, kafkasink.Options{
		BatchSize: 1, MeterProvider: mp, Tx: kafkatxn.TxOptions{TransactionTimeout: 42 * time.Second},
	})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })

	// gauges returns the age by state and the timeout observed now.
	gauges := func() (map[string]float64, float64) {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		ages, timeout := map[string]float64{}, -1.0
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				g, ok := m.Data.(metricdata.Gauge[float64])
				if !ok {
					continue
				}
				for _, dp := range g.DataPoints {
					assertSource(t, dp.Attributes, m.Name)
					switch m.Name {
					case "exactlyonce.kafkasink.transaction.age":
						st, _ := dp.Attributes.Value("state")
						ages[st.AsString()] = dp.Value
					case "exactlyonce.kafkasink.transaction.timeout":
						timeout = dp.Value
					}
				}
			}
		}
		return ages, timeout
	}

	ages, timeout := gauges()
	assert.Empty(t, ages, "no transaction yet")
	assert.Equal(t, 42.0, timeout)

	before := time.Now()
	write(t, s, topic, "a") // BatchSize 1: sent now, the transaction opens
	ages, _ = gauges()
	require.Contains(t, ages, "open")
	assert.Len(t, ages, 1)
	assert.GreaterOrEqual(t, ages["open"], 0.0)
	assert.LessOrEqual(t, ages["open"], time.Since(before).Seconds())

	_, err = s.Snapshot(ctx, 1)
	require.NoError(t, err)
	ages, _ = gauges()
	require.Contains(t, ages, "prepared")
	assert.Len(t, ages, 1)
	assert.LessOrEqual(t, ages["prepared"], time.Since(before).Seconds(), "the producer started it after the sink's stamp")
	assert.GreaterOrEqual(t, ages["prepared"], 0.0)

	require.NoError(t, s.CheckpointCompleted(ctx, 1))
	ages, timeout = gauges()
	assert.Empty(t, ages, "committed: no transaction")
	assert.Equal(t, 42.0, timeout)

	require.NoError(t, s.Close())
	ages, timeout = gauges()
	assert.Empty(t, ages)
	assert.Equal(t, -1.0, timeout, "a closed sink reports no timeout")
}
