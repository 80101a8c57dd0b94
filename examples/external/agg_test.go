package webhookagg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"

	"example.com/webhookagg"
)

// envService hands the servers of the test to the aggregator's process.
const envService = "WEBHOOKAGG_SERVICE"

// TestPipeline sends 33 deliveries, 30 of them twice, through a gateway
// (Redis idempotency store, Kafka publisher) to the aggregator, which runs
// in a process of its own and is killed with SIGKILL halfway and started
// again, and checks that ClickHouse has every event once and the right
// count per organisation and minute, read with FINAL.
func TestPipeline(t *testing.T) {
	var svc webhookagg.Service
	if env := os.Getenv(envService); env != "" { // the aggregator's process
		require.NoError(t, json.Unmarshal([]byte(env), &svc))
	} else { // the test: every server from the test kit
		chAddr, db := testkit.ClickHouse(t)
		svc = webhookagg.Service{Brokers: testkit.Kafka(t), Group: testkit.Name(t, "agg"), Topic: testkit.Name(t, "webhooks"),
			DB: chsink.DB{Addr: chAddr, Database: db}, Dir: t.TempDir()}
		testkit.CreateTopic(t, svc.Brokers, svc.Topic, 2)
		for _, q := range webhookagg.DDL {
			require.NoError(t, testkit.Exec(t.Context(), chAddr, "", fmt.Sprintf(q, db)))
		}
		b, err := json.Marshal(svc)
		require.NoError(t, err)
		t.Setenv(envService, string(b))
	}
	agg := testkit.Func(t, "aggregator", func(ctx context.Context) error { return webhookagg.Run(ctx, svc) })

	// The gateway: GitHub deliveries, signed with the webhook's secret.
	rdb := redis.NewClient(&redis.Options{Addr: testkit.Redis(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	secret := []byte("webhook secret")
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
	require.NoError(t, err)
	pub, err := kafkapub.New(t.Context(), svc.Brokers, svc.Topic, kafkapub.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	h, err := idempotency.NewHandler(store, pub.Publish, idempotency.Options{Provider: idempotency.GitHub(), Secret: secret})
	require.NoError(t, err)
	gw := httptest.NewServer(h)
	t.Cleanup(gw.Close)

	// 30 events over five minutes, 10 s apart, organisations in turn, every
	// one twice (the provider retries); then one event per organisation at
	// minute 6, whose watermark closes the first five minutes.
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	send := func(id string, org int, at time.Time) {
		body := fmt.Sprintf(`{"ref":"refs/heads/main","organization":{"login":"org-%d"},"head_commit":{"timestamp":%q}}`,
			org, at.Format(time.RFC3339Nano))
		d := webhookkit.Delivery{Provider: idempotency.GitHub(), ID: id, Event: "push", Body: []byte(body), Secret: secret}
		require.Less(t, webhookkit.Post(t, gw.URL, d), 300, "delivery %s", id)
	}
	events := func() uint64 { return testkit.Count(t, svc.DB.Addr, svc.DB.Database, "SELECT count() FROM events") }
	for half := range 2 {
		for range 2 {
			for i := half * 15; i < half*15+15; i++ {
				send(fmt.Sprintf("delivery-%d", i), i%3, base.Add(time.Duration(i)*10*time.Second))
			}
		}
		if half == 0 { // kill the aggregator once it has written some rows, and start it again
			require.Eventually(t, func() bool { return events() > 0 }, time.Minute, 50*time.Millisecond)
			agg.Kill()
			agg.Start()
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
		return testkit.Rows(t, svc.DB.Addr, svc.DB.Database, fmt.Sprintf(
			"SELECT org, start, events FROM org_minute FINAL WHERE start < '%s' ORDER BY start, org", base.Add(5*time.Minute).Format(time.DateTime)))
	}
	require.Eventually(t, func() bool { return events() >= 33 && len(minutes()) == len(want) }, time.Minute, 50*time.Millisecond)
	assert.Equal(t, want, minutes())
	assert.Equal(t, uint64(33), events(), "every event once")
	assert.Equal(t, uint64(33), testkit.Count(t, svc.DB.Addr, svc.DB.Database, "SELECT uniqExact(id) FROM events"))
	require.NoError(t, agg.Terminate(time.Minute), "a graceful stop")
}
