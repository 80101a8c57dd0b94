package main

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestClickHouseTLS runs the processor with -clickhouse-tls -clickhouse-ca
// against a real TLS terminator in front of ClickHouse, with a CA the test
// made: it creates its tables and writes every delivery once through it.
// With a CA file of another authority, or a -clickhouse host the
// certificate does not name, it stops at once with an error that says so
// instead of retrying.
func TestClickHouseTLS(t *testing.T) {
	chAddr, db := testkit.ClickHouse(t)
	server, _ := testkit.TLS(t)
	proxy := testkit.TLSProxy(t, chAddr, server)
	caFile := testkit.WriteCA(t, server)
	otherServer, _ := testkit.TLS(t)
	otherCA := testkit.WriteCA(t, otherServer)
	// A terminator whose certificate names another server.
	elsewhere, _ := testkit.TLSFor(t, "clickhouse.example")
	wrongHost := testkit.TLSProxy(t, chAddr, elsewhere)
	wrongHostCA := testkit.WriteCA(t, elsewhere)

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "webhooks"))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	brokers := kc.ListenAddrs()
	args := func(ch, ca string, more ...string) []string {
		return append([]string{"-listen", "127.0.0.1:0", "-brokers", brokers[0], "-topic", "webhooks", "-group", testkit.Name(t, "g"),
			"-clickhouse", ch, "-database", db, "-state-dir", t.TempDir(), "-checkpoint-interval", "200ms",
			"-clickhouse-tls", "-clickhouse-ca", ca}, more...)
	}
	noEnv := func(string) string { return "" }

	t.Run("trusted", func(t *testing.T) {
		recs, distinct := genRecords(genSpec{partitions: 1, perPart: 200, tenants: 5, dupRate: 0.1, seed: 7}, 0)
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("webhooks"))
		require.NoError(t, err)
		defer cl.Close()
		require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())

		ctx, cancel := context.WithCancel(context.Background())
		var out syncBuffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, args(proxy, caFile), noEnv, &out) }()
		defer func() {
			cancel()
			assert.NoError(t, <-done, "%s", out.String())
		}()
		require.Eventually(t, func() bool {
			select {
			case err := <-done:
				done <- err
				t.Fatalf("processor stopped: %v\n%s", err, out.String())
			default:
			}
			n, err := testkit.QueryStrings(context.Background(), chAddr, db, "SELECT toString(count()) FROM events")
			return err == nil && len(n) == 1 && n[0][0] == strconv.Itoa(distinct)
		}, 2*time.Minute, 100*time.Millisecond)
	})

	// Refused while creating the tables, and, with the tables there, by
	// the sinks of the chain (which the source does not restart: the
	// error is not retryable).
	tests := []struct {
		name, ch, ca, reason string
		more                 []string
	}{
		{"wrong CA", proxy, otherCA, "certificate signed by unknown authority", nil},
		{"wrong CA, sinks", proxy, otherCA, "certificate signed by unknown authority", []string{"-create-tables=false"}},
		{"wrong host", wrongHost, wrongHostCA, "127.0.0.1 because it doesn't contain any IP SANs", nil},
		{"wrong host, sinks", wrongHost, wrongHostCA, "127.0.0.1 because it doesn't contain any IP SANs", []string{"-create-tables=false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out syncBuffer
			err := run(ctx, args(tt.ch, tt.ca, tt.more...), noEnv, &out)
			require.Error(t, err, "%s", out.String())
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "stopped at once, not at the test's deadline")
			assert.Contains(t, err.Error(), tt.reason)
			t.Logf("stopped: %v", err)
		})
	}
}

// TestKafkaWrongCA: with -kafka-ca naming another authority than the
// broker's, the processor stops at once with an error that says so.
func TestKafkaWrongCA(t *testing.T) {
	chAddr, db := testkit.ClickHouse(t)
	server, _ := testkit.TLS(t)
	other, _ := testkit.TLS(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(server), kfake.SeedTopics(1, "webhooks"))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out syncBuffer
	err = run(ctx, []string{"-listen", "127.0.0.1:0", "-brokers", kc.ListenAddrs()[0], "-topic", "webhooks",
		"-group", testkit.Name(t, "g"), "-clickhouse", chAddr, "-database", db, "-state-dir", t.TempDir(),
		"-kafka-tls", "-kafka-ca", testkit.WriteCA(t, other)}, func(string) string { return "" }, &out)
	require.Error(t, err, "%s", out.String())
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "stopped at once, not at the test's deadline")
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")
	t.Logf("stopped: %v", err)
}

// syncBuffer collects the output of run in a goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
