package testkit_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestKafkaSmoke proves the cluster is a real Kafka protocol endpoint for
// the client the SDK uses: kafka-go writes with acks=all, reads through a
// consumer group, commits, and the commit is visible to the group
// coordinator.
func TestKafkaSmoke(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	group := testkit.Name(t, "group")
	testkit.CreateTopic(t, brokers, topic, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	w := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		RequiredAcks: kafka.RequireAll,
		Balancer:     &kafka.Hash{},
		BatchTimeout: time.Millisecond,
	}
	const n = 10
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	require.NoError(t, w.WriteMessages(ctx, msgs...))
	require.NoError(t, w.Close())

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:        brokers,
		GroupID:        group,
		Topic:          topic,
		StartOffset:    kafka.FirstOffset,
		MaxWait:        100 * time.Millisecond,
		CommitInterval: 0, // synchronous commits
	})
	defer r.Close()
	got := map[string]string{}
	committed := map[int]int64{}
	for len(got) < n {
		m, err := r.FetchMessage(ctx)
		require.NoError(t, err)
		got[string(m.Key)] = string(m.Value)
		require.NoError(t, r.CommitMessages(ctx, m))
		committed[m.Partition] = m.Offset + 1
	}
	for i := range n {
		assert.Equal(t, fmt.Sprintf("v%d", i), got[fmt.Sprintf("k%d", i)])
	}

	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	parts := []int{0, 1, 2}
	resp, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	require.NoError(t, err)
	require.NoError(t, resp.Error)
	fetched := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		require.NoError(t, p.Error)
		if p.CommittedOffset >= 0 {
			fetched[p.Partition] = p.CommittedOffset
		}
	}
	assert.Equal(t, committed, fetched)
}

// TestKafkaBrokerListeners: a broker started with SASL users and a
// certificate has a listener per security protocol, each answering a
// client that speaks it (PLAIN and both SCRAMs with the right password)
// and refusing one that does not (a wrong password, no SASL, no TLS).
func TestKafkaBrokerListeners(t *testing.T) {
	serverTLS, clientTLS := testkit.TLS(t)
	k := testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{SASLUsers: map[string]string{"svc": "s3cret", "ops": "0ther"}, TLS: serverTLS})
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, k.Brokers(), topic, 1)
	mech := func(m sasl.Mechanism, err error) sasl.Mechanism {
		require.NoError(t, err)
		return m
	}
	tests := []struct {
		name      string
		listener  string
		clientTLS *tls.Config
		sasl      sasl.Mechanism
		wantErr   bool
	}{
		{name: "plaintext", listener: "PLAINTEXT"},
		{name: "sasl plain", listener: "SASL_PLAINTEXT", sasl: plain.Mechanism{Username: "svc", Password: "s3cret"}},
		{name: "sasl scram-sha-256", listener: "SASL_PLAINTEXT", sasl: mech(scram.Mechanism(scram.SHA256, "ops", "0ther"))},
		{name: "sasl scram-sha-512", listener: "SASL_PLAINTEXT", sasl: mech(scram.Mechanism(scram.SHA512, "svc", "s3cret"))},
		{name: "sasl wrong password", listener: "SASL_PLAINTEXT", sasl: mech(scram.Mechanism(scram.SHA512, "svc", "0ther")), wantErr: true},
		{name: "sasl unknown user", listener: "SASL_PLAINTEXT", sasl: plain.Mechanism{Username: "nobody", Password: "s3cret"}, wantErr: true},
		{name: "sasl without sasl", listener: "SASL_PLAINTEXT", wantErr: true},
		{name: "ssl", listener: "SSL", clientTLS: clientTLS},
		{name: "ssl without tls", listener: "SSL", wantErr: true},
		{name: "sasl_ssl", listener: "SASL_SSL", clientTLS: clientTLS, sasl: mech(scram.Mechanism(scram.SHA256, "svc", "s3cret"))},
		{name: "sasl_ssl without sasl", listener: "SASL_SSL", clientTLS: clientTLS, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			d := &kafka.Dialer{Timeout: 5 * time.Second, TLS: tt.clientTLS, SASLMechanism: tt.sasl}
			conn, err := d.DialContext(ctx, "tcp", k.Listener(tt.listener)[0])
			var ps []kafka.Partition
			if err == nil {
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				ps, err = conn.ReadPartitions(topic)
				conn.Close()
			}
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Len(t, ps, 1)
		})
	}
}

func TestCreateTopicIdempotent(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, 4)
	testkit.CreateTopic(t, brokers, topic, 4) // same count: no-op

	conn, err := kafka.DialContext(t.Context(), "tcp", brokers[0])
	require.NoError(t, err)
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	require.NoError(t, err)
	assert.Len(t, parts, 4)
}

// TestKafkaProcessKill proves a broker process comes back after kill -9 with
// the records it acknowledged.
func TestKafkaProcessKill(t *testing.T) {
	srv := testkit.StartKfakeProcess(t)
	brokers := srv.Brokers()
	testkit.CreateTopic(t, brokers, "events", 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "events", RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Transport: &kafka.Transport{}}
	require.NoError(t, w.WriteMessages(ctx, kafka.Message{Value: []byte("before")}))
	require.NoError(t, w.Close())

	srv.Kill()
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err == nil {
		conn.Close()
	}
	require.Error(t, err, "broker is down")

	srv.Start()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: "events", Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	require.NoError(t, err)
	assert.Equal(t, "before", string(m.Value))
}
