package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/idempotencytest"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// The string layout, byte for byte: what Claim and Complete write, and
// their TTLs.
func TestLayout(t *testing.T) {
	ctx := context.Background()
	rdb := newClient(t, testkit.Redis(t))
	prefix := testkit.Name(t, "idem") + ":"
	s, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	require.NoError(t, err)

	c, err := s.Claim(ctx, "k", "fp", 30*time.Second)
	require.NoError(t, err)
	got, err := rdb.Get(ctx, prefix+"k").Result()
	require.NoError(t, err)
	assert.Equal(t, "p"+c.Token+"\x00fp", got)
	ttl, err := rdb.PTTL(ctx, prefix+"k").Result()
	require.NoError(t, err)
	assert.InDelta(t, 30*time.Second, ttl, float64(2*time.Second))

	require.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte(`{}`)}, time.Hour))
	got, err = rdb.Get(ctx, prefix+"k").Result()
	require.NoError(t, err)
	assert.Equal(t, "d202\x002\x0016\x00fpapplication/json{}", got)
	ttl, err = rdb.PTTL(ctx, prefix+"k").Result()
	require.NoError(t, err)
	assert.InDelta(t, time.Hour, ttl, float64(2*time.Second))

	// A value of neither state is an error, and left alone.
	require.NoError(t, rdb.Set(ctx, prefix+"str", "v", time.Minute).Err())
	_, err = s.Claim(ctx, "str", "fp", time.Minute)
	assert.ErrorContains(t, err, "corrupt value")
	v, err := rdb.Get(ctx, prefix+"str").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
}

// Keys written by older Stores, as hashes, keep their meaning: a Claim
// replays a done one, refuses a pending one or another payload, and claims
// one without state in the hash layout, whose claim then completes,
// releases and extends there.
func TestHashKeysOfOlderStores(t *testing.T) {
	ctx := context.Background()
	rdb := newClient(t, testkit.Redis(t))
	prefix := testkit.Name(t, "idem") + ":"
	s, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	require.NoError(t, err)
	hset := func(key string, fields ...string) {
		args := make([]any, len(fields))
		for i, f := range fields {
			args[i] = f
		}
		require.NoError(t, rdb.HSet(ctx, prefix+key, args...).Err())
		require.NoError(t, rdb.PExpire(ctx, prefix+key, time.Minute).Err())
	}
	hset("done", "s", "d", "t", "old", "f", "fp", "c", "202", "y", "application/json", "b", `{"a":1}`)
	hset("pending", "s", "p", "t", "old", "f", "fp")
	hset("stray", "x", "1")

	_, err = s.Claim(ctx, "done", "fp", time.Minute)
	var done *idempotency.DoneError
	require.ErrorAs(t, err, &done)
	assert.Equal(t, idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte(`{"a":1}`)}, done.Record.Response)
	_, err = s.Claim(ctx, "done", "other", time.Minute)
	assert.ErrorIs(t, err, idempotency.ErrFingerprintMismatch)
	_, err = s.Claim(ctx, "pending", "fp", time.Minute)
	assert.ErrorIs(t, err, idempotency.ErrPending)
	_, err = s.Claim(ctx, "pending", "other", time.Minute)
	assert.ErrorIs(t, err, idempotency.ErrFingerprintMismatch)

	// A hash without the state field is no claim: claimed, in the hash.
	c, err := s.Claim(ctx, "stray", "fp", time.Minute)
	require.NoError(t, err)
	got, err := rdb.HGetAll(ctx, prefix+"stray").Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"s": "p", "t": c.Token, "f": "fp", "x": "1"}, got)
	require.NoError(t, s.Extend(ctx, c, time.Hour))
	ttl, err := rdb.PTTL(ctx, prefix+"stray").Result()
	require.NoError(t, err)
	assert.InDelta(t, time.Hour, ttl, float64(2*time.Second))
	require.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202, Body: []byte("ok")}, time.Hour))
	_, err = s.Claim(ctx, "stray", "fp", time.Minute)
	require.ErrorAs(t, err, &done)
	assert.Equal(t, idempotency.Response{Status: 202, Body: []byte("ok")}, done.Record.Response)
	assert.ErrorIs(t, s.Release(ctx, c), idempotency.ErrClaimLost, "done: nothing to release")
}

// A claim whose key now holds the other layout (it expired and another
// gateway took it over) is lost: Complete, Release and Extend say so and
// leave the key alone.
func TestClaimLostToTheOtherLayout(t *testing.T) {
	ctx := context.Background()
	rdb := newClient(t, testkit.Redis(t))
	prefix := testkit.Name(t, "idem") + ":"
	s, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	require.NoError(t, err)

	str, err := s.Claim(ctx, "a", "fp", time.Minute)
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, prefix+"a").Err())
	require.NoError(t, rdb.HSet(ctx, prefix+"a", "s", "p", "t", str.Token, "f", "fp").Err())

	require.NoError(t, rdb.HSet(ctx, prefix+"b", "x", "1").Err())
	hash, err := s.Claim(ctx, "b", "fp", time.Minute)
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, prefix+"b").Err())
	require.NoError(t, rdb.Set(ctx, prefix+"b", "p"+hash.Token+"\x00fp", time.Minute).Err())

	for _, c := range []idempotency.Claim{str, hash} {
		assert.ErrorIs(t, s.Extend(ctx, c, time.Hour), idempotency.ErrClaimLost)
		assert.ErrorIs(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, time.Hour), idempotency.ErrClaimLost)
		assert.ErrorIs(t, s.Release(ctx, c), idempotency.ErrClaimLost)
	}
	n, err := rdb.Exists(ctx, prefix+"a", prefix+"b").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 2, n)
}

// On a Redis before 7.0 the Store claims in the hash layout throughout;
// the suite passes there too.
func TestConformanceHashLayout(t *testing.T) {
	addr := testkit.Redis(t)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		s, err := redisstore.New(newClient(t, addr), redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
		require.NoError(t, err)
		redisstore.UseHashLayout(s)
		return s
	})
}

// scriptsOnly is a client that runs scripts and nothing else, as
// redis.Scripter promises: the Store claims through a script.
type scriptsOnly struct{ redis.Scripter }

func TestConformanceScriptsOnly(t *testing.T) {
	addr := testkit.Redis(t)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		s, err := redisstore.New(scriptsOnly{newClient(t, addr)}, redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
		require.NoError(t, err)
		return s
	})
}

// Fingerprints, content types and bodies with NULs, digits or nothing at
// all read back as they were written, pending and done.
func TestOddValues(t *testing.T) {
	ctx := context.Background()
	rdb := newClient(t, testkit.Redis(t))
	s, err := redisstore.New(rdb, redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
	require.NoError(t, err)
	tests := []struct {
		name, fingerprint string
		resp              idempotency.Response
	}{
		{"empty", "", idempotency.Response{Status: 202}},
		{"nul in fingerprint", "a\x00b", idempotency.Response{Status: 202, ContentType: "text/plain", Body: []byte("ok")}},
		{"digits and nuls", "1\x002\x00", idempotency.Response{Status: 200, ContentType: "\x003", Body: []byte("\x00d1\x00")}},
		{"binary body", "fp", idempotency.Response{Status: 201, ContentType: "application/octet-stream", Body: []byte{0, 0xff, 'p', 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := s.Claim(ctx, tt.name, tt.fingerprint, time.Minute)
			require.NoError(t, err)
			_, err = s.Claim(ctx, tt.name, tt.fingerprint, time.Minute)
			assert.ErrorIs(t, err, idempotency.ErrPending)
			_, err = s.Claim(ctx, tt.name, tt.fingerprint+"\x00", time.Minute)
			assert.ErrorIs(t, err, idempotency.ErrFingerprintMismatch)

			require.NoError(t, s.Complete(ctx, c, tt.resp, time.Minute))
			_, err = s.Claim(ctx, tt.name, tt.fingerprint, time.Minute)
			var done *idempotency.DoneError
			require.ErrorAs(t, err, &done)
			assert.Equal(t, idempotency.Record{Key: tt.name, Fingerprint: tt.fingerprint, Response: tt.resp}, done.Record)
			_, err = s.Claim(ctx, tt.name, tt.fingerprint+"\x00", time.Minute)
			assert.ErrorIs(t, err, idempotency.ErrFingerprintMismatch)
		})
	}
}
