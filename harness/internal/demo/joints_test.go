package demo

import (
	"context"
	"math/rand/v2"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

// gatewayRig is the gateway binary with its keys in an embedded Redis,
// publishing to an embedded broker in its own process (faults on the wire),
// and a Jira provider that posts to it.
type gatewayRig struct {
	t       *testing.T
	kafka   *embedded.KafkaProcess
	redis   *embedded.Redis
	topic   string
	gw      *Gateway
	prov    *Provider
	args    []string
	gwStart func() *Gateway
}

// pendingTTL is the gateway's claim life in these tests: the shortest the
// gateway accepts (above its 5 s publish and 2 s store timeouts).
const pendingTTL = 8 * time.Second

func newGatewayRig(t *testing.T) *gatewayRig {
	t.Helper()
	ctx := t.Context()
	k, err := embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{})
	if err != nil && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = k.Stop() })
	r, err := embedded.StartRedis(ctx, embedded.RedisOptions{})
	if err != nil && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	rig := &gatewayRig{t: t, kafka: k, redis: r, topic: "webhooks"}
	require.NoError(t, embedded.CreateTopic(ctx, k.Brokers(), rig.topic, 1))
	bins := binaries(t)
	rig.args = []string{"-pipeline=devmetrics", "-brokers=" + k.Brokers()[0], "-topic=" + rig.topic, "-store=redis",
		"-redis=" + r.Addr(), "-retry-after=1s", "-pending-ttl=" + pendingTTL.String(), "-log-level=error"}
	rig.gwStart = func() *Gateway {
		gw, err := StartGateway(ctx, bins.Gateway, rig.args,
			[]string{"GITHUB_WEBHOOK_SECRET=" + WebhookSecret, "JIRA_WEBHOOK_SECRET=" + WebhookSecret}, os.Stderr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = gw.Stop() })
		return gw
	}
	rig.gw = rig.gwStart()
	rig.prov = &Provider{Client: &http.Client{Timeout: 20 * time.Second}, BaseURL: rig.gw.URL()}
	return rig
}

// jiraIncident is a Jira delivery the metrics count.
func jiraIncident(seed uint64) Delivery {
	g := NewGenerator(rand.New(rand.NewPCG(seed, 1)), templates{}, 1)
	return g.jira(devmetrics.TypeIncidentOpened, 0, 0, 1, eventStart)
}

func (r *gatewayRig) post(d Delivery) int {
	status, _, _, err := r.prov.post(r.t.Context(), d, 0)
	require.NoError(r.t, err)
	return status
}

func (r *gatewayRig) records() int64 {
	return kafkaRecords(r.t.Context(), r.kafka.Brokers(), r.topic, 1)
}

// killMidPublish posts d while the broker holds the publish (fault), waits
// until the gateway's metrics show the claim taken and the publish not
// returned (with ProduceLostAck: and the broker wrote it at least once),
// and kills the gateway with SIGKILL there; then starts a new one.
func (r *gatewayRig) killMidPublish(d Delivery, fault kafkafault.Fault) {
	ctx := r.t.Context()
	require.NoError(r.t, r.kafka.InjectFault(ctx, fault))
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		_, _, _, _ = r.prov.post(context.WithoutCancel(ctx), d, 0) // the connection dies with the gateway
	}()
	require.Eventually(r.t, func() bool {
		claimed, err1 := r.gw.Counter(ctx, "exactlyonce_idempotency_claims_total", `outcome="claimed"`)
		effects, err2 := r.gw.Counter(ctx, "exactlyonce_idempotency_side_effect_duration_seconds_count")
		return err1 == nil && err2 == nil && claimed == 1 && effects == 0
	}, 10*time.Second, 5*time.Millisecond, "the claim is taken, the publish under way")
	if fault.Kind == kafkafault.ProduceLostAck {
		require.Eventually(r.t, func() bool {
			st, err := r.kafka.FaultStats(ctx)
			return err == nil && st[kafkafault.ProduceLostAck].Hits > 0
		}, 10*time.Second, 5*time.Millisecond, "the broker wrote the event and lost its acknowledgement")
	}
	require.NoError(r.t, r.gw.cmd.Process.Kill())
	<-posted
	require.NoError(r.t, r.kafka.ClearFaults(ctx))
	r.gw = r.gwStart()
	r.prov.SetBaseURL(r.gw.URL())
}

// TestGatewayKilledBetweenClaimAndComplete: the gateway dies with SIGKILL
// after it claimed a delivery in Redis and before it completed it, once
// before the broker wrote the event and once after (the answer held back).
// The pending claim must not lose the event: a redelivery to the new
// gateway is answered 503 (never a 2xx for an event not published) while
// the dead gateway's claim lives, then the event is published and answered
// 202. The event is in Kafka at least once (twice when the first write had
// happened, or more when the client retried after lost acknowledgements:
// the processor's dedup drops the copies).
func TestGatewayKilledBetweenClaimAndComplete(t *testing.T) {
	if testing.Short() {
		t.Skip("kills gateway processes and waits for claims to expire")
	}
	tests := []struct {
		name    string
		fault   kafkafault.Fault
		written bool // whether the dead gateway's publish reached the log
	}{
		{"before the write", kafkafault.Fault{Kind: kafkafault.ProduceError, Count: -1}, false},
		// Every acknowledgement lost: the publish is written (maybe more
		// than once, by the client's retries) and never returns.
		{"after the write", kafkafault.Fault{Kind: kafkafault.ProduceLostAck, Count: -1}, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newGatewayRig(t)
			d := jiraIncident(uint64(i))
			killed := time.Now()
			r.killMidPublish(d, tt.fault)
			written := r.records()
			assert.Equal(t, tt.written, written > 0, "what the dead gateway wrote: %d records", written)

			status := r.post(d)
			assert.Equal(t, http.StatusServiceUnavailable, status, "the dead gateway's claim is pending: 503, so the provider retries")
			assert.Equal(t, written, r.records(), "nothing published while the claim is pending")

			var final int
			require.Eventually(t, func() bool {
				final = r.post(d)
				return final != http.StatusServiceUnavailable
			}, pendingTTL+10*time.Second, 200*time.Millisecond)
			assert.Equal(t, http.StatusAccepted, final)
			assert.GreaterOrEqual(t, time.Since(killed), pendingTTL-time.Second, "published only once the claim expired")
			assert.Equal(t, written+1, r.records(), "published once more, once the claim expired")
			assert.Equal(t, http.StatusAccepted, r.post(d), "a retry is answered from the store")
			assert.Equal(t, written+1, r.records())
		})
	}
}

// TestGatewayRedisDownAndRestarted: while Redis is down the gateway answers
// 503 and publishes nothing; once it is back (empty: no persistence) the
// retry is published and answered 202. A redelivery of a delivery whose key
// Redis lost with the restart is published again: a duplicate for the
// processor's dedup, never a loss.
func TestGatewayRedisDownAndRestarted(t *testing.T) {
	if testing.Short() {
		t.Skip("kills Redis under the gateway binary")
	}
	r := newGatewayRig(t)
	ctx := t.Context()
	done, d := jiraIncident(10), jiraIncident(11)
	require.Equal(t, http.StatusAccepted, r.post(done))
	require.Equal(t, int64(1), r.records())

	require.NoError(t, r.redis.Kill())
	for range 3 {
		assert.Equal(t, http.StatusServiceUnavailable, r.post(d), "Redis is down")
	}
	assert.Equal(t, int64(1), r.records(), "nothing published without a claim")

	require.NoError(t, r.redis.Start(ctx))
	require.Eventually(t, func() bool { return r.post(d) == http.StatusAccepted }, 20*time.Second, 100*time.Millisecond)
	assert.Equal(t, int64(2), r.records())
	assert.Equal(t, http.StatusAccepted, r.post(done), "the key Redis lost: published again")
	assert.Equal(t, int64(3), r.records(), "a duplicate, for the processor's dedup")
}
