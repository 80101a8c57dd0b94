package kafkasource_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// envOutage sets how long TestClickHouseOutage keeps ClickHouse down
// (a Go duration); default defaultOutage.
const (
	envOutage     = "KAFKASOURCE_CLICKHOUSE_OUTAGE"
	defaultOutage = 30 * time.Second
)

type offsetRow struct{ Offset uint64 }

func offsetSchema() []chsink.Column[offsetRow] {
	return []chsink.Column[offsetRow]{chsink.UInt64("offset", func(r *offsetRow) uint64 { return r.Offset })}
}

const offsetsDDL = `CREATE TABLE %s.offsets (offset UInt64) ENGINE = MergeTree ORDER BY offset
	SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`

// TestClickHouseOutage proves the restart strategy against a real server:
// partition 0 writes to a ClickHouse that is killed with SIGKILL and kept
// down for KAFKASOURCE_CLICKHOUSE_OUTAGE (30 s by default), partitions 1
// and 2 to another one. While it is down, partition 0's chain fails and is
// restarted with backoff, Run keeps running and partitions 1 and 2 keep
// writing; once it is back, partition 0 catches up and its table holds
// every record exactly once.
func TestClickHouseOutage(t *testing.T) {
	outage := defaultOutage
	if v := os.Getenv(envOutage); v != "" {
		var err error
		outage, err = time.ParseDuration(v)
		require.NoError(t, err, envOutage)
	}
	const partitions, n = 3, 200
	down := testkit.StartClickHouse(t)
	downDB := testkit.NewDatabase(t, down.Addr())
	upAddr, upDB := testkit.ClickHouse(t)
	ctx := t.Context()
	require.NoError(t, testkit.Exec(ctx, down.Addr(), "", fmt.Sprintf(offsetsDDL, downDB)))
	require.NoError(t, testkit.Exec(ctx, upAddr, "", fmt.Sprintf(offsetsDDL, upDB)))
	// Partitions 1 and 2 share the table on the other server: their total
	// is what shows they go on.
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, partitions)
	produce(t, brokers, topic, partitions, 0, n)

	storage := checkpoint.NewMemoryStorage()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 200 * time.Millisecond})
	require.NoError(t, err)
	defer coord.Close()
	reader := sdkmetric.NewManualReader()
	opts := fastGroup
	opts.Logger = testLogger(t)
	opts.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	opts.Restart = kafkasource.Restart{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "group"), Topics: []string{topic}}),
		coord, func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
			addr, db := upAddr, upDB
			if p.Partition == 0 {
				addr, db = down.Addr(), downDB
			}
			s, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: "offsets"},
				p, storage, offsetSchema,
				chsink.Options{Database: db, MaxDelay: 50 * time.Millisecond, MaxAttempts: 3,
					InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, DialTimeout: 500 * time.Millisecond})
			if err != nil {
				return nil, err
			}
			return &kafkasource.Processor{
				Participants: map[string]checkpoint.Participant{"offsets": s},
				Process: func(ctx context.Context, m kafka.Message) error {
					return s.Add(ctx, sink.Position{Offset: m.Offset}, offsetRow{Offset: uint64(m.Offset)})
				},
			}, nil
		}, opts)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-done)
	}()

	count := func(addr, db string) uint64 {
		return testkit.Count(t, addr, db, "SELECT count() FROM offsets")
	}
	require.Eventually(t, func() bool {
		return count(down.Addr(), downDB) == n && count(upAddr, upDB) == 2*n
	}, time.Minute, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		cp := latestOf(t, store, topic, 0)
		return cp != nil && cp.NextOffset == n
	}, time.Minute, 20*time.Millisecond)

	down.Kill()
	killed := time.Now()
	for i := 1; time.Since(killed) < outage; i++ {
		produce(t, brokers, topic, partitions, i*n, n)
		require.Eventually(t, func() bool { return count(upAddr, upDB) == uint64(2*(i+1)*n) },
			time.Minute, 20*time.Millisecond, "partitions 1 and 2 go on while partition 0's ClickHouse is down")
		select {
		case err := <-done:
			t.Fatalf("Run returned while ClickHouse was down: %v", err)
		default:
		}
		time.Sleep(min(time.Second, outage-time.Since(killed)))
	}
	assert.Positive(t, restarts(t, reader), "partition 0's chain was restarted")
	cp := latestOf(t, store, topic, 0)
	require.NotNil(t, cp)
	assert.Equal(t, int64(n), cp.NextOffset, "no checkpoint of partition 0 passes what ClickHouse has")

	down.Restart()
	total := committedEnd(t, brokers, topic)
	require.Eventually(t, func() bool { return count(down.Addr(), downDB) >= uint64(total) },
		2*time.Minute, 50*time.Millisecond, "partition 0 catches up")
	assert.Equal(t, uint64(total), count(down.Addr(), downDB))
	assert.Equal(t, uint64(total), testkit.Count(t, down.Addr(), downDB, "SELECT uniqExact(offset) FROM offsets"), "every record once")
	assert.Equal(t, uint64(total-1), testkit.Count(t, down.Addr(), downDB, "SELECT max(offset) FROM offsets"))
}

// committedEnd returns the high watermark of partition 0.
func committedEnd(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	conn, err := kafka.DialLeader(t.Context(), "tcp", brokers[0], topic, 0)
	require.NoError(t, err)
	defer conn.Close()
	_, last, err := conn.ReadOffsets()
	require.NoError(t, err)
	return last
}
