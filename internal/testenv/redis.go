package testenv

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// Redis returns host:port of a Redis server for this test: testkit.Redis
// ($REDIS_ADDR, or a fresh redis-server stopped at cleanup).
func Redis(t testing.TB) string {
	t.Helper()
	return testkit.Redis(t)
}

// RedisServer is a dedicated redis-server a test may stop, kill and start.
type RedisServer = testkit.RedisServer

// StartRedis starts a dedicated redis-server for this test, stopped at
// cleanup; see testkit.StartRedis.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	return testkit.StartRedis(t)
}
