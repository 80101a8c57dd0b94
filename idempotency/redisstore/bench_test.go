package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// BenchmarkClaimComplete claims and completes a new key per iteration from
// 64 goroutines through the deferred AutoPipeliner, as a busy gateway
// does, in the string layout (Claim one SET) and in the hash layout (Claim
// a script), and reports the CPU Redis spent per key (redis-us/op, from
// INFO cpu) beside this process's (cpu-us/op):
//
//	go test -run XXX -bench ClaimComplete -benchtime 20000x ./idempotency/redisstore/
func BenchmarkClaimComplete(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: testkit.Redis(b), PoolSize: 128})
	b.Cleanup(func() { _ = rdb.Close() })
	ap, err := rdb.AsyncAutoPipeline()
	require.NoError(b, err)
	for _, layout := range []string{"string", "hash"} {
		b.Run(layout, func(b *testing.B) {
			s, err := redisstore.New(ap, redisstore.Options{Prefix: testkit.Name(b, "idem") + ":"})
			require.NoError(b, err)
			if layout == "hash" {
				redisstore.UseHashLayout(s)
			}
			ctx := context.Background()
			resp := idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte(`{"status":"accepted","delivery":"72d3162e-cc78-11e3-81ab-4c9367dc0958"}`)}
			var seq atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, redis0 := processCPU(b), redisCPU(b, rdb)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c, err := s.Claim(ctx, "72d3162e-cc78-11e3-81ab-"+strconv.FormatInt(seq.Add(1), 10), "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", time.Minute)
					if err == nil {
						err = s.Complete(ctx, c, resp, time.Hour)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			cpu, redisUsed := processCPU(b)-cpu0, redisCPU(b, rdb)-redis0
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
			b.ReportMetric(float64(redisUsed.Microseconds())/float64(b.N), "redis-us/op")
		})
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	require.NoError(b, err)
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(b, err)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
