package kafkasource_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// warnings is a slog.Handler that keeps the messages of Warn records.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}

// has reports whether a kept message contains s.
func (w *warnings) has(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// watchedSource starts a Source of group on topic that logs to w and
// measures with reader, stopped at cleanup.
func watchedSource(t *testing.T, brokers []string, group, topic string, proto kafkasource.GroupProtocol, w *warnings,
	reader *sdkmetric.ManualReader) *checkpoint.Store {
	t.Helper()
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = coord.Close() })
	opts := fastGroup
	opts.Logger = slog.New(w)
	opts.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	opts.TopicPollInterval = 100 * time.Millisecond
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}, Protocol: proto},
		coord, (&counters{}).newProcessor, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	return store
}

// metricValue returns the last value of gauge or the sum of counter name
// (0 and false when nothing was recorded).
func metricValue(t testing.TB, reader *sdkmetric.ManualReader, name string) (float64, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Gauge[float64]:
				if len(d.DataPoints) > 0 {
					return d.DataPoints[0].Value, true
				}
			case metricdata.Sum[int64]:
				var n int64
				for _, dp := range d.DataPoints {
					n += dp.Value
				}
				return float64(n), len(d.DataPoints) > 0
			}
		}
	}
	return 0, false
}

// eachProtocol runs f under ProtocolClassic on the kit's broker and under
// ProtocolConsumer on Apache Kafka 4 or kfake (skipped on 3.9).
func eachProtocol(t *testing.T, f func(t *testing.T, brokers []string, proto kafkasource.GroupProtocol)) {
	t.Run("classic", func(t *testing.T) { f(t, testkit.Kafka(t), kafkasource.ProtocolClassic) })
	t.Run("consumer", func(t *testing.T) { f(t, consumerProtocolKafka(t), kafkasource.ProtocolConsumer) })
}

// TestIdleMembers proves that a group with more members than partitions is
// logged and counted, under both protocols: three Sources on a
// two-partition topic leave one member idle, which each reports once it
// has settled.
func TestIdleMembers(t *testing.T) {
	eachProtocol(t, func(t *testing.T, brokers []string, proto kafkasource.GroupProtocol) {
		topic, group := testkit.Name(t, "topic"), testkit.Name(t, "group")
		testkit.CreateTopic(t, brokers, topic, 2)
		var ws [3]warnings
		var readers [3]*sdkmetric.ManualReader
		for i := range ws {
			readers[i] = sdkmetric.NewManualReader()
			watchedSource(t, brokers, group, topic, proto, &ws[i], readers[i])
		}
		require.Eventually(t, func() bool {
			for i := range ws {
				if v, ok := metricValue(t, readers[i], "exactlyonce.kafkasource.group.idle_members"); !ok || v != 1 {
					return false
				}
				if !ws[i].has("members 3 > partitions 2: 1 members idle; add partitions or run fewer instances") {
					return false
				}
			}
			return true
		}, time.Minute, 20*time.Millisecond, "every member reports the one idle member")
	})
}

// TestPartitionCountChange proves that partitions added under a running
// Source are reported, with the old and the new count, and counted, under
// both protocols.
func TestPartitionCountChange(t *testing.T) {
	eachProtocol(t, func(t *testing.T, brokers []string, proto kafkasource.GroupProtocol) {
		topic, group := testkit.Name(t, "topic"), testkit.Name(t, "group")
		testkit.CreateTopic(t, brokers, topic, 2)
		var w warnings
		reader := sdkmetric.NewManualReader()
		store := watchedSource(t, brokers, group, topic, proto, &w, reader)
		produce(t, brokers, topic, 2, 0, 5)
		waitCounts(t, store, topic, map[int]int64{0: 5, 1: 5})
		n, _ := metricValue(t, reader, "exactlyonce.kafkasource.topic.partition_changes")
		require.Zero(t, n, "no change before the topic grows")
		require.Eventually(t, func() bool {
			_, ok := metricValue(t, reader, "exactlyonce.kafkasource.group.idle_members")
			return ok
		}, time.Minute, 20*time.Millisecond, "the group is checked")
		v, _ := metricValue(t, reader, "exactlyonce.kafkasource.group.idle_members")
		require.Zero(t, v, "a lone member of a two-partition topic is not idle")
		require.False(t, w.has("members idle"), "no idle warning for a lone member")

		addPartitions(t, brokers, topic, 3)
		want := fmt.Sprintf("topic %q partition count changed from 2 to 3: key->partition routing changed", topic)
		require.Eventually(t, func() bool {
			n, _ := metricValue(t, reader, "exactlyonce.kafkasource.topic.partition_changes")
			return n == 1 && w.has(want)
		}, time.Minute, 20*time.Millisecond, "the new partition count is reported")
		// The new partition is read too.
		produce(t, brokers, topic, 3, 5, 5)
		waitCounts(t, store, topic, map[int]int64{0: 10, 1: 10, 2: 5})
	})
}
