package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Environment variables that point the kit at servers you run.
const (
	// EnvClickHouseAddr is host:port of a ClickHouse native (TCP) endpoint.
	EnvClickHouseAddr = "CLICKHOUSE_ADDR"
	// EnvKafkaBrokers is a comma-separated list of Kafka bootstrap brokers.
	EnvKafkaBrokers = "KAFKA_BROKERS"
	// EnvRedisAddr is host:port of a Redis server.
	EnvRedisAddr = "REDIS_ADDR"
	// EnvCI, when "true", turns every skip for an unavailable server into a
	// failure.
	EnvCI = "CI"
)

// startTimeout bounds every start and set-up call of the kit once the
// ClickHouse library is in the cache.
const startTimeout = 3 * time.Minute

// Unavailable fails the test when CI=true and skips it otherwise, with the
// reason either way; inside go test -short it skips (the short tier starts
// no servers). The kit calls it when a server cannot start; call it
// for servers of your own.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	if errors.Is(err, embedded.ErrShort) {
		t.Skip("testkit: " + service + ": go test -short starts no servers")
		return
	}
	if os.Getenv(EnvCI) == "true" {
		t.Fatalf("testkit: %s unavailable (CI=true, so this fails instead of skipping): %v", service, err)
		return
	}
	t.Skipf("testkit: %s unavailable, skipping (set CI=true to fail instead): %v", service, err)
}

// setupContext returns a context for set-up work bounded by startTimeout
// and by the test's own context.
func setupContext(t testing.TB) (context.Context, context.CancelFunc) {
	ctx := context.Background()
	if tt, ok := t.(interface{ Context() context.Context }); ok {
		ctx = tt.Context()
	}
	return context.WithTimeout(ctx, startTimeout)
}

// Name returns a name unique to this test and this run, made of [a-z0-9_]
// and starting with prefix: use it for topics, consumer groups, databases
// and key prefixes, so tests never collide on a shared server. The result
// is at most 60 characters.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteByte('_')
	for _, r := range strings.ToLower(t.Name()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 47 {
		name = name[:47]
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	return name + "_" + hex.EncodeToString(suffix[:])
}

// FreeAddr returns a loopback address (127.0.0.1:port) whose port was free
// a moment ago, for a server or child process the test starts with
// -listen. It is the one free-port helper of the tests and the servers
// testkit starts (internal/embedded.FreePort); another program may take
// the port before it is bound, so start what listens on it soon.
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := embedded.FreePort()
	if err != nil {
		t.Fatalf("testkit: no free port: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
