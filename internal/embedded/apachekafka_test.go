package embedded_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// startApacheKafka starts a cluster for the test, killed at cleanup.
func startApacheKafka(t *testing.T, opts embedded.ApacheKafkaOptions) *embedded.ApacheKafka {
	t.Helper()
	needMaven(t)
	opts.Dir = t.TempDir()
	opts.Progress = os.Stderr
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	k, err := embedded.StartApacheKafka(ctx, opts)
	require.NoError(t, err)
	t.Logf("apache kafka %s, %d node(s), started in %s", k.Version(), len(k.Nodes()), time.Since(t0).Round(10*time.Millisecond))
	t.Cleanup(func() { _ = k.Close() })
	return k
}

// TestApacheKafkaKillRestart: a record acknowledged with acks=all survives
// kill -9 of the broker, which comes back on the same port and directory.
func TestApacheKafkaKillRestart(t *testing.T) {
	embedded.SkipShort(t)
	for _, version := range []string{embedded.ApacheKafka4, embedded.ApacheKafka39} {
		t.Run(version, func(t *testing.T) {
			k := startApacheKafka(t, embedded.ApacheKafkaOptions{Version: version})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			require.NoError(t, embedded.CreateTopic(ctx, k.Brokers(), "events", 2))

			cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.DefaultProduceTopic("events"))
			require.NoError(t, err)
			require.NoError(t, cl.ProduceSync(ctx, kgo.StringRecord("before the kill")).FirstErr())
			cl.Close()

			pid := k.Node(1).PID()
			require.NotZero(t, pid)
			require.NoError(t, k.Kill())
			assert.Zero(t, k.Node(1).PID())
			t0 := time.Now()
			require.NoError(t, k.Start(ctx))
			t.Logf("restarted after kill -9 in %s", time.Since(t0).Round(10*time.Millisecond))
			assert.NotEqual(t, pid, k.Node(1).PID())

			cl, err = kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.ConsumeTopics("events"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			require.NoError(t, err)
			defer cl.Close()
			var got []string
			for len(got) < 1 {
				fs := cl.PollFetches(ctx)
				require.NoError(t, ctx.Err())
				fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
			}
			assert.Equal(t, []string{"before the kill"}, got)
		})
	}
}

// TestApacheKafkaTestTiming: the broker runs with the lowered test timing
// unless KafkaDefaults, which keeps Kafka's own.
func TestApacheKafkaTestTiming(t *testing.T) {
	embedded.SkipShort(t)
	tests := []struct {
		name string
		give embedded.ApacheKafkaOptions
		want map[string]string
	}{
		{name: "test timing", give: embedded.ApacheKafkaOptions{}, want: map[string]string{
			"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "100",
			"group.consumer.session.timeout.ms": "6000", "group.consumer.heartbeat.interval.ms": "500",
			"transaction.state.log.replication.factor": "1", "min.insync.replicas": "1",
		}},
		{name: "kafka defaults", give: embedded.ApacheKafkaOptions{KafkaDefaults: true}, want: map[string]string{
			"group.initial.rebalance.delay.ms": "3000", "group.min.session.timeout.ms": "6000",
			"group.consumer.session.timeout.ms": "45000", "group.consumer.heartbeat.interval.ms": "5000",
			"transaction.state.log.replication.factor": "1", "min.insync.replicas": "1",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := startApacheKafka(t, tt.give)
			assert.Equal(t, tt.want, brokerConfigs(t, k.Brokers(), 1, tt.want))
		})
	}
}

// brokerConfigs reads the named configs of broker id.
func brokerConfigs(t *testing.T, brokers []string, id int, names map[string]string) map[string]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType = kmsg.ConfigResourceTypeBroker
	rr.ResourceName = itoa(id)
	for n := range names {
		rr.ConfigNames = append(rr.ConfigNames, n)
	}
	req.Resources = append(req.Resources, rr)
	resp, err := req.RequestWith(context.Background(), cl)
	require.NoError(t, err)
	require.Len(t, resp.Resources, 1)
	got := map[string]string{}
	for _, c := range resp.Resources[0].Configs {
		if c.Value != nil {
			got[c.Name] = *c.Value
		}
	}
	return got
}

func itoa(i int) string { return string(rune('0' + i)) }

// TestApacheKafkaCluster: three nodes, topics with three replicas and
// min.insync.replicas 2. An acks=all produce goes on with the leader
// killed (a new leader is elected); on a topic whose min.insync.replicas is
// 3 the same kill makes it fail with NOT_ENOUGH_REPLICAS until the node is
// back; nothing acknowledged is lost. (Two of three nodes down would also
// take the KRaft controller quorum, each node being a controller too.)
func TestApacheKafkaCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three brokers")
	}
	k := startApacheKafka(t, embedded.ApacheKafkaOptions{Nodes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	require.Len(t, k.Brokers(), 3)
	require.NoError(t, embedded.CreateTopic(ctx, k.Brokers(), "events", 1))
	assert.Equal(t, map[string]string{"min.insync.replicas": "2", "default.replication.factor": "3"},
		brokerConfigs(t, k.Brokers(), 1, map[string]string{"min.insync.replicas": "", "default.replication.factor": ""}))
	admin, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...))
	require.NoError(t, err)
	defer admin.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "strict", 1, 3
	cfg := kmsg.NewCreateTopicsRequestTopicConfig()
	cfg.Name, cfg.Value = "min.insync.replicas", kmsg.StringPtr("3")
	rt.Configs = append(rt.Configs, cfg)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
	require.NoError(t, embedded.CreateTopic(ctx, k.Brokers(), "strict", 1)) // waits for its leader

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(2*time.Minute))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(topic, v string) error {
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr()
	}
	require.NoError(t, produce("events", "1"))
	require.NoError(t, produce("strict", "1"))

	leader := partitionLeader(t, ctx, k.Brokers(), "events")
	t0 := time.Now()
	require.NoError(t, k.Node(leader).Kill())
	require.NoError(t, produce("events", "2"), "acks=all with one of three replicas down")
	t.Logf("produce after killing leader %d: %s", leader, time.Since(t0).Round(time.Millisecond))
	require.Eventually(t, func() bool { return partitionLeader(t, ctx, k.Brokers(), "events") != leader },
		time.Minute, 200*time.Millisecond, "a new leader is elected")

	// The ISR shrinks once the dead node's broker session expires; until
	// then a produce may wait for it. One try each, so that the broker's
	// error is returned rather than retried into a timeout.
	strict, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(1), kgo.RecordDeliveryTimeout(10*time.Second))
	require.NoError(t, err)
	defer strict.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		err = strict.ProduceSync(ctx, &kgo.Record{Topic: "strict", Value: []byte("2")}).FirstErr()
		require.Error(t, err, "acks=all with 2 of the 3 in-sync replicas min.insync.replicas asks for")
		if errors.Is(err, kerr.NotEnoughReplicas) || time.Now().After(deadline) {
			break
		}
	}
	require.ErrorIs(t, err, kerr.NotEnoughReplicas)

	require.NoError(t, k.Node(leader).Start(ctx))
	require.NoError(t, produce("events", "3"))
	require.NoError(t, produce("strict", "3"))

	// Every acknowledged record once. On "strict" a refused or timed-out
	// "2" may have been appended all the same (acks=all answers after the
	// append): only the acknowledged ones are counted.
	for _, topic := range []string{"events", "strict"} {
		rd, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		require.NoError(t, err)
		seen := map[string]int{}
		for seen["3"] == 0 {
			fs := rd.PollFetches(ctx)
			require.NoError(t, ctx.Err())
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		}
		rd.Close()
		assert.Equal(t, 1, seen["1"], topic)
		assert.Equal(t, 1, seen["3"], topic)
		if topic == "events" {
			assert.Equal(t, 1, seen["2"], topic)
		}
	}
}

// partitionLeader returns the node id leading partition 0 of topic.
func partitionLeader(t *testing.T, ctx context.Context, brokers []string, topic string) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer cl.Close()
	for {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && len(resp.Topics) == 1 && len(resp.Topics[0].Partitions) == 1 && resp.Topics[0].Partitions[0].Leader >= 0 {
			return int(resp.Topics[0].Partitions[0].Leader)
		}
		require.NoError(t, ctx.Err())
		time.Sleep(100 * time.Millisecond)
	}
}

// TestApacheKafkaSecurityRefused: security options the broker would refuse
// at start, or read other than meant, are refused before anything starts.
func TestApacheKafkaSecurityRefused(t *testing.T) {
	tests := []struct {
		name string
		give embedded.KafkaSecurity
	}{
		{name: "certificate without key", give: embedded.KafkaSecurity{CertPEM: []byte("cert")}},
		{name: "key without certificate", give: embedded.KafkaSecurity{KeyPEM: []byte("key")}},
		{name: "empty password", give: embedded.KafkaSecurity{Users: map[string]string{"svc": ""}}},
		{name: "empty name", give: embedded.KafkaSecurity{Users: map[string]string{"": "s3cret"}}},
		{name: "comma in a password", give: embedded.KafkaSecurity{Users: map[string]string{"svc": "a,b"}}},
		{name: "quote in a name", give: embedded.KafkaSecurity{Users: map[string]string{`s"vc`: "s3cret"}}},
		{name: "line break in a password", give: embedded.KafkaSecurity{Users: map[string]string{"svc": "a\nb"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := embedded.StartApacheKafka(t.Context(), embedded.ApacheKafkaOptions{Dir: dir, Security: tt.give})
			require.Error(t, err)
			entries, rerr := os.ReadDir(dir)
			require.NoError(t, rerr)
			assert.Empty(t, entries, "nothing written")
		})
	}
}

// TestApacheKafkaTransactionVersion: TransactionVersion formats the
// cluster with that transaction.version, as the broker's ApiVersions
// reports it finalized; without it a 4.x cluster finalizes 2, its
// default.
func TestApacheKafkaTransactionVersion(t *testing.T) {
	embedded.SkipShort(t)
	tests := []struct {
		name string
		give embedded.ApacheKafkaOptions
		want int16
	}{
		{name: "4.4 default", give: embedded.ApacheKafkaOptions{}, want: 2},
		{name: "4.4 v1", give: embedded.ApacheKafkaOptions{TransactionVersion: 1}, want: 1},
		{name: "4.0 v1", give: embedded.ApacheKafkaOptions{Version: embedded.ApacheKafka40, TransactionVersion: 1}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := startApacheKafka(t, tt.give)
			assert.Equal(t, tt.want, finalizedFeature(t, k.Brokers(), "transaction.version"))
		})
	}
}

// finalizedFeature returns the finalized level of a feature, as ApiVersions
// reports it, waiting until the broker reports finalized features at all
// (it learns them from the controller's metadata).
func finalizedFeature(t *testing.T, brokers []string, name string) int16 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer cl.Close()
	for {
		resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
		require.NoError(t, err)
		if resp.FinalizedFeaturesEpoch >= 0 && len(resp.FinalizedFeatures) > 0 {
			for _, f := range resp.FinalizedFeatures {
				if f.Name == name {
					return f.MaxVersionLevel
				}
			}
			return 0 // finalized features without it: level 0
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no finalized features reported: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
