package kafkasink_test

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// readCommitted reads topic's partitions to their end with a
// read_committed kafkatxn.Reader and counts the values.
func readCommitted(t testing.TB, brokers []string, topic string, partitions int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for p := range partitions {
		cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
		res, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{
			Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(p)}},
		})
		require.NoError(t, err)
		end := res.Topics[topic][0].LastOffset
		r, err := kafkatxn.NewReader(brokers, topic, p, 0, kafkatxn.ReaderOptions{MaxWait: 50 * time.Millisecond})
		require.NoError(t, err)
		for r.Offset() < end {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ms, err := r.Fetch(ctx)
			cancel()
			if err != nil && ctx.Err() != nil {
				break // only markers or an open transaction's records are left
			}
			require.NoError(t, err)
			for _, m := range ms {
				got[string(m.Value)]++
			}
		}
		require.NoError(t, r.Close())
	}
	return got
}
