package webhookagg_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"

	"example.com/webhookagg"
)

// TestPipeline sends 33 deliveries, 30 of them twice, through a gateway
// (Redis idempotency store, Kafka publisher) to the processor, and checks
// that ClickHouse has every event once and the right count per
// organisation and minute, read with FINAL.
func TestPipeline(t *testing.T) {
	// Every server, from the test kit.
	chAddr, db := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	rdb := redis.NewClient(&redis.Options{Addr: testkit.Redis(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	topic := testkit.Name(t, "webhooks")
	testkit.CreateTopic(t, brokers, topic, 2)
	for _, q := range webhookagg.DDL {
		require.NoError(t, testkit.Exec(t.Context(), chAddr, "", fmt.Sprintf(q, db)))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// The gateway: GitHub deliveries, signed with the webhook's secret.
	secret := []byte("webhook secret")
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
	require.NoError(t, err)
	pub, err := kafkapub.New(ctx, brokers, topic, kafkapub.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	h, err := idempotency.NewHandler(store, pub.Publish, idempotency.Options{
		Provider: idempotency.GitHub(), Secret: secret,
	})
	require.NoError(t, err)
	gw := httptest.NewServer(h)
	t.Cleanup(gw.Close)

	// The processor.
	cstore, err := checkpoint.NewStore(checkpoint.NewMemStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(cstore, checkpoint.Options{Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = coord.Close() })
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "agg"), Topics: []string{topic}},
		coord, webhookagg.NewProcessor(webhookagg.Config{DB: chsink.DB{Addr: chAddr, Database: db}, Store: cstore}),
		kafkasource.Options{HeartbeatInterval: 100 * time.Millisecond, MaxWait: 100 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()

	// 30 events over five minutes, 10 s apart, organisations in turn; then
	// one event per organisation at minute 6, whose watermark closes the
	// first five minutes.
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	send := func(id string, org int, at time.Time) {
		body := fmt.Sprintf(`{"ref":"refs/heads/main","organization":{"login":"org-%d"},"head_commit":{"timestamp":%q}}`,
			org, at.Format(time.RFC3339Nano))
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL, bytes.NewBufferString(body))
		require.NoError(t, err)
		req.Header.Set(idempotency.HeaderGitHubDelivery, id)
		req.Header.Set(idempotency.HeaderGitHubEvent, "push")
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(body))
		req.Header.Set(idempotency.HeaderGitHubSignature, "sha256="+hex.EncodeToString(mac.Sum(nil)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Less(t, resp.StatusCode, 300, "delivery %s", id)
	}
	for range 2 { // every delivery twice: the provider retries
		for i := range 30 {
			send(fmt.Sprintf("delivery-%d", i), i%3, base.Add(time.Duration(i)*10*time.Second))
		}
	}
	for org := range 3 {
		send(fmt.Sprintf("closer-%d", org), org, base.Add(6*time.Minute))
	}

	var want [][]string // two events per organisation and minute
	for m := range 5 {
		for org := range 3 {
			want = append(want, []string{fmt.Sprintf("org-%d", org), base.Add(time.Duration(m) * time.Minute).Format("2006-01-02 15:04:05.000"), "2"})
		}
	}
	minutes := func() [][]string {
		return testkit.Rows(t, chAddr, db, fmt.Sprintf("SELECT org, start, events FROM org_minute FINAL WHERE start < '%s' ORDER BY start, org",
			base.Add(5*time.Minute).Format(time.DateTime)))
	}
	require.Eventually(t, func() bool {
		return testkit.Count(t, chAddr, db, "SELECT count() FROM events") == 33 && len(minutes()) == len(want)
	}, time.Minute, 50*time.Millisecond)
	assert.Equal(t, want, minutes())
	assert.Equal(t, uint64(33), testkit.Count(t, chAddr, db, "SELECT uniqExact(id) FROM events"), "every event once")

	cancel()
	require.NoError(t, <-done)
}
