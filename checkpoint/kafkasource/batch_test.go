package kafkasource_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// batchCounters is counters with ProcessBatch instead of Process. A record
// whose value is not a number is a poison record.
type batchCounters struct {
	counters
	calls, records, largest atomic.Int64
	pause                   time.Duration // per call: keeps records flowing over many checkpoint intervals
}

func (bc *batchCounters) newProcessor(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
	proc, err := bc.counters.newProcessor(ctx, p)
	c := proc.Participants["counter"].(*counter)
	proc.Process = nil
	proc.ProcessBatch = func(_ context.Context, ms []kafka.Message) (int, error) {
		bc.calls.Add(1)
		bc.records.Add(int64(len(ms)))
		if n := int64(len(ms)); n > bc.largest.Load() {
			bc.largest.Store(n)
		}
		for i, m := range ms {
			if err := c.add(m); err != nil {
				return i, kafkasource.Poison(err)
			}
		}
		time.Sleep(bc.pause)
		return len(ms), nil
	}
	return proc, err
}

// TestProcessBatchCheckpointsAtRecordBoundaries: with ProcessBatch and
// checkpoints every few milliseconds, every checkpoint's state covers
// exactly the records before its offset, so barriers cut fetched batches
// at record boundaries (MaxBatch 16 splits each fetched batch into several
// calls, with barriers between them), and the chain ends with every record
// counted once. Records arrive in batches larger than one.
func TestProcessBatchCheckpointsAtRecordBoundaries(t *testing.T) {
	const (
		topic      = "batch-boundaries"
		partitions = 2
		perPart    = 20_000
	)
	brokers := testkit.Kafka(t)
	testkit.CreateTopic(t, brokers, topic, partitions)
	produce(t, brokers, topic, partitions, 0, perPart)

	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 3 * time.Millisecond})
	require.NoError(t, err)
	defer coord.Close()
	// A call takes at least a millisecond, so the records flow for over a
	// second and the store is seen at many checkpoints in between, however
	// loaded the machine (CI saw only 2 when 40,000 records took less time
	// than the polling got to run).
	bc := batchCounters{pause: time.Millisecond}
	opts := fastGroup
	opts.MaxBatch = 16
	opts.Buffer = 512
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: "batch-boundaries", Topics: []string{topic}}),
		coord, bc.newProcessor, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()

	seen := map[int64]bool{} // checkpoint offsets inspected
	require.Eventually(t, func() bool {
		all := true
		for _, cp := range latest(t, store, topic, partitions) {
			if cp == nil {
				all = false
				continue
			}
			requireConsistent(t, cp)
			seen[cp.NextOffset] = true
			all = all && cp.NextOffset == perPart
		}
		return all
	}, 60*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	t.Logf("%d checkpoints seen while records flowed", len(seen))
	assert.Greater(t, len(seen), 3, "checkpoints taken while records flowed")
	assert.Equal(t, int64(partitions*perPart), bc.records.Load())
	assert.LessOrEqual(t, bc.largest.Load(), int64(16), "MaxBatch bounds a call")
	assert.Less(t, bc.calls.Load(), bc.records.Load(), "records arrive in batches")
}

// TestProcessBatchPoison: a poison record in the middle of a batch stops the
// chain at its own offset (ProcessBatch returned its index with the error),
// and the checkpoints before it agree with their offsets.
func TestProcessBatchPoison(t *testing.T) {
	brokers := testkit.Kafka(t)
	const topic = "batch-poison"
	testkit.CreateTopic(t, brokers, topic, 1)
	produce(t, brokers, topic, 1, 0, 1000)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("garbage")}).FirstErr())
	cl.Close()
	produce(t, brokers, topic, 1, 1001, 500)

	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 5 * time.Millisecond})
	require.NoError(t, err)
	defer coord.Close()
	var bc batchCounters
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: "batch-poison", Topics: []string{topic}}),
		coord, bc.newProcessor, fastGroup)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = src.Run(ctx)
	var perr *kafkasource.PoisonError
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, int64(1000), perr.Offset)
	assert.Equal(t, int64(1000), bc.byPart[0].count, "every record before the poison one processed, none after")
	if cp := latest(t, store, topic, 1)[0]; cp != nil {
		requireConsistent(t, cp)
		assert.LessOrEqual(t, cp.NextOffset, int64(1000))
	}
}

// TestProcessBatchDeadLetter: with a dead-letter topic, each poison record
// of a batch (two of them adjacent, one the last record) goes there once,
// in order, and the chain goes on with the rest of the batch: the
// checkpointed state counts every other record exactly once.
func TestProcessBatchDeadLetter(t *testing.T) {
	const (
		topic = "batch-dl"
		dlq   = "batch-dl-dlq"
	)
	brokers := testkit.Kafka(t)
	testkit.CreateTopic(t, brokers, topic, 1)
	testkit.CreateTopic(t, brokers, dlq, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	var recs []*kgo.Record
	for i := range poisonRecords {
		v := strconv.Itoa(i)
		if isPoison(i) {
			v = "garbage"
		}
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(v)})
	}
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
	cl.Close()

	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer coord.Close()
	var bc batchCounters
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: "batch-dl", Topics: []string{topic}}), coord,
		func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
			proc, err := bc.newProcessor(ctx, p)
			proc.DeadLetter = &kafkasource.DeadLetter{Topic: dlq}
			return proc, err
		}, fastGroup)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	require.Eventually(t, func() bool {
		cp := latest(t, store, topic, 1)[0]
		return cp != nil && cp.NextOffset == poisonRecords
	}, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	cp := latest(t, store, topic, 1)[0]
	count, sum := decodeCounter(t, cp.States["counter"])
	wantSum := sumTo(poisonRecords)
	for _, o := range poisonOffsets {
		wantSum -= int64(o)
	}
	assert.Equal(t, int64(poisonRecords-len(poisonOffsets)), count)
	assert.Equal(t, wantSum, sum)

	var got []int
	for _, m := range testkit.ReadTopic(t, brokers, dlq, 0) {
		o, err := kafkasource.ParseDeadLetter(m)
		require.NoError(t, err)
		got = append(got, int(o.Offset))
	}
	assert.Equal(t, poisonOffsets, got, "each poison record once, in order, nothing else")
}
