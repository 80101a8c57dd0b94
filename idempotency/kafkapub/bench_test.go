package kafkapub_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// BenchmarkGateway serves signed webhooks over loopback HTTP to two handlers
// that publish with the same kafka-go writer to one kfake cluster:
//
//   - bare: reads the body and publishes it, nothing else;
//   - idempotent: the idempotency.Handler with the Redis store (signature
//     check, claim, publish, complete), the store's scripts sent through
//     go-redis's AutoPipeliner, as redisstore's doc recommends;
//   - idempotent-unpipelined: the same over the plain client, one round
//     trip per script, to show what the pipelining buys;
//   - bare-28KB and idempotent-28KB: bare and idempotent with GitHub's
//     pull_request example (28 KB) instead of a 112-byte body.
//
// It reports requests per second, the 99th percentile latency, and the CPU
// each request costs: cpu-us/op of this process (the handlers, the clients
// and the in-process kfake broker) and redis-us/op of redis-server (from
// INFO cpu). On a loaded machine the throughput follows the load more than
// the code, and the CPU per request much less so. Run them in one
// invocation so they share the machine's noise:
//
//	go test -run XXX -bench Gateway -benchtime 4000x ./idempotency/kafkapub/
func BenchmarkGateway(b *testing.B) {
	k := testkit.StartKafka(b)
	topic := testkit.Name(b, "bench")
	testkit.CreateTopic(b, k.Brokers(), topic, 3)
	pub, err := kafkapub.New(context.Background(), k.Brokers(), topic, kafkapub.Options{SkipDurabilityCheck: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = pub.Close() })

	rdb := redis.NewClient(&redis.Options{Addr: testkit.Redis(b), PoolSize: 128})
	b.Cleanup(func() { _ = rdb.Close() })
	ap, err := rdb.AsyncAutoPipeline()
	require.NoError(b, err)
	handler := func(rdb redis.Scripter) http.Handler {
		store, err := redisstore.New(rdb, redisstore.Options{Prefix: testkit.Name(b, "idem") + ":"})
		require.NoError(b, err)
		h, err := idempotency.NewHandler(store, pub.Publish, idempotency.Options{
			Provider: idempotency.GitHub(),
			Secret:   secret,
		})
		require.NoError(b, err)
		return h
	}

	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d := idempotency.Delivery{Key: r.Header.Get(idempotency.HeaderGitHubDelivery), Source: "github", Header: r.Header, Body: body}
		if err := pub.Publish(r.Context(), d); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})

	small := []byte(`{"action":"opened","organization":{"login":"octo-org"},"pull_request":{"number":1347,"title":"Amazing new feature"}}`)
	var pullRequest []byte // GitHub's own example, 28 KB: real deliveries are 1 to 30 KB
	for _, ex := range webhookkit.GitHubExamples(b) {
		if ex.Event == "pull_request" && pullRequest == nil {
			pullRequest = ex.Body
		}
	}
	idempotent := handler(ap)
	var run atomic.Int64
	for _, bc := range []struct {
		name string
		h    http.Handler
		body []byte
	}{
		{"bare", bare, small}, {"idempotent", idempotent, small}, {"idempotent-unpipelined", handler(rdb), small},
		{"bare-28KB", bare, pullRequest}, {"idempotent-28KB", idempotent, pullRequest},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchServe(b, bc.h, rdb, fmt.Sprintf("%s-%d", bc.name, run.Add(1)), bc.body)
		})
	}
}

func benchServe(b *testing.B, h http.Handler, rdb *redis.Client, keyPrefix string, body []byte) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	const clients = 64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	defer client.CloseIdleConnections()

	sig := idempotency.SignGitHub(secret, body)
	var (
		seq       atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, b.N)
		failures  atomic.Int64
	)
	b.SetParallelism((clients + 1) / 2)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu0, redis0 := processCPU(b), redisCPU(b, rdb)
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			key := keyPrefix + "-" + strconv.FormatInt(seq.Add(1), 10)
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(string(body)))
			req.Header.Set(idempotency.HeaderGitHubDelivery, key)
			req.Header.Set(idempotency.HeaderGitHubEvent, "pull_request")
			req.Header.Set(idempotency.HeaderGitHubSignature, sig)
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				failures.Add(1)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			local = append(local, time.Since(t0))
			if resp.StatusCode != http.StatusAccepted {
				failures.Add(1)
			}
		}
		mu.Lock()
		latencies = append(latencies, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	cpu, redisUsed := processCPU(b)-cpu0, redisCPU(b, rdb)-redis0
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d of %d requests failed", n, b.N)
	}
	slices.Sort(latencies)
	if len(latencies) > 0 {
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(float64(redisUsed.Microseconds())/float64(b.N), "redis-us/op")
}

// processCPU is the user and system CPU this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the user and system CPU redis-server has used, from INFO cpu.
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
