package webhookkit_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// A gateway in one call publishes a delivery sent from eight goroutines at
// once, and again after, to its topic once: Send returns every answer
// whole, from any goroutine, and the later retry's answer says it is a
// replay.
func TestGatewaySendConcurrently(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "webhooks")
	testkit.CreateTopic(t, brokers, topic, 1)
	secret := []byte("s3cret")
	url := webhookkit.Gateway(t, brokers, topic, webhookkit.GatewayOptions{Secret: secret})
	d := webhookkit.Delivery{Provider: idempotency.GitHub(), ID: "d-1", Event: "push", Body: []byte(`{"ref":"refs/heads/main"}`), Secret: secret}

	var wg sync.WaitGroup
	answers := make([]webhookkit.Answer, 8)
	errs := make([]error, 8)
	for i := range answers {
		wg.Go(func() { answers[i], errs[i] = webhookkit.Send(t.Context(), url, d) })
	}
	wg.Wait()
	for i, a := range answers {
		require.NoError(t, errs[i])
		// One publishes; the others find it done (200, replayed) or
		// pending (503 with Retry-After).
		assert.Contains(t, []int{http.StatusOK, http.StatusAccepted, http.StatusServiceUnavailable}, a.Status, "answer %d: %s", i, a.Body)
	}
	var a webhookkit.Answer
	require.Eventually(t, func() bool {
		var err error
		a, err = webhookkit.Send(t.Context(), url, d)
		return err == nil && a.Status < 300
	}, time.Minute, 50*time.Millisecond)
	assert.True(t, a.Replayed(), "a retry of a done delivery is a replay: %v", a.Header)

	forged := d
	forged.Secret = []byte("wrong")
	a, err := webhookkit.Send(t.Context(), url, forged)
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, a.Status)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, 0)
	require.NoError(t, err)
	defer conn.Close()
	last, err := conn.ReadLastOffset()
	require.NoError(t, err)
	assert.Equal(t, int64(1), last, "one record for nine sends")
}
