package kafkasource_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestTLSAndSASL proves the gateway's publisher and the source reach an
// Apache Kafka broker (the release $EXACTLYONCE_KAFKA names) on a listener
// that requires TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) through
// kafka-go's Transport and Dialer, and that a wrong password or a client
// without TLS is refused rather than silently connected.
func TestTLSAndSASL(t *testing.T) {
	scram256, err := scram.Mechanism(scram.SHA256, "svc", "s3cret")
	require.NoError(t, err)
	scram512, err := scram.Mechanism(scram.SHA512, "svc", "s3cret")
	require.NoError(t, err)
	wrong256, err := scram.Mechanism(scram.SHA256, "svc", "wrong")
	require.NoError(t, err)
	wrong512, err := scram.Mechanism(scram.SHA512, "svc", "wrong")
	require.NoError(t, err)
	tests := []struct {
		name  string
		mech  sasl.Mechanism
		wrong sasl.Mechanism // the same mechanism with a wrong password
	}{
		{name: "plain", mech: plain.Mechanism{Username: "svc", Password: "s3cret"},
			wrong: plain.Mechanism{Username: "svc", Password: "wrong"}},
		{name: "scram-sha-256", mech: scram256, wrong: wrong256},
		{name: "scram-sha-512", mech: scram512, wrong: wrong512},
	}
	serverTLS, clientTLS := testkit.TLS(t)
	// One cluster for the three mechanisms (a JVM start each would cost
	// more than the test): each has its own topic and group.
	k := testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{SASLUsers: map[string]string{"svc": "s3cret"}, TLS: serverTLS})
	brokers := k.Listener("SASL_SSL")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topic := "secure-" + tt.name
			testkit.CreateTopic(t, k.Brokers(), topic, 2) // on the PLAINTEXT listener
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()

			pub, err := kafkapub.New(ctx, brokers, topic, kafkapub.Options{
				Transport: &kafka.Transport{TLS: clientTLS, SASL: tt.mech},
			})
			require.NoError(t, err)
			defer pub.Close()
			const n = 20
			for i := range n {
				require.NoError(t, pub.Publish(ctx, idempotency.Delivery{Key: fmt.Sprint(i), Source: "github", Body: []byte(fmt.Sprint(i))}))
			}

			store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
			require.NoError(t, err)
			coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 50 * time.Millisecond})
			require.NoError(t, err)
			defer coord.Close()
			opts := fastGroup
			opts.Dialer = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: clientTLS, SASLMechanism: tt.mech}
			cs := &counters{}
			src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: "g-" + tt.name, Topics: []string{topic}}), coord, cs.newProcessor, opts)
			require.NoError(t, err)
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- src.Run(runCtx) }()
			require.Eventually(t, func() bool {
				var total int64
				for p := range 2 {
					if cp := latestOf(t, store, topic, p); cp != nil {
						c, _ := decodeCounter(t, cp.States["counter"])
						total += c
					}
				}
				return total == n
			}, time.Minute, 20*time.Millisecond)
			stop()
			require.NoError(t, <-done)

			// Refusals: a wrong password, and no TLS at all (on the
			// SASL_SSL listener and on the SSL one).
			bad, err := kafkapub.New(ctx, brokers, topic, kafkapub.Options{
				Transport: &kafka.Transport{TLS: clientTLS, SASL: tt.wrong}, WriteTimeout: 2 * time.Second,
				MaxAttempts: 1, SkipDurabilityCheck: true,
			})
			if err == nil {
				err = bad.Publish(ctx, idempotency.Delivery{Key: "x", Source: "github", Body: []byte("{}")})
				_ = bad.Close()
			}
			assert.Error(t, err, "wrong password")
			for _, addr := range []string{brokers[0], k.Listener("SSL")[0]} {
				plainDialer := &kafka.Dialer{Timeout: 2 * time.Second}
				conn, err := plainDialer.DialContext(ctx, "tcp", addr)
				if err == nil {
					_, err = conn.ReadPartitions(topic)
					conn.Close()
				}
				assert.Error(t, err, "a client without TLS on %s", addr)
			}
		})
	}
}
