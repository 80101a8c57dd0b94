package chsink_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestTLS runs the sink through a real TLS terminator in front of
// ClickHouse, with a CA the test made: a sink that trusts the CA inserts
// exactly once (a batch, its retry after a kill of the sink, and the
// rows after it); one that trusts another CA, names another host or
// speaks TLS to a plaintext port fails New at once with an error that
// says which, classified as not retryable.
func TestTLS(t *testing.T) {
	env := setup(t, eventsDDL)
	server, client := testkit.TLS(t)
	addr := testkit.TLSProxy(t, env.addr, server)

	t.Run("trusted", func(t *testing.T) {
		store := checkpoint.NewMemoryStorage()
		ctx := context.Background()
		s := env.newSinkAt(t, addr, store, chsink.Options{Client: ch.Options{TLS: client}, MaxRows: 7})
		require.NoError(t, feed(ctx, t, s, 0, 30))
		state, err := s.Snapshot(ctx, 1)
		require.NoError(t, err)
		require.NoError(t, s.CheckpointCompleted(ctx, 1))
		require.NoError(t, feed(ctx, t, s, 30, 60))
		_, err = s.Snapshot(ctx, 2)
		require.NoError(t, err)
		_ = s.Close() // as if killed before checkpoint 2 completed

		s = env.newSinkAt(t, addr, store, chsink.Options{Client: ch.Options{TLS: client}, MaxRows: 7})
		require.NoError(t, s.Restore(ctx, state))
		require.NoError(t, feed(ctx, t, s, 30, 90))
		_, err = s.Snapshot(ctx, 3)
		require.NoError(t, err)
		assert.Equal(t, uint64(expectedRows(0, 90)), env.count(t, "SELECT count() FROM "+env.db+".events"))
		assert.Equal(t, uint64(expectedRows(0, 90)), env.count(t, "SELECT uniqExact(id) FROM "+env.db+".events"))
	})

	_, otherCA := testkit.TLS(t)
	wrongHost := client.Clone()
	wrongHost.ServerName = "clickhouse.invalid"
	tests := []struct {
		name   string
		addr   string
		tls    *tls.Config
		reason string
	}{
		{"wrong CA", addr, otherCA, "certificate signed by unknown authority"},
		{"wrong host", addr, wrongHost, "not clickhouse.invalid"},
		// A server of its own: clickhouse-local exits when a TLS
		// ClientHello reaches its plaintext port (see
		// TestClientTLSOnPlaintextPort), and the shared one took the next
		// package test's query_log with it (UNEXPECTED_PACKET_FROM_CLIENT,
		// "expected Hello, got 22").
		{"plaintext server", testkit.StartClickHouse(t).Addr(), client, "first record does not look like a TLS handshake"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Now()
			_, err := chsink.New(context.Background(), chsink.Table{Addr: tt.addr, Name: "events"},
				checkpoint.TopicPartition{Topic: "events"}, checkpoint.NewMemoryStorage(), eventSchema,
				chsink.Options{Database: env.db, Client: ch.Options{TLS: tt.tls}})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.reason)
			assert.Contains(t, err.Error(), tt.addr, "the error names the server")
			assert.False(t, chsink.IsRetryable(err), "a new connection would fail the same way: %v", err)
			t.Logf("refused in %s: %v", time.Since(t0).Round(time.Millisecond), err)
		})
	}
}
