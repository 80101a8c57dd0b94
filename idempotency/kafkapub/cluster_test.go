package kafkapub_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestGatewayISRBelowMinInsyncReplicas is the seed's acks=all promise on a
// real cluster: three Apache Kafka brokers beside a dedicated KRaft
// controller (so two brokers down leave the cluster answering), a topic of
// three replicas with min.insync.replicas 2. With two brokers killed the
// ISR shrinks to one and every produce is refused (NOT_ENOUGH_REPLICAS):
// the gateway answers 503 with Retry-After, never a 2xx for an event it did
// not publish, and releases the key. Once one broker is back the same
// delivery is published, once, and a redelivery is answered from the
// store; the topic then holds each delivery once: none of the refused
// publishes was appended. make test-cluster runs it (testkit.SkipUnlessKafkaCluster).
func TestGatewayISRBelowMinInsyncReplicas(t *testing.T) {
	testkit.SkipUnlessKafkaCluster(t)
	kb := testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{Nodes: 3, Controllers: 1})
	brokers := kb.Brokers()
	require.Len(t, brokers, 3, "the controller serves no clients")
	g := newGateway(t, testkit.Redis(t), brokers, idempotency.Options{})

	const body = `{"action":"opened","organization":{"id":7}}`
	r := g.deliver(t, "before", body)
	require.Equal(t, http.StatusAccepted, r.status, r.body)

	kb.KillNode(2)
	kb.KillNode(3)
	// Until the controller fences the dead brokers (their broker session,
	// 3 s here) a produce waits for them; once every ISR is broker 1 alone
	// a produce is refused at once, before any append.
	require.Eventually(t, func() bool { return isrSizes(t, brokers[0], g.topic) == 1 }, time.Minute, 200*time.Millisecond,
		"the ISR shrinks to broker 1")
	for i := range 3 {
		r = g.deliver(t, "during", body)
		require.Equal(t, http.StatusServiceUnavailable, r.status, "attempt %d: %s", i, r.body)
		assert.NotEmpty(t, r.retryAfter)
		require.Eventually(t, func() bool { return g.keys(t) == 1 }, 5*time.Second, 10*time.Millisecond,
			"the failed delivery's claim is released; only the first delivery's key stays")
	}
	// (No count here: with the ISR below min.insync.replicas Kafka 4
	// keeps the high watermark where it is (KIP-966), and ListOffsets
	// answers OFFSET_NOT_AVAILABLE until a second replica is back. The
	// count at the end, two, says nothing was appended meanwhile.)

	kb.StartNode(2)
	var status int
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		// 503 until broker 2 has caught up and is back in the ISR.
		if status = g.deliver(t, "during", body).status; status != http.StatusServiceUnavailable {
			break
		}
	}
	require.Equal(t, http.StatusAccepted, status, "published once two replicas are in sync")
	r = g.deliver(t, "during", body)
	assert.Equal(t, http.StatusAccepted, r.status)
	assert.True(t, r.replayed, "answered from the store")
	assert.Equal(t, int64(2), publishedOn(t, brokers[0], g.topic, 3), "each delivery once")
}

// isrSizes returns the largest in-sync replica set of topic's partitions,
// as broker addr's metadata says (a connection of its own: kafka-go's
// default transport caches metadata).
func isrSizes(t *testing.T, addr, topic string) int {
	t.Helper()
	conn, err := kafka.Dial("tcp", addr)
	if err != nil {
		return -1
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range parts {
		n = max(n, len(p.Isr))
	}
	return n
}

// publishedOn counts topic's records through broker addr. A new leader
// answers OFFSET_NOT_AVAILABLE until its high watermark caught up: asked
// again.
func publishedOn(t *testing.T, addr, topic string, partitions int) int64 {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(addr), Transport: tr, Timeout: 10 * time.Second}
	reqs := make([]kafka.OffsetRequest, partitions)
	for i := range reqs {
		reqs[i] = kafka.LastOffsetOf(i)
	}
	var lastErr error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		res, err := c.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
		if err != nil {
			lastErr = err
			continue
		}
		var n int64
		for _, p := range res.Topics[topic] {
			n += p.LastOffset
			if p.Error != nil {
				lastErr = p.Error
			}
		}
		if lastErr == nil {
			return n
		}
		if !errors.Is(lastErr, kafka.OffsetNotAvailable) && !errors.Is(lastErr, kafka.LeaderNotAvailable) &&
			!errors.Is(lastErr, kafka.NotLeaderForPartition) {
			break
		}
		lastErr = nil
	}
	require.NoError(t, lastErr, "list offsets")
	t.Fatal("list offsets: no answer in a minute")
	return 0
}
