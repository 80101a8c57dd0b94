package kafkasource_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestRunRidesOutBrokerOutage kills the only broker and keeps it down for
// 8 seconds, as long as an Apache Kafka broker takes to come back on a
// loaded machine (kfake restarts in 200 ms): Run must not give up on the
// group meanwhile, and goes on once the broker is back. With the test's
// 100 ms heartbeat (the join backoff) it returned 'failed to dial' after
// its 20 consecutive group errors, two seconds into the outage. The broker
// is a kfake process for a fast restart; the outage is the test's sleep.
func TestRunRidesOutBrokerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a broker process")
	}
	srv := testkit.StartKfakeProcess(t)
	brokers := srv.Brokers()
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, 2)
	produce(t, brokers, topic, 2, 0, 20)
	src, store := topicSource(t, brokers, topic, kafkasource.MissingTopicWait)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-done)
	}()
	waitCounts(t, store, topic, map[int]int64{0: 20, 1: 20})

	srv.Kill()
	select {
	case err := <-done:
		done <- err // for the deferred wait
		t.Fatalf("Run returned during the outage: %v", err)
	case <-time.After(8 * time.Second):
	}
	srv.Start()
	produce(t, brokers, topic, 2, 20, 10)
	waitCounts(t, store, topic, map[int]int64{0: 30, 1: 30})
	select {
	case err := <-done:
		done <- err
		t.Fatalf("Run returned: %v", err)
	default:
	}
}
