package embedded_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

// TestKafkaProcessKillRestart proves a broker in its own process can be
// killed with SIGKILL and restarted on the same port and data directory,
// keeping acknowledged records and committed offsets.
func TestKafkaProcessKillRestart(t *testing.T) {
	embedded.SkipShort(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	k, err := embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{DataDir: t.TempDir()})
	require.NoError(t, err)
	defer k.Stop()
	brokers := k.Brokers()
	require.NoError(t, embedded.CreateTopic(ctx, brokers, "events", 2))

	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "events", RequiredAcks: kafka.RequireAll,
		Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	for i := range 6 {
		require.NoError(t, w.WriteMessages(ctx, kafka.Message{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}))
	}
	require.NoError(t, w.Close())
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: &kafka.Transport{}}
	_, err = cl.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: "g", GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{"events": {{Partition: 0, Offset: 1}}}})
	require.NoError(t, err)

	pid := k.PID()
	require.NoError(t, k.Kill())
	assert.Equal(t, 0, k.PID())
	require.NoError(t, k.Start(ctx))
	assert.NotEqual(t, pid, k.PID())
	assert.Equal(t, brokers, k.Brokers())

	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], "events", 0)
	require.NoError(t, err)
	last0, err := conn.ReadLastOffset()
	require.NoError(t, err)
	conn.Close()
	conn, err = kafka.DialLeader(ctx, "tcp", brokers[0], "events", 1)
	require.NoError(t, err)
	last1, err := conn.ReadLastOffset()
	require.NoError(t, err)
	conn.Close()
	assert.Equal(t, int64(6), last0+last1, "acknowledged records survive kill -9")

	cl = &kafka.Client{Addr: kafka.TCP(brokers...), Transport: &kafka.Transport{}} // no pooled pre-kill connections
	resp, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: "g", Topics: map[string][]int{"events": {0}}})
	require.NoError(t, err)
	require.Len(t, resp.Topics["events"], 1)
	assert.Equal(t, int64(1), resp.Topics["events"][0].CommittedOffset, "committed offset survives kill -9")

	require.NoError(t, k.Stop())
	require.NoError(t, k.Stop())
}

// TestKafkaProcessFaults drives the fault injector of a broker in its own
// process through its control endpoint: a lost acknowledgement (the record
// is written, the producer hears nothing), a refused fetch, then Kill: no
// faults on a killed broker, none left after the restart.
func TestKafkaProcessFaults(t *testing.T) {
	embedded.SkipShort(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	k, err := embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{DataDir: t.TempDir()})
	require.NoError(t, err)
	defer k.Stop()
	brokers := k.Brokers()
	require.NoError(t, embedded.CreateTopic(ctx, brokers, "events", 1))

	require.NoError(t, k.InjectFault(ctx, kafkafault.Fault{Kind: kafkafault.ProduceLostAck}))
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "events", RequiredAcks: kafka.RequireAll,
		MaxAttempts: 1, BatchTimeout: time.Millisecond}
	defer w.Close()
	require.Error(t, w.WriteMessages(ctx, kafka.Message{Value: []byte("a")}), "the acknowledgement is lost")

	require.NoError(t, k.InjectFault(ctx, kafkafault.Fault{Kind: kafkafault.FetchError}))
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	resp, err := cl.Fetch(ctx, &kafka.FetchRequest{Topic: "events", Partition: 0, MaxWait: 10 * time.Millisecond})
	require.NoError(t, err)
	assert.ErrorIs(t, resp.Error, kafka.NotLeaderForPartition)
	resp, err = cl.Fetch(ctx, &kafka.FetchRequest{Topic: "events", Partition: 0, MaxWait: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, resp.Error)
	assert.Equal(t, int64(1), resp.HighWatermark, "the record whose acknowledgement was lost is in the log")

	stats, err := k.FaultStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, kafkafault.Stats{
		kafkafault.ProduceLostAck: {Injected: 1, Hits: 1},
		kafkafault.FetchError:     {Injected: 1, Hits: 1},
	}, stats)
	assert.ErrorIs(t, k.InjectFault(ctx, kafkafault.Fault{Kind: "boom"}), kafkafault.ErrRejected)

	require.NoError(t, k.InjectFault(ctx, kafkafault.Fault{Kind: kafkafault.ProduceError, Count: -1}))
	require.NoError(t, k.Kill())
	assert.ErrorIs(t, k.InjectFault(ctx, kafkafault.Fault{Kind: kafkafault.FetchError}), embedded.ErrStopped)
	require.NoError(t, k.Start(ctx))
	stats, err = k.FaultStats(ctx)
	require.NoError(t, err)
	assert.Empty(t, stats, "a restarted broker has no faults")
	w2 := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "events", RequiredAcks: kafka.RequireAll,
		MaxAttempts: 1, BatchTimeout: time.Millisecond, Transport: &kafka.Transport{}} // no connection pooled before the kill
	defer w2.Close()
	require.NoError(t, w2.WriteMessages(ctx, kafka.Message{Value: []byte("b")}), "the unlimited fault died with the broker")
}
