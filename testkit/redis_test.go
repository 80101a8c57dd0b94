package testkit_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestRedisSmoke proves the server is a real Redis: SET NX with a TTL claims
// a key once, and the TTL is set.
func TestRedisSmoke(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testkit.Redis(t)})
	defer rdb.Close()
	ctx := t.Context()
	key := testkit.Name(t, "key")

	ok, err := rdb.SetNX(ctx, key, "first", time.Minute).Result()
	require.NoError(t, err)
	assert.True(t, ok, "first SET NX claims the key")

	ok, err = rdb.SetNX(ctx, key, "second", time.Minute).Result()
	require.NoError(t, err)
	assert.False(t, ok, "second SET NX finds the key taken")

	v, err := rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "first", v)

	ttl, err := rdb.TTL(ctx, key).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 50*time.Second)
	assert.LessOrEqual(t, ttl, time.Minute)
}

// TestRedisStopStart proves a dedicated server restarts on the same address
// and, having no persistence, comes back empty.
func TestRedisStopStart(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	ctx := t.Context()

	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	addr := srv.Addr()
	srv.Stop()
	assert.Error(t, rdb.Ping(ctx).Err(), "server is down")

	srv.Start()
	assert.Equal(t, addr, srv.Addr())
	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)
	assert.ErrorIs(t, rdb.Get(ctx, "k").Err(), redis.Nil, "no persistence: the key is gone")

	srv.Kill()
	srv.Start()
	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)
}
