package embedded_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	tests := []struct {
		name string
		give embedded.ApacheKafkaOptions
		want map[string]string
	}{
		{name: "test timing", give: embedded.ApacheKafkaOptions{}, want: map[string]string{
			"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "100",
			"transaction.state.log.replication.factor": "1", "min.insync.replicas": "1",
		}},
		{name: "kafka defaults", give: embedded.ApacheKafkaOptions{KafkaDefaults: true}, want: map[string]string{
			"group.initial.rebalance.delay.ms": "3000", "group.min.session.timeout.ms": "6000",
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
