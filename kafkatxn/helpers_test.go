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
	res, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(partition)}},
	})
	require.NoError(t, err)
	for _, po := range res.Topics[topic] {
		require.NoError(t, po.Error)
		return po.LastOffset
	}
	t.Fatal("no offsets")
	return 0
}
