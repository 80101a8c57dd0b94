package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/idempotencytest"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/internal/netfail"
	"github.com/exactlyonce/exactlyonce/testkit"
)

func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestConformance(t *testing.T) {
	addr := testkit.Redis(t)
	idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
		s, err := redisstore.New(newClient(t, addr), redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
		require.NoError(t, err)
		return s
	})
}

// pipeliners are the deferred AutoPipeliner's configurations the tests
// run: go-redis's default (half duplex) and FullDuplex, which the gateway
// uses.
var pipeliners = []struct {
	name string
	opts func() *redis.AutoPipelineOptions
}{
	{"halfduplex", redis.DefaultAutoPipelineOptions},
	{"fullduplex", func() *redis.AutoPipelineOptions {
		o := redis.DefaultAutoPipelineOptions()
		o.FullDuplex = true
		return o
	}},
}

// TestConformanceAutoPipelined runs the suite through go-redis's
// AutoPipeliner, the client the package doc recommends for a busy gateway:
// scripts of concurrent callers share pipelines, and every guarantee holds.
func TestConformanceAutoPipelined(t *testing.T) {
	addr := testkit.Redis(t)
	for _, p := range pipeliners {
		t.Run(p.name, func(t *testing.T) {
			idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
				ap, err := newClient(t, addr).AsyncAutoPipelineWithOptions(p.opts())
				require.NoError(t, err)
				s, err := redisstore.New(ap, redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
				require.NoError(t, err)
				return s
			})
		})
	}
}

// TestAutoPipelinedRace claims each of a few keys from many goroutines at
// once through one AutoPipeliner, so claims of one key share a pipeline:
// exactly one claim per key wins, and the scripts reload after SCRIPT FLUSH.
func TestAutoPipelinedRace(t *testing.T) {
	ctx := context.Background()
	rdb := newClient(t, testkit.Redis(t))
	ap, err := rdb.AsyncAutoPipeline()
	require.NoError(t, err)
	s, err := redisstore.New(ap, redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
	require.NoError(t, err)
	for round := range 3 {
		require.NoError(t, rdb.ScriptFlush(ctx).Err(), "scripts must reload on NOSCRIPT")
		const keys, callers = 8, 64
		var won [keys]atomic.Int64
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				k := i % keys
				_, err := s.Claim(ctx, fmt.Sprintf("r%d-k%d", round, k), "fp", time.Minute)
				switch {
				case err == nil:
					won[k].Add(1)
				case errors.Is(err, idempotency.ErrPending):
				default:
					t.Errorf("claim: %v", err)
				}
			})
		}
		wg.Wait()
		for k := range won {
			assert.EqualValues(t, 1, won[k].Load(), "round %d key %d", round, k)
		}
	}
}

func TestRedisDownAndBack(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	s, err := redisstore.New(newClient(t, srv.Addr()), redisstore.Options{})
	require.NoError(t, err)

	srv.Stop()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = s.Claim(cctx, "k", "fp", time.Minute)
	require.Error(t, err)
	assert.True(t, idempotency.IsOutcomeUnknown(err), "an unreachable store is not a definite answer: %v", err)

	srv.Start()
	c, err := s.Claim(ctx, "k", "fp", time.Minute)
	require.NoError(t, err)
	assert.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, time.Minute))
}

func TestNewRejectsNilClient(t *testing.T) {
	_, err := redisstore.New(nil, redisstore.Options{})
	assert.ErrorIs(t, err, idempotency.ErrInvalidOptions)
}

// dropProxy forwards TCP to a Redis server (internal/netfail's Proxy).
// After drop is set, it swallows the server's next reply and closes that
// connection: the command ran but its answer was lost, and go-redis
// replays it on a fresh connection.
type dropProxy struct {
	*netfail.Proxy
	drop atomic.Bool
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	p := &dropProxy{}
	np, err := netfail.NewProxy(target, netfail.ProxyOptions{
		Forward: func(c *netfail.Conn, toBackend bool, _ []byte) bool {
			if !toBackend && p.drop.CompareAndSwap(true, false) {
				c.Close()
				return false
			}
			return true
		},
	})
	require.NoError(t, err)
	p.Proxy = np
	t.Cleanup(np.Close)
	return p
}

func TestReplayedScriptsAfterLostReply(t *testing.T) {
	for _, pipelined := range []string{"", pipeliners[0].name, pipeliners[1].name} {
		t.Run(fmt.Sprintf("autopipelined=%v", pipelined), func(t *testing.T) {
			ctx := context.Background()
			proxy := newDropProxy(t, testkit.Redis(t))
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: 2, PoolSize: 1})
			t.Cleanup(func() { _ = rdb.Close() })
			var scripter redis.Scripter = rdb
			for _, p := range pipeliners {
				if p.name == pipelined {
					ap, err := rdb.AsyncAutoPipelineWithOptions(p.opts())
					require.NoError(t, err)
					scripter = ap
				}
			}
			s, err := redisstore.New(scripter, redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
			require.NoError(t, err)
			warm, err := s.Claim(ctx, "warm", "fp", time.Minute) // loads the scripts into Redis
			require.NoError(t, err)
			require.NoError(t, s.Release(ctx, warm))

			proxy.drop.Store(true)
			c, err := s.Claim(ctx, "k", "fp", time.Minute)
			require.NoError(t, err, "a replayed Claim finds its own claim: it is claimed, not pending")
			require.False(t, proxy.drop.Load(), "the reply was dropped")
			assert.NoError(t, s.Complete(ctx, c, idempotency.Response{Status: 202}, time.Minute), "the claim is usable")
		})
	}
}

// A Store call through the deferred AutoPipeliner ends with its context
// even when Redis hangs (a paused redis-server: connections accepted,
// nothing answered), with the context's error: the Handler's StoreTimeout
// bounds it, not go-redis's retries of its own timeouts (the pipeliner runs
// commands on a context of its own: 35 s and more with its defaults). After
// the pause the claim made before it completes.
func TestCallEndsWithContextWhenRedisHangs(t *testing.T) {
	for _, p := range pipeliners {
		t.Run(p.name, func(t *testing.T) { testCallEndsWithContext(t, p.opts()) })
	}
}

func testCallEndsWithContext(t *testing.T, opts *redis.AutoPipelineOptions) {
	srv := testkit.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()}) // go-redis's defaults
	t.Cleanup(func() { _ = rdb.Close() })
	ap, err := rdb.AsyncAutoPipelineWithOptions(opts)
	require.NoError(t, err)
	s, err := redisstore.New(ap, redisstore.Options{})
	require.NoError(t, err)
	c, err := s.Claim(context.Background(), "warm", "fp", time.Minute) // scripts loaded
	require.NoError(t, err)

	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = s.Claim(ctx, "k", "fp", time.Minute)
	cancel()
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, idempotency.IsOutcomeUnknown(err), "the claim may still be made: %v", err)
	srv.Resume()

	assert.NoError(t, s.Complete(context.Background(), c, idempotency.Response{Status: 202}, time.Minute))
}

// The blocking AutoPipeliner ignores each call's context; New refuses it.
func TestNewRefusesBlockingAutoPipeline(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	ap, err := rdb.AutoPipeline()
	require.NoError(t, err)
	_, err = redisstore.New(ap, redisstore.Options{})
	assert.ErrorIs(t, err, idempotency.ErrInvalidOptions)
}

// Through either pipeliner, with the gateway's client options: a call to a
// stopped Redis ends with its context, outcome unknown, and once Redis is
// back the Store claims again.
func TestPipelinerRedisDownAndBack(t *testing.T) {
	for _, p := range pipeliners {
		t.Run(p.name, func(t *testing.T) {
			ctx := context.Background()
			srv := testkit.StartRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1, DialTimeout: time.Second})
			t.Cleanup(func() { _ = rdb.Close() })
			ap, err := rdb.AsyncAutoPipelineWithOptions(p.opts())
			require.NoError(t, err)
			s, err := redisstore.New(ap, redisstore.Options{})
			require.NoError(t, err)
			_, err = s.Claim(ctx, "before", "fp", time.Minute)
			require.NoError(t, err)

			srv.Stop()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = s.Claim(cctx, "k", "fp", time.Minute)
			cancel()
			require.Error(t, err)
			assert.True(t, idempotency.IsOutcomeUnknown(err), "an unreachable store is not a definite answer: %v", err)

			srv.Start()
			require.Eventually(t, func() bool {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := s.Claim(cctx, "k", "fp", time.Minute)
				return err == nil
			}, 30*time.Second, 100*time.Millisecond, "claims again once Redis is back")
		})
	}
}
