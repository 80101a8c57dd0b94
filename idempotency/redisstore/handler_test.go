package redisstore_test

// These tests run the Handler over loopback HTTP with this store on a real
// redis-server and kafkapub's publisher on the test kit's Kafka, and lose
// the "done" that the Handler writes after its 202: the protocol then
// publishes the redelivery again, and the downstream deduplicator drops the
// copy.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/testkit"
)

var secret = []byte("settle-secret")

// gatedStore holds every Complete until the test opens the gate, so that the
// test can act between the Handler's answer and its "done"; with lose set,
// the Complete is never sent, as when the gateway dies at that moment.
type gatedStore struct {
	*redisstore.Store
	gate chan struct{}
	lose bool
}

var errGatewayDied = errors.New("test: the gateway died before writing done")

func (s *gatedStore) Complete(ctx context.Context, c idempotency.Claim, resp idempotency.Response, ttl time.Duration) error {
	<-s.gate
	if s.lose {
		return errGatewayDied
	}
	return s.Store.Complete(ctx, c, resp, ttl)
}

type settleGateway struct {
	h       *idempotency.Handler
	url     string
	brokers []string
	topic   string
}

func newSettleGateway(t *testing.T, redisAddr string, store idempotency.Store, opts idempotency.Options) *settleGateway {
	t.Helper()
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "webhooks")
	testkit.CreateTopic(t, brokers, topic, 1)
	pub, err := kafkapub.New(context.Background(), brokers, topic, kafkapub.Options{SkipDurabilityCheck: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, pub.Close()) })
	opts.Provider = idempotency.GitHub()
	opts.Provider.Partition = nil // the payloads are not whole GitHub events
	opts.Secret = secret
	h, err := idempotency.NewHandler(store, pub.Publish, opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &settleGateway{h: h, url: srv.URL, brokers: brokers, topic: topic}
}

func (g *settleGateway) deliver(t *testing.T, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderGitHubDelivery, key)
	req.Header.Set(idempotency.HeaderGitHubEvent, "pull_request")
	req.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub(secret, []byte(body)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed)
}

// records returns the event ids of every record in the topic.
func (g *settleGateway) records(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, m := range testkit.ReadTopic(t, g.brokers, g.topic, 0) {
		for _, h := range m.Headers {
			if h.Key == kafkapub.HeaderEventID {
				ids = append(ids, string(h.Value))
			}
		}
	}
	return ids
}

// firsts runs ids through the stream processor's deduplicator and returns
// the ids it lets through.
func firsts(t *testing.T, ids []string) []string {
	t.Helper()
	d, err := dedup.New(time.Hour, dedup.Options{})
	require.NoError(t, err)
	defer d.Close()
	var out []string
	for _, id := range ids {
		first, err := d.Observe(dedup.AppendKey(nil, "org", "github", id), time.Now())
		require.NoError(t, err)
		if first {
			out = append(out, id)
		}
	}
	return out
}

// Redis is killed after the Handler answered 202 and before it wrote "done":
// the Complete fails, and Redis comes back empty (no persistence). The
// redelivery is published again, and deduplication keeps one copy.
func TestHandlerRedisKilledBetweenAnswerAndDone(t *testing.T) {
	srv := testkit.StartRedis(t)
	s, err := redisstore.New(newClient(t, srv.Addr()), redisstore.Options{})
	require.NoError(t, err)
	store := &gatedStore{Store: s, gate: make(chan struct{})}
	g := newSettleGateway(t, srv.Addr(), store, idempotency.Options{StoreTimeout: 500 * time.Millisecond})
	const body = `{"action":"opened"}`

	status, _ := g.deliver(t, "delivery-1", body)
	require.Equal(t, http.StatusAccepted, status, "answered once Kafka acknowledged, before the done")
	srv.Kill()
	close(store.gate)
	require.NoError(t, g.h.Close()) // the Complete has failed against the dead Redis
	srv.Start()

	status, replayed := g.deliver(t, "delivery-1", body)
	assert.Equal(t, http.StatusAccepted, status)
	assert.Empty(t, replayed, "the key was lost with Redis: the redelivery is published again")
	ids := g.records(t)
	assert.Equal(t, []string{"delivery-1", "delivery-1"}, ids)
	assert.Equal(t, []string{"delivery-1"}, firsts(t, ids), "the copy is dropped downstream")
}

// The gateway dies after its 202 and before it wrote "done": the key stays
// pending in Redis. A redelivery within its pending TTL is asked to retry
// later and publishes nothing; one after the TTL is published again, and
// deduplication keeps one copy.
func TestHandlerDoneLostAfterAnswer(t *testing.T) {
	addr := testkit.Redis(t)
	s, err := redisstore.New(newClient(t, addr), redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
	require.NoError(t, err)
	store := &gatedStore{Store: s, gate: make(chan struct{}), lose: true}
	close(store.gate)
	g := newSettleGateway(t, addr, store, idempotency.Options{
		SideEffectTimeout: time.Second, StoreTimeout: time.Second, PendingTTL: 4 * time.Second,
	})
	const body = `{"action":"opened"}`

	status, _ := g.deliver(t, "delivery-1", body)
	require.Equal(t, http.StatusAccepted, status)
	require.NoError(t, g.h.Close()) // the done is lost
	status, _ = g.deliver(t, "delivery-1", body)
	assert.Equal(t, http.StatusServiceUnavailable, status, "pending until its TTL")
	assert.Equal(t, []string{"delivery-1"}, g.records(t))

	require.Eventually(t, func() bool {
		status, _ := g.deliver(t, "delivery-1", body)
		return status == http.StatusAccepted
	}, 30*time.Second, 200*time.Millisecond, "the redelivery after the pending TTL is published")
	ids := g.records(t)
	assert.Equal(t, []string{"delivery-1", "delivery-1"}, ids)
	assert.Equal(t, []string{"delivery-1"}, firsts(t, ids), "the copy is dropped downstream")
}
