package kafkasource_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

func topicSource(t *testing.T, brokers []string, topic string, missing kafkasource.MissingTopic) (*kafkasource.Source, *checkpoint.Store) {
	t.Helper()
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = coord.Close() })
	opts := fastGroup
	opts.Logger = testLogger(t)
	opts.MissingTopic = missing
	opts.TopicPollInterval = 100 * time.Millisecond
	cs := &counters{}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "group"), Topics: []string{topic}}),
		coord, cs.newProcessor, opts)
	require.NoError(t, err)
	return src, store
}

// TestMissingTopicWaitThenNewPartition proves a Source subscribed to a
// topic that does not exist yet waits for it and processes it once created,
// and that a partition added later gets a chain too.
func TestMissingTopicWaitThenNewPartition(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	src, store := topicSource(t, brokers, topic, kafkasource.MissingTopicWait)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-done)
	}()

	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run returned while waiting for the topic: %v", err)
	default:
	}
	testkit.CreateTopic(t, brokers, topic, 2)
	produce(t, brokers, topic, 2, 0, 20)
	waitCounts(t, store, topic, map[int]int64{0: 20, 1: 20})

	addPartitions(t, brokers, topic, 3)
	produce(t, brokers, topic, 3, 20, 10) // partition 2 gets offsets 0..9 with values 20..29
	require.Eventually(t, func() bool {
		cp := latestOf(t, store, topic, 2)
		if cp == nil {
			return false
		}
		count, sum := decodeCounter(t, cp.States["counter"])
		return count == 10 && sum == sumTo(30)-sumTo(20)
	}, time.Minute, 20*time.Millisecond, "the new partition is consumed")
	waitCounts(t, store, topic, map[int]int64{0: 30, 1: 30})
}

// TestMissingTopicFail proves MissingTopicFail makes Run return a typed
// error at once instead of waiting.
func TestMissingTopicFail(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	src, _ := topicSource(t, brokers, topic, kafkasource.MissingTopicFail)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := src.Run(ctx)
	require.ErrorIs(t, err, kafkasource.ErrTopicNotFound)
	var terr *kafkasource.TopicNotFoundError
	require.ErrorAs(t, err, &terr)
	assert.Equal(t, topic, terr.Topic)
}

// addPartitions raises topic's partition count to total.
func addPartitions(t *testing.T, brokers []string, topic string, total int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic = topic
	rt.Count = int32(total)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10_000
	resp, err := req.RequestWith(t.Context(), cl)
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
	// The broker answers before its metadata shows the new partitions: a
	// producer asking at once is told there are fewer ("invalid record
	// partitioning choice of 2 from 2 available", seen under load).
	require.Eventually(t, func() bool {
		mreq := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		mreq.Topics = append(mreq.Topics, mt)
		mresp, err := mreq.RequestWith(t.Context(), cl)
		if err != nil || len(mresp.Topics) != 1 || len(mresp.Topics[0].Partitions) != total {
			return false
		}
		for _, p := range mresp.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "the broker's metadata shows %d partitions of %s", total, topic)
}
