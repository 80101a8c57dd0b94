package kafkapub_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/internal/testenv"
)

// TestIdempotentPublisherLostAcks publishes concurrently while the broker
// answers every third produce with REQUEST_TIMED_OUT after writing it (an
// acknowledgement lost after the write): every delivery is in the topic
// exactly once, on its key's partition, with its headers.
func TestIdempotentPublisherLostAcks(t *testing.T) {
	const n = 150
	k := testenv.StartKafka(t)
	brokers := k.Brokers()
	topic := testenv.Name(t, "idem")
	testenv.CreateTopic(t, brokers, topic, 3)
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
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	for p := range 3 {
		res, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(p)}}})
		require.NoError(t, err)
		end := res.Topics[topic][0].LastOffset
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 50 * time.Millisecond})
		for off := int64(0); off < end; {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			m, err := r.ReadMessage(rctx)
			cancel()
			require.NoError(t, err)
			off = m.Offset + 1
			want := (kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: m.Key}, 0, 1, 2)
			assert.Equal(t, want, p, "key %s on its partition", m.Key)
			md, err := kafkapub.ReadMetadata(m)
			require.NoError(t, err)
			assert.Equal(t, "github", md.Source)
			seen[md.EventID]++
		}
		require.NoError(t, r.Close())
	}
	assert.Len(t, seen, n)
	for k, c := range seen {
		assert.Equal(t, 1, c, "delivery %s", k)
	}
	t.Logf("%d produce answers lost after the write, no duplicate", faults)
}
