package kafkapub_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
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
//     pull_request example (28 KB) instead of a 112-byte body;
//   - bare-idemprod and idempotent-idemprod: bare and idempotent through
//     kafkapub's IdempotentPublisher, the gateway's default producer;
//   - idempotent-fullduplex and idempotent-unordered: idempotent through
//     AutoPipeliners of other options (FullDuplex; Unordered with four
//     batches in flight).
//
// It reports requests per second, the 99th percentile latency, and the CPU
// each request costs: cpu-us/op of this process (the handlers, the clients
// and the in-process kfake broker) and redis-us/op of redis-server (from
// INFO cpu). Where the time of a request goes: publish-ms, claim-ms and
// complete-ms are the mean wall time of the side effect and of the store's
// Claim and Complete; redis-cmds/op the commands Redis ran per request and
// redis-reads/op its socket reads (INFO stats), the round trips it saw.
// BENCH_CLIENTS sets the number of clients (default 64). On a loaded machine the throughput follows the load more than
// the code, and the CPU per request much less so. Run them in one
// invocation so they share the machine's noise:
//
//	go test -run XXX -bench Gateway -benchtime 4000x ./idempotency/kafkapub/
func BenchmarkGateway(b *testing.B) {
	k := testkit.StartKfake(b)
	topic := testkit.Name(b, "bench")
	testkit.CreateTopic(b, k.Brokers(), topic, 3)
	pub, err := kafkapub.New(context.Background(), k.Brokers(), topic, kafkapub.Options{SkipDurabilityCheck: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = pub.Close() })
	ipub, err := kafkapub.NewIdempotent(context.Background(), k.Brokers(), topic, kafkapub.Options{SkipDurabilityCheck: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = ipub.Close() })
	var t timings

	redisAddr := testkit.Redis(b)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 128})
	b.Cleanup(func() { _ = rdb.Close() })
	ap, err := rdb.AsyncAutoPipeline()
	require.NoError(b, err)
	handler := func(rdb redis.Scripter, publish idempotency.Func) http.Handler {
		store, err := redisstore.New(rdb, redisstore.Options{Prefix: testkit.Name(b, "idem") + ":"})
		require.NoError(b, err)
		h, err := idempotency.NewHandler(&timedStore{Store: store, ext: store, t: &t}, t.effect(publish), idempotency.Options{
			Provider: idempotency.GitHub(),
			Secret:   secret,
		})
		require.NoError(b, err)
		return h
	}

	bareWith := func(publish idempotency.Func) http.Handler {
		publish = t.effect(publish)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			d := idempotency.Delivery{Key: r.Header.Get(idempotency.HeaderGitHubDelivery), Source: "github", Header: r.Header, Body: body}
			if err := publish(r.Context(), d); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusAccepted)
		})
	}
	bare := bareWith(pub.Publish)

	small := []byte(`{"action":"opened","organization":{"login":"octo-org"},"pull_request":{"number":1347,"title":"Amazing new feature"}}`)
	var pullRequest []byte // GitHub's own example, 28 KB: real deliveries are 1 to 30 KB
	for _, ex := range webhookkit.GitHubExamples(b) {
		if ex.Event == "pull_request" && pullRequest == nil {
			pullRequest = ex.Body
		}
	}
	idempotent := handler(ap, pub.Publish)
	apWith := func(o *redis.AutoPipelineOptions) *redis.AutoPipeliner {
		c := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 128})
		b.Cleanup(func() { _ = c.Close() })
		ap, err := c.AsyncAutoPipelineWithOptions(o)
		require.NoError(b, err)
		return ap
	}
	fd, par := redis.DefaultAutoPipelineOptions(), redis.DefaultAutoPipelineOptions()
	fd.FullDuplex = true
	par.Unordered, par.MaxConcurrentBatches = true, 4
	var run atomic.Int64
	for _, bc := range []struct {
		name string
		h    http.Handler
		body []byte
	}{
		{"bare", bare, small}, {"idempotent", idempotent, small}, {"idempotent-unpipelined", handler(rdb, pub.Publish), small},
		{"bare-28KB", bare, pullRequest}, {"idempotent-28KB", idempotent, pullRequest},
		{"bare-idemprod", bareWith(ipub.Publish), small}, {"idempotent-idemprod", handler(ap, ipub.Publish), small},
		{"idempotent-fullduplex", handler(apWith(fd), pub.Publish), small},
		{"idempotent-unordered", handler(apWith(par), pub.Publish), small},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchServe(b, bc.h, rdb, &t, fmt.Sprintf("%s-%d", bc.name, run.Add(1)), bc.body)
		})
	}
}

func benchServe(b *testing.B, h http.Handler, rdb *redis.Client, t *timings, keyPrefix string, body []byte) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	clients := 64
	if n, err := strconv.Atoi(os.Getenv("BENCH_CLIENTS")); err == nil && n > 0 {
		clients = n
	}
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
	t.reset()
	cpu0, redis0, stats0 := processCPU(b), redisCPU(b, rdb), redisStats(b, rdb)
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			key := keyPrefix + "-" + strconv.FormatInt(seq.Add(1), 10)
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "application/json")
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
	srv.Close() // waits for the handlers; the settle goroutines may still run
	waitSettled(t, b.N)
	stats := redisStats(b, rdb)
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
	// Less the INFO commands of redisCPU and redisStats.
	b.ReportMetric(float64(stats.commands-stats0.commands-3)/float64(b.N), "redis-cmds/op")
	b.ReportMetric(float64(stats.reads-stats0.reads-3)/float64(b.N), "redis-reads/op")
	t.report(b)
}

// timings sums the wall time of the side effects and of the store's Claim
// and Complete of the benchmark in progress.
type timings struct {
	publish, claim, complete     atomic.Int64 // nanoseconds
	publishes, claims, completes atomic.Int64
}

func (t *timings) reset() {
	for _, v := range []*atomic.Int64{&t.publish, &t.claim, &t.complete, &t.publishes, &t.claims, &t.completes} {
		v.Store(0)
	}
}

func (t *timings) effect(f idempotency.Func) idempotency.Func {
	return func(ctx context.Context, d idempotency.Delivery) error {
		start := time.Now()
		err := f(ctx, d)
		t.publish.Add(int64(time.Since(start)))
		t.publishes.Add(1)
		return err
	}
}

func (t *timings) report(b *testing.B) {
	for _, m := range []struct {
		sum, n *atomic.Int64
		unit   string
	}{{&t.publish, &t.publishes, "publish-ms"}, {&t.claim, &t.claims, "claim-ms"}, {&t.complete, &t.completes, "complete-ms"}} {
		if n := m.n.Load(); n > 0 {
			b.ReportMetric(float64(m.sum.Load())/float64(n)/1e6, m.unit)
		}
	}
}

// waitSettled waits (a few seconds at most) until the keys of the n
// requests answered are done, so that Redis's counters include every
// Complete.
func waitSettled(t *timings, n int) {
	for deadline := time.Now().Add(5 * time.Second); t.claims.Load() > 0 && t.completes.Load() < int64(n) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// timedStore times Claim and Complete.
type timedStore struct {
	idempotency.Store
	ext idempotency.Extender
	t   *timings
}

func (s *timedStore) Claim(ctx context.Context, key, fingerprint string, ttl time.Duration) (idempotency.Claim, error) {
	start := time.Now()
	c, err := s.Store.Claim(ctx, key, fingerprint, ttl)
	s.t.claim.Add(int64(time.Since(start)))
	s.t.claims.Add(1)
	return c, err
}

func (s *timedStore) Complete(ctx context.Context, c idempotency.Claim, resp idempotency.Response, ttl time.Duration) error {
	start := time.Now()
	err := s.Store.Complete(ctx, c, resp, ttl)
	s.t.complete.Add(int64(time.Since(start)))
	s.t.completes.Add(1)
	return err
}

func (s *timedStore) Extend(ctx context.Context, c idempotency.Claim, ttl time.Duration) error {
	return s.ext.Extend(ctx, c, ttl)
}

type redisCounters struct{ commands, reads int64 }

// redisStats reads total_commands_processed and total_reads_processed from
// INFO stats.
func redisStats(b *testing.B, rdb *redis.Client) redisCounters {
	info, err := rdb.Info(context.Background(), "stats").Result()
	require.NoError(b, err)
	var c redisCounters
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "total_commands_processed":
			c.commands, err = strconv.ParseInt(v, 10, 64)
		case "total_reads_processed":
			c.reads, err = strconv.ParseInt(v, 10, 64)
		}
		require.NoError(b, err)
	}
	return c
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
