package kafkapub_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestIdempotentPublisherLostAcks publishes concurrently while the broker
// answers every third produce with REQUEST_TIMED_OUT after writing it (an
// acknowledgement lost after the write): every delivery is in the topic
// exactly once, on its key's partition, with its headers.
func TestIdempotentPublisherLostAcks(t *testing.T) {
	const n = 150
	k := testkit.StartKfake(t)
	brokers := k.Brokers()
	topic := testkit.Name(t, "idem")
	testkit.CreateTopic(t, brokers, topic, 3)
	var mu sync.Mutex
	count := 0
	k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: -1,
		When: func(kmsg.Request) bool { mu.Lock(); defer mu.Unlock(); count++; return count%3 == 0 }})

	ctx := context.Background()
	pub, err := kafkapub.NewIdempotent(ctx, brokers, topic, kafkapub.Options{})
	require.NoError(t, err)
	defer pub.Close()
	var wg sync.WaitGroup
	for w := range 5 {
		wg.Go(func() {
			for i := w; i < n; i += 5 {
				d := idempotency.Delivery{Key: fmt.Sprintf("d%d", i), Source: "github", Body: []byte(fmt.Sprintf("body%d", i))}
				assert.NoError(t, pub.Publish(ctx, d))
			}
		})
	}
	wg.Wait()
	mu.Lock()
	faults := count / 3
	mu.Unlock()
	require.Positive(t, faults)

	seen := map[string]int{}
	for p := range 3 {
		for _, m := range testkit.ReadTopic(t, brokers, topic, p) {
			want := (kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: m.Key}, 0, 1, 2)
			assert.Equal(t, want, p, "key %s on its partition", m.Key)
			md, err := kafkapub.ReadMetadata(m)
			require.NoError(t, err)
			assert.Equal(t, "github", md.Source)
			seen[md.EventID]++
		}
	}
	assert.Len(t, seen, n)
	for k, c := range seen {
		assert.Equal(t, 1, c, "delivery %s", k)
	}
	t.Logf("%d produce answers lost after the write, no duplicate", faults)
}

// IdempotentPublisher honours Logger, MeterProvider and Now as Publisher
// does: the durability warning at start-up, and one count per Publish by
// result with its duration on Options.Now's clock.
func TestIdempotentPublisherObservability(t *testing.T) {
	k := testkit.StartKfake(t) // one broker: acks=all is acks=1 in disguise
	brokers := k.Brokers()
	topic := testkit.Name(t, "idem")
	testkit.CreateTopic(t, brokers, topic, 2)

	var logs bytes.Buffer
	reader := sdkmetric.NewManualReader()
	var (
		mu    sync.Mutex
		clock = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	ctx := context.Background()
	pub, err := kafkapub.NewIdempotent(ctx, brokers, topic, kafkapub.Options{
		Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Now: func() time.Time { // every reading one second later
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(time.Second)
			return clock
		},
	})
	require.NoError(t, err)
	assert.Contains(t, logs.String(), "acks=all is weaker than it sounds")
	d, err := pub.CheckDurability(ctx)
	require.NoError(t, err)
	assert.Equal(t, kafkapub.Durability{Topic: topic, MinInSyncReplicas: 1, ReplicationFactor: 1}, d)

	for _, key := range []string{"d1", "d2"} {
		require.NoError(t, pub.Publish(ctx, idempotency.Delivery{Key: key, Source: "github", Body: []byte(`{}`)}))
	}
	// A refusal the broker gives every attempt alike: not written.
	k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.MessageTooLarge})
	err = pub.Publish(ctx, idempotency.Delivery{Key: "d3", Source: "github", Body: []byte(`{}`)})
	require.Error(t, err)
	assert.False(t, kafkapub.IsOutcomeUnknown(err), "kafkatxn says it was not written: %v", err)
	require.NoError(t, pub.Close())
	err = pub.Publish(ctx, idempotency.Delivery{Key: "d4", Source: "github", Body: []byte(`{}`)})
	assert.ErrorIs(t, err, kafkatxn.ErrClosed)
	assert.False(t, kafkapub.IsOutcomeUnknown(err), "nothing sent after Close")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	var latency metricdata.HistogramDataPoint[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					r, _ := dp.Attributes.Value("result")
					got[m.Name+"/result="+r.AsString()] += dp.Value
				}
			case metricdata.Histogram[float64]:
				require.Equal(t, "exactlyonce.kafkapub.publish.duration", m.Name)
				require.Len(t, data.DataPoints, 1)
				latency = data.DataPoints[0]
			}
		}
	}
	assert.Equal(t, map[string]int64{
		"exactlyonce.kafkapub.messages/result=ok":     2,
		"exactlyonce.kafkapub.messages/result=failed": 2,
	}, got)
	assert.Equal(t, uint64(4), latency.Count)
	assert.InDelta(t, 4.0, latency.Sum, 1e-9, "one second of Options.Now per Publish")
}
