package chsink_test

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestClientOptions proves Options.Client reaches every connection of the
// sink: with ZSTD compression and a setting the rows land; a setting the
// server does not know makes New fail (so settings are sent); TLS against
// the plaintext native port of the embedded ClickHouse fails the handshake
// (so TLS is used). The embedded clickhouse-local serves plaintext TCP
// only, so a TLS round trip is not tested here.
func TestClientOptions(t *testing.T) {
	e := setup(t, eventsDDL)
	store := checkpoint.NewMemoryStorage()
	s := e.newSink(t, store, chsink.Options{Client: ch.Options{
		Compression: ch.CompressionZSTD,
		Settings:    []ch.Setting{{Key: "max_threads", Value: "1"}},
	}})
	ctx := context.Background()
	require.NoError(t, feed(ctx, t, s, 0, 30))
	_, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, uint64(expectedRows(0, 30)), e.count(t, "SELECT count() FROM events"))

	newSink := func(client ch.Options) error {
		s, err := chsink.New(ctx, chsink.Table{Addr: e.addr, Name: "events"}, checkpoint.TopicPartition{Topic: "other", Partition: 0},
			checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: e.db, Client: client, DialTimeout: 2 * time.Second})
		if err == nil {
			_ = s.Close()
		}
		return err
	}
	assert.Error(t, newSink(ch.Options{Settings: []ch.Setting{{Key: "no_such_setting_exactlyonce", Value: "1", Important: true}}}),
		"an unknown setting is refused by the server")
	assert.NoError(t, newSink(ch.Options{}), "the same sink without them starts")
}

// TestClientTLSOnPlaintextPort proves Options.Client.TLS is used: a TLS
// handshake against the plaintext port fails. It runs on a dedicated
// server: clickhouse-local (chdb 26.7.3) exits when a TLS ClientHello
// reaches its plaintext native port (seen every time here), which would
// take the shared server of the other tests with it.
func TestClientTLSOnPlaintextPort(t *testing.T) {
	srv := testkit.StartClickHouse(t)
	db := testkit.NewDatabase(t, srv.Addr())
	ctx := context.Background()
	_, clientTLS := testkit.TLS(t)
	_, err := chsink.New(ctx, chsink.Table{Addr: srv.Addr(), Name: "events"}, checkpoint.TopicPartition{Topic: "t", Partition: 0},
		checkpoint.NewMemoryStorage(), eventSchema, chsink.Options{Database: db, Client: ch.Options{TLS: clientTLS}, DialTimeout: 2 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tls")
}

// TestRunTwice proves a second Run while one runs returns nil at once (the
// Source runs it, and older code started it too), and that the first one
// still flushes and stops at Close.
func TestRunTwice(t *testing.T) {
	e := setup(t, eventsDDL)
	s := e.newSink(t, checkpoint.NewMemoryStorage(), chsink.Options{MaxDelay: 20 * time.Millisecond})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- s.Run(ctx) }()
	require.NoError(t, feed(ctx, t, s, 0, 10))
	require.Eventually(t, func() bool { return e.count(t, "SELECT count() FROM events") == uint64(expectedRows(0, 10)) },
		10*time.Second, 10*time.Millisecond, "the first Run flushes")
	second := make(chan error, 1)
	go func() { second <- s.Run(ctx) }()
	select {
	case err := <-second:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a second Run did not return")
	}
	require.NoError(t, s.Close())
	assert.NoError(t, <-first)
}
