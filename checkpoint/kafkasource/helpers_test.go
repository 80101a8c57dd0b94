package kafkasource_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
)

// counter is a participant counting records and summing their values (the
// value of a record is its decimal offset), so its state tells exactly which
// offsets [0, n) it has seen when the input has no gaps.
type counter struct {
	count, sum int64
	failSnap   *atomic.Bool // when set, Snapshot fails
	completed  atomic.Int64
}

func (c *counter) add(m kafka.Message) error {
	v, err := strconv.ParseInt(string(m.Value), 10, 64)
	if err != nil {
		return err
	}
	c.count++
	c.sum += v
	return nil
}

func (c *counter) Snapshot(_ context.Context, _ checkpoint.ID) ([]byte, error) {
	if c.failSnap != nil && c.failSnap.Load() {
		return nil, errors.New("injected snapshot failure")
	}
	b := binary.BigEndian.AppendUint64(nil, uint64(c.count))
	return binary.BigEndian.AppendUint64(b, uint64(c.sum)), nil
}

func (c *counter) Restore(_ context.Context, state []byte) error {
	if len(state) != 16 {
		return fmt.Errorf("counter state of %d bytes", len(state))
	}
	c.count = int64(binary.BigEndian.Uint64(state))
	c.sum = int64(binary.BigEndian.Uint64(state[8:]))
	return nil
}

func (c *counter) CheckpointCompleted(_ context.Context, id checkpoint.ID) error {
	c.completed.Store(int64(id))
	return nil
}

func decodeCounter(t testing.TB, state []byte) (count, sum int64) {
	t.Helper()
	var c counter
	require.NoError(t, c.Restore(context.Background(), state))
	return c.count, c.sum
}

// sumTo is the sum of the offsets 0..n-1.
func sumTo(n int64) int64 { return n * (n - 1) / 2 }

// produce writes n records to every partition, whose values are the offsets
// from..from+n-1 (from is the partitions' current end).
func produce(t testing.TB, brokers []string, topic string, partitions, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for p := range partitions {
		recs := make([]*kgo.Record, 0, n)
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(strconv.Itoa(from + i))})
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	}
}

// committed returns the group's committed offset per partition (-1: none).
func committed(t testing.TB, brokers []string, group, topic string, partitions int) map[int]int64 {
	t.Helper()
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	resp, err := cl.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	require.NoError(t, err)
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		require.NoError(t, p.Error)
		out[p.Partition] = p.CommittedOffset
	}
	return out
}

// counters collects the counters of the chains a source builds.
type counters struct {
	mu       sync.Mutex
	byPart   map[int]*counter
	failSnap atomic.Bool
}

func (cs *counters) newProcessor(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
	c := &counter{failSnap: &cs.failSnap}
	cs.mu.Lock()
	if cs.byPart == nil {
		cs.byPart = map[int]*counter{}
	}
	cs.byPart[p.Partition] = c
	cs.mu.Unlock()
	return &kafkasource.Processor{
		Participants: map[string]checkpoint.Participant{"counter": c},
		Process:      func(_ context.Context, m kafka.Message) error { return c.add(m) },
	}, nil
}
