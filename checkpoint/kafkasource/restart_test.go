package kafkasource_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

func TestIsRetryable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		give error
		want bool
	}{
		{name: "nil", give: nil, want: false},
		{name: "refused dial, wrapped", give: fmt.Errorf("chsink: insert: %w", refused), want: true},
		{name: "reset", give: fmt.Errorf("x: %w", syscall.ECONNRESET), want: true},
		{name: "unexpected EOF", give: io.ErrUnexpectedEOF, want: true},
		{name: "kafka temporary", give: kafka.LeaderNotAvailable, want: true},
		{name: "kafka permanent", give: kafka.TopicAuthorizationFailed, want: false},
		{name: "bad record", give: errors.New("parse offset 7: invalid JSON"), want: false},
		{name: "out of range", give: &kafkasource.OffsetOutOfRangeError{}, want: false},
		{name: "poison, even of a network error", give: &kafkasource.PoisonError{Err: kafkasource.Poison(io.ErrUnexpectedEOF)}, want: false},
		{name: "cancelled", give: fmt.Errorf("x: %w", context.Canceled), want: false},
		{name: "deadline", give: fmt.Errorf("x: %w", context.DeadlineExceeded), want: false},
		{name: "deadline while the server said try again", give: fmt.Errorf("x: %w (last error: %w)",
			context.DeadlineExceeded, kafka.LeaderNotAvailable), want: true},
		{name: "deadline over a permanent error", give: fmt.Errorf("x: %w (last error: %w)",
			context.DeadlineExceeded, kafka.TransactionalIDAuthorizationFailed), want: false},
		{name: "insert retries exhausted", give: fmt.Errorf("process: %w", &chsink.InsertError{Err: errors.New("TOO_MANY_PARTS")}), want: true},
		{name: "insert rejected", give: &chsink.InsertError{Permanent: true, Err: io.EOF}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, kafkasource.IsRetryable(tt.give))
		})
	}
}

// flaky is a counter whose Snapshot fails with a refused connection while
// its partition's "server" is down: what a sink does while ClickHouse is.
type flaky struct {
	counter
	down *atomic.Bool
}

func (f *flaky) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	if f.down.Load() {
		return nil, fmt.Errorf("insert: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	}
	return f.counter.Snapshot(ctx, id)
}

// TestRestartKeepsOtherPartitions proves the restart strategy: while the
// server of partition 0 is down, its chain fails with a retryable error and
// is built again with backoff (counted in exactlyonce.kafkasource.chain.restarts), Run
// does not return, partitions 1 and 2 keep checkpointing; when the server
// is back, partition 0 catches up from its last checkpoint with every
// record counted exactly once.
func TestRestartKeepsOtherPartitions(t *testing.T) {
	const partitions, n = 3, 50
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, partitions)
	produce(t, brokers, topic, partitions, 0, n)

	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer coord.Close()
	reader := sdkmetric.NewManualReader()
	var down atomic.Bool
	var (
		mu     sync.Mutex
		builds = map[int]int{}
	)
	opts := fastGroup
	opts.Logger = testLogger(t)
	opts.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	opts.Restart = kafkasource.Restart{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "group"), Topics: []string{topic}}),
		coord, func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
			f := &flaky{down: &atomic.Bool{}}
			if p.Partition == 0 {
				f.down = &down
			}
			mu.Lock()
			builds[p.Partition]++
			mu.Unlock()
			return &kafkasource.Processor{
				Participants: map[string]checkpoint.Participant{"counter": f},
				Process:      func(_ context.Context, m kafka.Message) error { return f.add(m) },
			}, nil
		}, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitCounts(t, store, topic, map[int]int64{0: n, 1: n, 2: n})

	down.Store(true)
	produce(t, brokers, topic, partitions, n, n)
	// Partitions 1 and 2 go on while partition 0 fails again and again.
	waitCounts(t, store, topic, map[int]int64{1: 2 * n, 2: 2 * n})
	require.Eventually(t, func() bool { return restarts(t, reader) >= 3 }, time.Minute, 10*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run returned while a server was down: %v", err)
	default:
	}
	produce(t, brokers, topic, partitions, 2*n, n)
	waitCounts(t, store, topic, map[int]int64{1: 3 * n, 2: 3 * n})
	cp := latestOf(t, store, topic, 0)
	count, _ := decodeCounter(t, cp.States["counter"])
	assert.Equal(t, int64(n), count, "partition 0 checkpoints nothing while down")

	down.Store(false)
	waitCounts(t, store, topic, map[int]int64{0: 3 * n, 1: 3 * n, 2: 3 * n})
	cp = latestOf(t, store, topic, 0)
	count, sum := decodeCounter(t, cp.States["counter"])
	assert.Equal(t, int64(3*n), count, "every record once")
	assert.Equal(t, sumTo(3*n), sum)
	mu.Lock()
	assert.Greater(t, builds[0], 3, "partition 0's chain was built again")
	assert.Equal(t, 1, builds[1], "partition 1's chain was never restarted")
	mu.Unlock()
}

// TestRestartDisabled proves Restart.Disabled ends Run on a retryable
// failure, and MaxAttempts ends it after that many restarts.
func TestRestartDisabled(t *testing.T) {
	tests := []struct {
		name    string
		restart kafkasource.Restart
		want    error
	}{
		{name: "disabled", restart: kafkasource.Restart{Disabled: true}, want: syscall.ECONNREFUSED},
		{name: "max attempts", restart: kafkasource.Restart{InitialBackoff: time.Millisecond, MaxAttempts: 2},
			want: kafkasource.ErrRestartsExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			brokers := testkit.Kafka(t)
			topic := testkit.Name(t, "topic")
			testkit.CreateTopic(t, brokers, topic, 1)
			produce(t, brokers, topic, 1, 0, 5)
			store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
			require.NoError(t, err)
			coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 20 * time.Millisecond})
			require.NoError(t, err)
			defer coord.Close()
			var down atomic.Bool
			down.Store(true)
			var builds atomic.Int32
			opts := fastGroup
			opts.Restart = tt.restart
			src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "group"), Topics: []string{topic}}),
				coord, func(context.Context, checkpoint.TopicPartition) (*kafkasource.Processor, error) {
					builds.Add(1)
					f := &flaky{down: &down}
					return &kafkasource.Processor{
						Participants: map[string]checkpoint.Participant{"counter": f},
						Process:      func(_ context.Context, m kafka.Message) error { return f.add(m) },
					}, nil
				}, opts)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			err = src.Run(ctx)
			require.ErrorIs(t, err, tt.want)
			if tt.restart.MaxAttempts > 0 {
				assert.Equal(t, int32(tt.restart.MaxAttempts+1), builds.Load())
			}
		})
	}
}

// waitCounts waits until the newest checkpoint of each listed partition
// has counted want[p] records.
func waitCounts(t *testing.T, store *checkpoint.Store, topic string, want map[int]int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		for p, w := range want {
			cp := latestOf(t, store, topic, p)
			if cp == nil {
				return false
			}
			if c, _ := decodeCounter(t, cp.States["counter"]); c != w {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond, "counts %v", want)
}

func latestOf(t *testing.T, store *checkpoint.Store, topic string, p int) *checkpoint.Checkpoint {
	t.Helper()
	cp, err := store.Latest(context.Background(), checkpoint.TopicPartition{Topic: topic, Partition: p})
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	return cp
}

func restarts(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "exactlyonce.kafkasource.chain.restarts" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				n += dp.Value
			}
		}
	}
	return n
}
