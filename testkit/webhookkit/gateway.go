package webhookkit

import (
	"net/http/httptest"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// GatewayOptions configures Gateway. The zero value is valid.
type GatewayOptions struct {
	// Provider is the idempotency preset the gateway serves. Default:
	// idempotency.GitHub().
	Provider idempotency.Provider
	// Secret, when set, is the webhook secret deliveries must be signed
	// with (Delivery.Secret). Default: none, unsigned deliveries accepted.
	Secret []byte
	// RedisAddr is the Redis of the idempotency keys. Default:
	// testkit.Redis(t), keys under a prefix of testkit.Name.
	RedisAddr string
}

// Gateway starts, for the test, the gateway examples/gateway runs: an
// idempotency.Handler on a Redis store (redisstore) publishing each
// delivery to topic on brokers once (kafkapub's idempotent producer,
// acks=all, keyed by the provider's partition key). It returns the URL to
// Send deliveries to, and stops at cleanup. It fails the test on error.
//
//	url := webhookkit.Gateway(t, cfg.Brokers, cfg.Topic, webhookkit.GatewayOptions{Secret: secret})
//	a, err := webhookkit.Send(ctx, url, webhookkit.Delivery{Provider: idempotency.GitHub(), ID: "d-1", Event: "push", Body: body, Secret: secret})
//
// Call it after testkit.Func, in the test process: in a Func child the
// kit's servers are refused (testkit.Func says why).
func Gateway(t testing.TB, brokers []string, topic string, opts GatewayOptions) string {
	t.Helper()
	if opts.Provider.Name == "" {
		opts.Provider = idempotency.GitHub()
	}
	if opts.RedisAddr == "" {
		opts.RedisAddr = testkit.Redis(t)
	}
	rdb := redis.NewClient(&redis.Options{Addr: opts.RedisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
	if err != nil {
		t.Fatalf("webhookkit: gateway: %v", err)
	}
	pub, err := kafkapub.NewIdempotent(t.Context(), brokers, topic, kafkapub.Options{})
	if err != nil {
		t.Fatalf("webhookkit: gateway: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	h, err := idempotency.NewHandler(store, pub.Publish, idempotency.Options{Provider: opts.Provider, Secret: opts.Secret})
	if err != nil {
		t.Fatalf("webhookkit: gateway: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // before the publisher closes: cleanups run last first
	return srv.URL
}
