package demo

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestCheckpointLagCountsUnknownGroupAsNoCommits shows the verdict's lag
// check on real kfake: a group the broker does not know (one that never
// committed, forgotten by a broker restart) counts as having committed
// nothing instead of failing the check, and a committed group's offsets
// lower the lag.
func TestCheckpointLagCountsUnknownGroupAsNoCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "lag")
	testkit.CreateTopic(t, brokers, topic, 2)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.RoundRobin{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	msgs := make([]kafka.Message, 6)
	for i := range msgs {
		msgs[i] = kafka.Message{Value: []byte{byte(i)}}
	}
	require.NoError(t, w.WriteMessages(ctx, msgs...))

	lag, err := CheckpointLag(ctx, brokers, topic, 2, []string{testkit.Name(t, "never-joined")})
	require.NoError(t, err)
	require.EqualValues(t, 6, lag)

	group := testkit.Name(t, "committed")
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second}
	resp, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topic: {{Partition: 0, Offset: 2}}}})
	require.NoError(t, err)
	for _, ps := range resp.Topics {
		for _, p := range ps {
			require.NoError(t, p.Error)
		}
	}
	lag, err = CheckpointLag(ctx, brokers, topic, 2, []string{testkit.Name(t, "never-joined"), group})
	require.NoError(t, err)
	require.EqualValues(t, 4, lag)
}
