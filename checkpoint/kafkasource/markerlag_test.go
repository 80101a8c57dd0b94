package kafkasource_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestCommittedOffsetPastTrailingMarker: a topic written by transactions
// ends with a commit marker (a control record of its own offset). Once the
// source processed every record and checkpointed, the group offset it
// committed is the partition's high watermark, as the Java consumer's
// position is, so Kafka's tools show a lag of 0. It stopped before the
// marker (high watermark - 1), a lag of 1 forever (issue 42, finding 4).
// The last transaction is also followed by an aborted one, whose records
// and marker the offset moves past too.
func TestCommittedOffsetPastTrailingMarker(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic, group := testkit.Name(t, "txin"), testkit.Name(t, "g")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer p.Close()
	want := 0
	for i := range 3 {
		for j := range 2 {
			_, err := p.Produce(ctx, topic, 0, kafkatxn.Record{Value: fmt.Appendf(nil, "%d-%d", i, j)})
			require.NoError(t, err)
			want++
		}
		require.NoError(t, p.Commit(ctx))
	}
	_, err = p.Produce(ctx, topic, 0, kafkatxn.Record{Value: []byte("aborted")})
	require.NoError(t, err)
	require.NoError(t, p.Abort(ctx))
	// 6 records, 3 commit markers, an aborted record and its marker,
	// written after Abort returned.
	hwm := int64(want + 5)
	require.Eventually(t, func() bool { return lastOffset(t, brokers, topic) == hwm }, 30*time.Second, 20*time.Millisecond)

	var mu sync.Mutex
	seen := 0
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	defer coord.Close()
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}}), coord,
		func(context.Context, checkpoint.TopicPartition) (*kafkasource.Processor, error) {
			return &kafkasource.Processor{Process: func(context.Context, kafka.Message) error {
				mu.Lock()
				seen++
				mu.Unlock()
				return nil
			}}, nil
		}, fastGroup)
	require.NoError(t, err)
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx) }()
	defer func() {
		rcancel()
		require.NoError(t, <-done)
	}()

	var got int64
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = committed(t, brokers, group, topic, 1)[0]; got == hwm {
			break
		}
	}
	require.Equal(t, hwm, got, "the committed offset: the high watermark, lag 0")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, seen, "every committed record processed once, the aborted one not")
}

// lastOffset returns the high watermark of partition 0 of topic.
func lastOffset(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	res, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}},
	})
	require.NoError(t, err)
	require.Len(t, res.Topics[topic], 1)
	require.NoError(t, res.Topics[topic][0].Error)
	return res.Topics[topic][0].LastOffset
}
