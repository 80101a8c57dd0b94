package testkit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestKafkaSmoke proves the cluster is a real Kafka protocol endpoint for
// the client the SDK uses: kafka-go writes with acks=all, reads through a
// consumer group, commits, and the commit is visible to the group
// coordinator.
func TestKafkaSmoke(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	group := testkit.Name(t, "group")
	testkit.CreateTopic(t, brokers, topic, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	w := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		RequiredAcks: kafka.RequireAll,
		Balancer:     &kafka.Hash{},
		BatchTimeout: time.Millisecond,
	}
	const n = 10
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	require.NoError(t, w.WriteMessages(ctx, msgs...))
	require.NoError(t, w.Close())

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:        brokers,
		GroupID:        group,
		Topic:          topic,
		StartOffset:    kafka.FirstOffset,
		MaxWait:        100 * time.Millisecond,
		CommitInterval: 0, // synchronous commits
	})
	defer r.Close()
	got := map[string]string{}
	committed := map[int]int64{}
	for len(got) < n {
		m, err := r.FetchMessage(ctx)
		require.NoError(t, err)
		got[string(m.Key)] = string(m.Value)
		require.NoError(t, r.CommitMessages(ctx, m))
		committed[m.Partition] = m.Offset + 1
	}
	for i := range n {
		assert.Equal(t, fmt.Sprintf("v%d", i), got[fmt.Sprintf("k%d", i)])
	}

	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	parts := []int{0, 1, 2}
	resp, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	require.NoError(t, err)
	require.NoError(t, resp.Error)
	fetched := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		require.NoError(t, p.Error)
		if p.CommittedOffset >= 0 {
			fetched[p.Partition] = p.CommittedOffset
		}
	}
	assert.Equal(t, committed, fetched)
}

func TestCreateTopicIdempotent(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, 4)
	testkit.CreateTopic(t, brokers, topic, 4) // same count: no-op

	conn, err := kafka.DialContext(t.Context(), "tcp", brokers[0])
	require.NoError(t, err)
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	require.NoError(t, err)
	assert.Len(t, parts, 4)
}

// TestKafkaProcessKill proves a broker process comes back after kill -9 with
// the records it acknowledged.
func TestKafkaProcessKill(t *testing.T) {
	srv := testkit.StartKafkaProcess(t)
	brokers := srv.Brokers()
	testkit.CreateTopic(t, brokers, "events", 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "events", RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Transport: &kafka.Transport{}}
	require.NoError(t, w.WriteMessages(ctx, kafka.Message{Value: []byte("before")}))
	require.NoError(t, w.Close())

	srv.Kill()
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err == nil {
		conn.Close()
	}
	require.Error(t, err, "broker is down")

	srv.Start()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: "events", Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	require.NoError(t, err)
	assert.Equal(t, "before", string(m.Value))
}
