package kafkasource_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

const (
	envPoisonChild = "KAFKASOURCE_POISON_CHILD"
	poisonTopic    = "poison"
	poisonDLQ      = "poison-dlq"
	poisonParts    = 2
	poisonRecords  = 600 // per partition
)

// poisonOffsets are the offsets, in every partition, whose value is not a
// number: the counter cannot decode them.
var poisonOffsets = []int{37, 150, 151, 333, 599}

func isPoison(offset int) bool {
	for _, o := range poisonOffsets {
		if o == offset {
			return true
		}
	}
	return false
}

// producePoison writes poisonRecords records to every partition: the
// decimal offset, or garbage at poisonOffsets. Every record has a key and a
// header, which the dead-letter record must keep.
func producePoison(t testing.TB, brokers []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for p := range poisonParts {
		recs := make([]*kgo.Record, 0, poisonRecords)
		for i := range poisonRecords {
			v := strconv.Itoa(i)
			if isPoison(i) {
				v = fmt.Sprintf("garbage-%d-%d", p, i)
			}
			recs = append(recs, &kgo.Record{Topic: poisonTopic, Partition: int32(p), Key: fmt.Appendf(nil, "key-%d-%d", p, i),
				Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "event-id", Value: fmt.Appendf(nil, "ev-%d-%d", p, i)}}})
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	}
}

// snapFlag is a participant that notes that a snapshot was taken. While
// hold says so it declines the barrier (checkpoint.ErrDeclined), which the
// chain skips.
type snapFlag struct {
	taken *bool
	hold  func() bool
}

func (s snapFlag) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	if s.hold != nil && s.hold() {
		return nil, fmt.Errorf("a poison record waits for its kill: %w", checkpoint.ErrDeclined)
	}
	*s.taken = true
	return []byte{}, nil
}
func (snapFlag) Restore(context.Context, []byte) error                    { return nil }
func (snapFlag) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// TestPoisonChild is the processor TestDeadLetterKill9 runs in a child
// process. Right after a poison record went to the dead-letter topic, and
// before any checkpoint covered it, it kills itself with SIGKILL (once per
// poison record, remembered in a marker file): the next child replays the
// poison record from the last checkpoint.
func TestPoisonChild(t *testing.T) {
	if os.Getenv(envPoisonChild) == "" {
		t.Skip("helper process for TestDeadLetterKill9")
	}
	brokers := strings.Split(os.Getenv(envBrokers), ",")
	dir := os.Getenv(envDir)
	logFile, err := os.OpenFile(filepath.Join(dir, "poison.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer logFile.Close()
	storage, err := checkpoint.NewFSStorage(filepath.Join(dir, "store"))
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 20 * time.Millisecond})
	require.NoError(t, err)
	newProc := func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		c := &counter{}
		var snapped bool
		poisonAt := int64(-1)
		marker := func() string { return filepath.Join(dir, fmt.Sprintf("killed-%d-%d", p.Partition, poisonAt)) }
		// A checkpoint between the dead-letter write and the next record
		// would cover the poison record, and the kill would replay
		// nothing: the barrier is declined until the kill (a
		// transactional dead-letter write takes longer than the 20 ms
		// between barriers on Kafka 3.9).
		unkilled := func() bool {
			if poisonAt < 0 || poisonAt == poisonRecords-1 {
				return false // no record follows the last one to kill at
			}
			_, err := os.Stat(marker())
			return errors.Is(err, os.ErrNotExist)
		}
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{"counter": c, "snapped": snapFlag{taken: &snapped, hold: unkilled}},
			Process: func(_ context.Context, m kafka.Message) error {
				if poisonAt >= 0 && !snapped {
					marker := marker()
					if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
						require.NoError(t, os.WriteFile(marker, nil, 0o644))
						_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
						select {} // dying
					}
				}
				poisonAt = -1
				if err := c.add(m); err != nil {
					poisonAt, snapped = m.Offset, false
					return kafkasource.Poison(err)
				}
				return nil
			},
			DeadLetter: &kafkasource.DeadLetter{Topic: poisonDLQ},
		}, nil
	}
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := fastGroup
	opts.Logger = logger
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: os.Getenv(envGroup), Topics: []string{poisonTopic}}),
		coord, newProc, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			t.Fatal("Run returned early")
		case <-time.After(20 * time.Millisecond):
		}
		all := true
		for _, cp := range latest(t, store, poisonTopic, poisonParts) {
			all = all && cp != nil && cp.NextOffset == poisonRecords
		}
		if all {
			cancel()
			require.NoError(t, <-done)
			return
		}
	}
}

// TestDeadLetterKill9 shows the dead-letter policy's promise across kill -9
// and replay: every poison record reaches the dead-letter topic exactly once,
// with its key, value, headers and origin, while every other record of its
// partition counts exactly once in the checkpointed state. Child processes
// kill themselves right after a dead-letter write and before the checkpoint
// that covers it, so the next child replays the poison record and must find
// it in the dead-letter topic instead of writing it again. Both partitions
// share one dead-letter partition.
func TestDeadLetterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	brokers := testkit.Kafka(t)
	testkit.CreateTopic(t, brokers, poisonTopic, poisonParts)
	testkit.CreateTopic(t, brokers, poisonDLQ, 1)
	producePoison(t, brokers)
	dir := t.TempDir()

	kills := 0
	for round := 0; ; round++ {
		require.Less(t, round, 3*len(poisonOffsets)*poisonParts, "the children never finished")
		cmd := exec.Command(os.Args[0], "-test.run=^TestPoisonChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envPoisonChild+"=1", envBrokers+"="+strings.Join(brokers, ","),
			envDir+"="+dir, envGroup+"=poison-"+strconv.Itoa(round))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			kills++
			continue
		}
		require.NoError(t, err)
		break
	}
	t.Logf("%d children killed with SIGKILL right after a dead-letter write", kills)
	require.Positive(t, kills)

	// Every other record exactly once in the state.
	storage, err := checkpoint.NewFSStorage(filepath.Join(dir, "store"))
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	wantSum := sumTo(poisonRecords)
	for _, o := range poisonOffsets {
		wantSum -= int64(o)
	}
	for p, cp := range latest(t, store, poisonTopic, poisonParts) {
		require.NotNil(t, cp)
		require.Equal(t, int64(poisonRecords), cp.NextOffset)
		count, sum := decodeCounter(t, cp.States["counter"])
		assert.Equal(t, int64(poisonRecords-len(poisonOffsets)), count, "partition %d", p)
		assert.Equal(t, wantSum, sum, "partition %d", p)
	}

	// Every poison record exactly once in the dead-letter topic, as a
	// read_committed consumer sees it.
	seen := map[string]int{}
	for _, m := range testkit.ReadTopic(t, brokers, poisonDLQ, 0) {
		o, err := kafkasource.ParseDeadLetter(m)
		require.NoError(t, err)
		assert.Equal(t, poisonTopic, o.Topic)
		assert.True(t, isPoison(int(o.Offset)), "offset %d is no poison record", o.Offset)
		assert.Contains(t, o.Err, "invalid syntax")
		assert.Equal(t, fmt.Sprintf("key-%d-%d", o.Partition, o.Offset), string(m.Key))
		assert.Equal(t, fmt.Sprintf("garbage-%d-%d", o.Partition, o.Offset), string(m.Value))
		assert.Equal(t, "event-id", m.Headers[0].Key)
		assert.Equal(t, fmt.Sprintf("ev-%d-%d", o.Partition, o.Offset), string(m.Headers[0].Value))
		seen[fmt.Sprintf("%d/%d", o.Partition, o.Offset)]++
	}
	want := map[string]int{}
	for p := range poisonParts {
		for _, o := range poisonOffsets {
			want[fmt.Sprintf("%d/%d", p, o)] = 1
		}
	}
	assert.Equal(t, want, seen, "dead-letter records by partition/offset")

	// The replays found their record in the topic rather than writing it again.
	log, err := os.ReadFile(filepath.Join(dir, "poison.log"))
	require.NoError(t, err)
	// Each kill replays at least the poison record it followed (a kill also
	// replays the other partition's records since its last checkpoint).
	assert.GreaterOrEqual(t, strings.Count(string(log), "replayed=true"), kills, "replays that found their dead letter:\n%s", log)
}

// TestPoisonStopsByDefault: without a dead-letter topic, a poison record
// stops the chain with a *PoisonError at its offset, counted as stopped;
// the offset is not committed past it.
func TestPoisonStopsByDefault(t *testing.T) {
	brokers := testkit.Kafka(t)
	const topic = "poison-stop"
	testkit.CreateTopic(t, brokers, topic, 1)
	produce(t, brokers, topic, 1, 0, 10)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("garbage")}).FirstErr())
	cl.Close()
	produce(t, brokers, topic, 1, 11, 5)

	reader := sdkmetric.NewManualReader()
	opts := fastGroup
	opts.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 20 * time.Millisecond})
	require.NoError(t, err)
	defer coord.Close()
	var cs counters
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: "poison-stop", Topics: []string{topic}}), coord,
		func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
			proc, err := cs.newProcessor(ctx, p)
			inner := proc.Process
			proc.Process = func(ctx context.Context, m kafka.Message) error {
				if err := inner(ctx, m); err != nil {
					return kafkasource.Poison(err)
				}
				return nil
			}
			return proc, err
		}, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = src.Run(ctx)
	var perr *kafkasource.PoisonError
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, int64(10), perr.Offset)
	assert.Equal(t, checkpoint.TopicPartition{Topic: topic, Partition: 0}, perr.Partition)
	assert.ErrorIs(t, err, kafkasource.ErrPoison)
	assert.Equal(t, map[string]int64{"stopped": 1}, poisonCounts(t, reader))
}

// poisonCounts returns exactlyonce.kafkasource.poison_records by outcome.
func poisonCounts(t testing.TB, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "exactlyonce.kafkasource.poison_records" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value("outcome")
				out[v.AsString()] += dp.Value
			}
		}
	}
	return out
}
