package kafkasource_test

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestSessionTimeoutBelowBrokerMinimum runs on an Apache Kafka broker with
// Kafka's own defaults (group.min.session.timeout.ms 6 s, not the kit's 100
// ms): a SessionTimeout below it is refused by the broker
// (INVALID_SESSION_TIMEOUT), and Run returns at once with an error that
// says which option to change and what the broker allows, instead of a bare
// error code. kfake has no such minimum by default.
func TestSessionTimeoutBelowBrokerMinimum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker of its own")
	}
	k := testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{KafkaDefaults: true})
	brokers := k.Brokers()
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, 1)

	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = coord.Close() })
	opts := fastGroup
	opts.Logger = testLogger(t)
	opts.SessionTimeout = 2 * time.Second
	cs := &counters{}
	// The classic protocol's: a consumer-protocol member sends no session
	// timeout (the broker's group.consumer.session.timeout.ms is its own).
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "group"), Topics: []string{topic},
		Protocol: kafkasource.ProtocolClassic},
		coord, cs.newProcessor, opts)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = src.Run(ctx)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "Run waited for its context instead of returning the broker's refusal")
	assert.ErrorIs(t, err, kafka.InvalidSessionTimeout)
	assert.ErrorContains(t, err, "Options.SessionTimeout 2s")
	assert.ErrorContains(t, err, "group.min.session.timeout.ms 6s")
	assert.ErrorContains(t, err, "group.max.session.timeout.ms 30m0s")
}
