package testkit

import (
	"context"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Standalone is a server the kit started outside a test, for runnable
// examples and small programs: Addr is where it listens, Close stops it
// and removes its data. Tests use ClickHouse and Redis instead, which stop
// their servers at cleanup and skip (or fail, with CI=true) when a server
// cannot start. For Kafka, an example starts franz-go's kfake itself:
//
//	k, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
//	defer k.Close()
//	brokers := k.ListenAddrs()
type Standalone struct {
	addr string
	stop func() error
}

// Addr returns host:port on 127.0.0.1.
func (s *Standalone) Addr() string { return s.addr }

// Close stops the server and waits until it has exited.
func (s *Standalone) Close() error { return s.stop() }

// StandaloneClickHouse starts the kit's embedded ClickHouse 26.7 on a free
// port over a temporary directory, as ClickHouse does for tests but
// without one; the first use on a machine downloads it into the cache.
// Connect as user "default" without password.
func StandaloneClickHouse(ctx context.Context) (*Standalone, error) {
	srv, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{})
	if err != nil {
		return nil, err
	}
	return &Standalone{addr: srv.Addr(), stop: srv.Stop}, nil
}

// StandaloneRedis starts a redis-server without persistence on a free
// port, as Redis does for tests but without one.
func StandaloneRedis(ctx context.Context) (*Standalone, error) {
	r, err := embedded.StartRedis(ctx, embedded.RedisOptions{})
	if err != nil {
		return nil, err
	}
	return &Standalone{addr: r.Addr(), stop: r.Stop}, nil
}
