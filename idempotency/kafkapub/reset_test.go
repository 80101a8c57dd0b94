package kafkapub_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestPublisherResetsAfterStaleMetadata injects a streak of
// NOT_LEADER_OR_FOLLOWER answers (on kfake, which has request hooks): after
// ResetAfter of them in a row the Publisher replaces its Writers and
// Transport, once, logged once and counted; not again within WriteTimeout;
// publishes go through the fresh writer. Then, with resets allowed on every
// streak, concurrent publishes through faults and resets each land once.
// After Close no goroutine of kafka-go is left, old generations included.
func TestPublisherResetsAfterStaleMetadata(t *testing.T) {
	k := testkit.StartKfake(t)
	brokers := k.Brokers()
	topic := testkit.Name(t, "events")
	testkit.CreateTopic(t, brokers, topic, 1)
	before := kafkaGoGoroutines()

	logs := &syncBuffer{}
	reader := sdkmetric.NewManualReader()
	clock := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ctx := context.Background()
	pub, err := kafkapub.New(ctx, brokers, topic, kafkapub.Options{
		MaxAttempts:         1, // each refusal is one Publish's answer
		ResetAfter:          3,
		SkipDurabilityCheck: true,
		Logger:              slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		MeterProvider:       sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Now:                 clock.Now,
	})
	require.NoError(t, err)
	publish := func(key string) error {
		return pub.Publish(ctx, idempotency.Delivery{Key: key, Source: "github", Body: []byte(`{}`)})
	}
	resets := func() int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if data, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "exactlyonce.kafkapub.writer.resets" {
					var n int64
					for _, dp := range data.DataPoints {
						n += dp.Value
					}
					return n
				}
			}
		}
		return 0
	}
	stale := func(n int) {
		t.Helper()
		k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: n})
		for i := range n {
			err := publish(fmt.Sprintf("refused-%d-%d", resets(), i))
			require.Error(t, err)
			assert.False(t, kafkapub.IsOutcomeUnknown(err), "one attempt, refused: not written")
		}
	}

	require.NoError(t, publish("d0"))
	clock.Advance(time.Minute)
	stale(2)
	require.NoError(t, publish("d1"), "a success ends the streak")
	stale(2)
	assert.Equal(t, int64(0), resets(), "two in a row are below ResetAfter")
	stale(1)
	assert.Equal(t, int64(1), resets(), "the third in a row resets")
	require.NoError(t, publish("d2"), "through the fresh writer")
	stale(3)
	assert.Equal(t, int64(1), resets(), "not again within WriteTimeout")
	assert.Equal(t, 1, strings.Count(logs.String(), "replacing the writer"), "logged once per reset:\n%s", logs)

	// Every reading of the clock a minute later: every streak may reset.
	clock.Step(time.Minute)
	fault := k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 40})
	var wg sync.WaitGroup
	const workers, each = 8, 25
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("c%d-%d", w, i)
				for attempt := 0; publish(key) != nil; attempt++ {
					if !assert.Less(t, attempt, 1000, "%s is never published", key) {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	fault.Remove()
	assert.Greater(t, resets(), int64(1), "the concurrent streaks reset too")
	require.NoError(t, pub.Close())
	assert.Error(t, publish("after-close"))

	copies := map[string]int{}
	for _, m := range scanTopic(t, brokers, topic, 1) {
		md, err := kafkapub.ReadMetadata(m)
		require.NoError(t, err)
		copies[md.EventID]++
	}
	want := map[string]int{"d0": 1, "d1": 1, "d2": 1}
	for w := range workers {
		for i := range each {
			want[fmt.Sprintf("c%d-%d", w, i)] = 1
		}
	}
	assert.Equal(t, want, copies, "every acknowledged delivery once, nothing refused")
	require.Eventually(t, func() bool { return kafkaGoGoroutines() <= before }, 10*time.Second, 20*time.Millisecond,
		"no kafka-go goroutine left after Close")
}

// stepClock is a clock that moves when told, and by step on every reading.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
	by  time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.by)
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *stepClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.by = d
}

// kafkaGoGoroutines counts the goroutines running kafka-go's code.
func kafkaGoGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "segmentio/kafka-go.") {
			n++
		}
	}
	return n
}
