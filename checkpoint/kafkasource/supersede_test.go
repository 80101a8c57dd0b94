package kafkasource_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestGenerationCurrent: the check a chain makes before it restarts (and
// after a save refused with checkpoint.ErrSuperseded) says a generation is
// current while it is, and ended once another member joined the group,
// before the old member's own heartbeat (a minute apart here) has told it.
func TestGenerationCurrent(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, 2)
	// The check is the classic protocol's (kafka-go's members below); the
	// Source only asks it, so the group is not run under the switch.
	group := kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "group"), Topics: []string{topic}}
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{})
	require.NoError(t, err)
	defer coord.Close()
	src, err := kafkasource.New(group, coord, (&counters{}).newProcessor, fastGroup)
	require.NoError(t, err)

	cfg := kafka.ConsumerGroupConfig{ID: group.ID, Brokers: brokers, Topics: group.Topics,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 2 * time.Second,
		// The old member's own heartbeat comes late: the check must not
		// wait for it.
		HeartbeatInterval: time.Minute}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	first, err := kafka.NewConsumerGroup(cfg)
	require.NoError(t, err)
	defer first.Close()
	var gen *kafka.Generation
	for gen == nil {
		// kafka-go reports a coordinator not ready yet and tries again.
		gen, err = first.Next(ctx)
		require.NoError(t, ctx.Err(), "joining the group: %v", err)
	}
	current, err := src.GenerationCurrent(ctx, gen)
	require.NoError(t, err)
	assert.True(t, current, "the only member's generation")

	second, err := kafka.NewConsumerGroup(cfg)
	require.NoError(t, err)
	defer second.Close()
	go func() {
		for ctx.Err() == nil {
			if _, err := second.Next(ctx); err == nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
		}
	}()
	require.Eventually(t, func() bool {
		current, err := src.GenerationCurrent(ctx, gen)
		return err == nil && !current
	}, time.Minute, 50*time.Millisecond, "a member joined: the generation ended")
}

// TestSupersededSaveRestarts: a checkpoint of a later generation appears
// in the partition's storage while its chain runs (a group created anew
// counts generations from 1 again, so a later number is not always a
// later owner). The chain's next save is refused with
// checkpoint.ErrSuperseded; the group coordinator says the chain's
// generation is current, so the chain restarts from the newest checkpoint
// and goes on: Run does not end, and every record is counted once. Under
// ProtocolConsumer the chain stops and the member starts it again at its
// next heartbeat. Either way the restart is counted in the metric.
func TestSupersededSaveRestarts(t *testing.T) {
	const n = 30
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, 1)
	produce(t, brokers, topic, 1, 0, n)
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer coord.Close()
	reader := sdkmetric.NewManualReader()
	opts := fastGroup
	opts.Logger = testLogger(t)
	opts.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	opts.Restart = kafkasource.Restart{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	var builds atomic.Int32
	cs := &counters{}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "group"), Topics: []string{topic}}),
		coord, func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
			builds.Add(1)
			return cs.newProcessor(ctx, p)
		}, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitCounts(t, store, topic, map[int]int64{0: n})

	cp := latestOf(t, store, topic, 0)
	later := *cp
	later.ID, later.Generation = cp.ID+1000, cp.Generation+1_000_000
	_, err = store.Save(t.Context(), &later)
	require.NoError(t, err)
	restarted := func() bool { return restarts(t, reader) >= 1 }
	require.Eventually(t, restarted, time.Minute, 10*time.Millisecond, "the refused save restarted the chain")

	produce(t, brokers, topic, 1, n, n)
	waitCounts(t, store, topic, map[int]int64{0: 2 * n})
	select {
	case err := <-done:
		t.Fatalf("Run returned: %v", err)
	default:
	}
	cp = latestOf(t, store, topic, 0)
	count, sum := decodeCounter(t, cp.States["counter"])
	assert.Equal(t, int64(2*n), count, "every record once")
	assert.Equal(t, sumTo(2*n), sum)
	assert.Greater(t, cp.ID, later.ID, "the restarted chain went on from the later checkpoint")
	assert.GreaterOrEqual(t, builds.Load(), int32(2))
}
