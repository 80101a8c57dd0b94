package kafkatxn_test

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
)

// endOffset returns the high watermark of topic's partition.
func endOffset(t testing.TB, brokers []string, topic string, partition int) int64 {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	// Right after a broker restart the partition may have no leader yet
	// (Broker Not Available, Not Leader): ask again for half a minute.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{
			Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(partition)}},
		})
		if err == nil {
			for _, po := range res.Topics[topic] {
				if err = po.Error; err == nil {
					return po.LastOffset
				}
			}
		}
		if time.Now().After(deadline) {
			require.NoError(t, err, "end offset of %s/%d", topic, partition)
			t.Fatal("no offsets")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
