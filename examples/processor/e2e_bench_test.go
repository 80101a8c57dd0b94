package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// Environment of BenchmarkEndToEnd.
const (
	envEvents     = "E2E_EVENTS"     // events in the topic; default 2,000,000
	envRounds     = "E2E_ROUNDS"     // rounds of every variant, alternating their order; default 1
	envCPUProfile = "E2E_CPUPROFILE" // a file for the CPU profile of one variant's first run
	envTrace      = "E2E_TRACE"      // a file for the runtime/trace of that run (go tool trace)
	envProfiled   = "E2E_PROFILE"    // that variant's name; default "chain"
	envVariants   = "E2E_VARIANTS"   // the variants to run, comma-separated; default all
	envKafka      = "E2E_KAFKA"      // the broker: kfake (default) or apache (embedded Apache Kafka 4.4)
	envLatency    = "E2E_LATENCY"    // a round trip added to every ClickHouse exchange, e.g. 5ms; default none
)

// variant is one way of consuming the topic in BenchmarkEndToEnd.
type variant struct {
	name string
	desc string
	run  func(b *testing.B, env *e2eEnv) (firstToLast time.Duration, ck checkpoints)
}

// checkpoints is what a chain's checkpoints took: their number, how long
// they took, and the time they held their chains.
type checkpoints struct {
	count int
	dur   time.Duration // barrier to durable file, summed (exactlyonce.checkpoint.duration)
	held  time.Duration // the chains held at barriers, summed (exactlyonce.checkpoint.hold)
	holds int
	sinks time.Duration // the two sinks' barrier parts (exactlyonce.sink.snapshot_duration)
	// p50, p99 of the hold: the upper bound of the holdBuckets bucket
	// that holds the quantile.
	p50, p99 time.Duration
	skips    int64 // interval barriers skipped while one was pending
}

// holdBuckets gives the hold histogram buckets fine enough for its p99.
var holdBuckets = sdkmetric.WithView(sdkmetric.NewView(
	sdkmetric.Instrument{Name: "exactlyonce.checkpoint.hold"},
	sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
		Boundaries: []float64{0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5},
	}},
))

type e2eEnv struct {
	brokers    []string
	topic      string
	partitions int
	perPart    int
	distinct   int
	chAddr     string
	runs       int
}

// sample is what one run of a variant measured.
type sample struct {
	eventsPerSec     float64
	cpuNsPerEvent    float64 // this process (the consumer)
	chCPUNsPerEvent  float64 // ClickHouse, its own process
	kafkaCPUNsPerEvt float64 // the broker, its own process
	allocsPerEvent   float64
	bytesPerEvent    float64
	ckptMs           float64 // mean time from barrier to durable checkpoint
	holdMs           float64 // mean time a barrier held its chain
	sinksMs          float64 // the sinks' barrier parts, a checkpoint
	heldShare        float64 // share of the chains' time held by barriers
	p50Ms, p99Ms     float64 // of the hold
	skips            float64
}

// BenchmarkEndToEnd runs E2E_EVENTS realistic gateway records (default
// 2 M: 5 % redeliveries, 200 tenants, 4 partitions, ~300-byte bodies, the
// delivery's metadata in headers) through the example's chain, against
// Kafka (kfake, or Apache Kafka with E2E_KAFKA=apache) and ClickHouse each
// in its own process, beside raw kafka-go
// consumption of the same topic:
//
//	raw             kafka-go, one partition Reader per partition, FetchMessage only
//	fetch           kafkasource's own fetch path, a no-op Process, no checkpoints
//	chain           the chain (ProcessBatch), checkpoints every 1 s: what main.go runs
//	                (asynchronous: the chain goes on while the sinks insert)
//	chain-sync      the same, checkpoint.Options.Synchronous: the whole
//	                checkpoint at the barrier, as before asynchronous ones
//	chain-nockpt    the same chain, no checkpoints
//	chain-record    the chain one record at a time (Process), checkpoints every 1 s
//
// For each: events/s from the first record to the last (a consumer
// group's join is not counted), as a share of raw; CPU per event of this
// process (getrusage), of ClickHouse and of the broker (/proc/<pid>/stat);
// allocations per event. After each chain run a last checkpoint is taken
// and the events table must hold every distinct delivery exactly once.
// E2E_ROUNDS repeats the variants, in reversed order every other round,
// and the table shows medians and ranges.
//
// E2E_KAFKA picks the broker: kfake (the default; franz-go's fake in a
// process of its own) or apache, the embedded Apache Kafka 4.4 broker (one
// KRaft node, a JVM, with the kit's test timing), the broker users run; the
// output's first line says which.
//
// E2E_LATENCY (a duration such as 5ms) puts ClickHouse behind
// testkit.LatencyProxy, so every exchange with it takes that much longer,
// as across availability zones; the checkpoints stay on the local disk.
//
//	E2E_EVENTS=200000 go test -run '^$' -bench EndToEnd ./examples/processor
//	E2E_KAFKA=apache E2E_EVENTS=200000 go test -run '^$' -bench EndToEnd ./examples/processor
func BenchmarkEndToEnd(b *testing.B) {
	events := envInt(b, envEvents, 2_000_000)
	rounds := envInt(b, envRounds, 1)
	const partitions = 4
	ctx := context.Background()
	kp := startE2EKafka(ctx, b)
	chs := testkit.StartClickHouse(b)
	chAddr := chs.Addr()
	if v := os.Getenv(envLatency); v != "" {
		rtt, err := time.ParseDuration(v)
		if err != nil || rtt < 0 {
			b.Fatalf("%s=%q: want a duration such as 5ms", envLatency, v)
		}
		chAddr = testkit.LatencyProxy(b, chAddr, rtt)
		b.Logf("ClickHouse behind a %v round trip", rtt)
	}
	env := &e2eEnv{brokers: kp.Brokers(), topic: "e2e", partitions: partitions, perPart: events / partitions, chAddr: chAddr}
	testkit.CreateTopic(b, env.brokers, env.topic, partitions)
	env.distinct = produceEvents(b, env.brokers, env.topic,
		genSpec{partitions: partitions, perPart: env.perPart, tenants: 200, dupRate: 0.05, seed: 1})
	total := float64(partitions * env.perPart)

	variants := []variant{
		{name: "raw", desc: "raw kafka-go (a)", run: runRaw},
		{name: "fetch", desc: "kafkasource, no-op Process", run: runFetch},
		{name: "chain", desc: "chain, 1 s checkpoints, async", run: chainVariant(time.Second, false)},
		{name: "chain-sync", desc: "chain, 1 s checkpoints, synchronous", run: chainVariantWith(time.Second, false, kafkasource.Options{}, true)},
		{name: "chain-nockpt", desc: "chain, checkpoints off (b)", run: chainVariant(-1, false)},
		{name: "chain-record", desc: "chain per record, 1 s checkpoints", run: chainVariant(time.Second, true)},
	}
	if only := os.Getenv(envVariants); only != "" {
		keep := variants[:0]
		for _, v := range variants {
			if v.name == "raw" || strings.Contains(","+only+",", ","+v.name+",") {
				keep = append(keep, v) // raw always: the shares are of it
			}
		}
		variants = keep
	}
	profiled := os.Getenv(envProfiled)
	if profiled == "" {
		profiled = "chain"
	}
	samples := map[string][]sample{}
	for b.Loop() {
		for round := range rounds {
			order := append([]variant(nil), variants...)
			if round%2 == 1 {
				for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
					order[i], order[j] = order[j], order[i]
				}
			}
			for _, v := range order {
				runtime.GC()
				var stop func()
				if path := os.Getenv(envCPUProfile); path != "" && v.name == profiled && len(samples[v.name]) == 0 {
					stop = startProfile(b, path)
				}
				if path := os.Getenv(envTrace); path != "" && v.name == profiled && len(samples[v.name]) == 0 {
					stop = chainStops(stop, startTrace(b, path))
				}
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				cpu0, ch0, k0 := selfCPU(), procCPU(chs.PID()), procCPU(kp.PID())
				env.runs++
				d, ck := v.run(b, env)
				cpu1, ch1, k1 := selfCPU(), procCPU(chs.PID()), procCPU(kp.PID())
				runtime.ReadMemStats(&ms1)
				if stop != nil {
					stop()
				}
				samples[v.name] = append(samples[v.name], sample{
					eventsPerSec:     total / d.Seconds(),
					cpuNsPerEvent:    float64(cpu1-cpu0) / total,
					chCPUNsPerEvent:  float64(ch1-ch0) / total,
					kafkaCPUNsPerEvt: float64(k1-k0) / total,
					allocsPerEvent:   float64(ms1.Mallocs-ms0.Mallocs) / total,
					bytesPerEvent:    float64(ms1.TotalAlloc-ms0.TotalAlloc) / total,
					ckptMs:           ms(ck.dur) / max(float64(ck.count), 1),
					holdMs:           ms(ck.held) / max(float64(ck.holds), 1),
					sinksMs:          ms(ck.sinks) / max(float64(ck.holds), 1),
					heldShare:        ck.held.Seconds() / (d.Seconds() * partitions),
					p50Ms:            ms(ck.p50),
					p99Ms:            ms(ck.p99),
					skips:            float64(ck.skips),
				})
				fmt.Printf("round %d %-14s %9.0f ev/s, hold %.1f ms a barrier (%d), p99 <= %.1f ms, held %.2f%%, load %s\n",
					round+1, v.name, total/d.Seconds(), ms(ck.held)/max(float64(ck.holds), 1), ck.holds, ms(ck.p99),
					100*ck.held.Seconds()/(d.Seconds()*partitions), loadAvg())
			}
		}
	}
	report(b, variants, samples, events)
}

// loadAvg returns the machine's 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

func startProfile(b *testing.B, path string) func() {
	f, err := os.Create(path)
	require.NoError(b, err)
	require.NoError(b, pprof.StartCPUProfile(f))
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

func startTrace(b *testing.B, path string) func() {
	f, err := os.Create(path)
	require.NoError(b, err)
	require.NoError(b, trace.Start(f))
	return func() {
		trace.Stop()
		_ = f.Close()
	}
}

// chainStops returns a func that calls both (either may be nil).
func chainStops(a, b func()) func() {
	return func() {
		for _, f := range []func(){a, b} {
			if f != nil {
				f()
			}
		}
	}
}

// selfCPU returns this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU returns the user and system CPU time of process pid, from
// /proc/<pid>/stat (utime and stime, in clock ticks of 10 ms on Linux).
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// runRaw reads every partition to its end with its own kafka-go Reader,
// as kafkasource's chains do, and does nothing with the records.
func runRaw(b *testing.B, env *e2eEnv) (time.Duration, checkpoints) {
	var (
		wg    sync.WaitGroup
		first atomic.Int64
		errs  = make(chan error, env.partitions)
	)
	for p := range env.partitions {
		wg.Go(func() {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: env.brokers, Topic: env.topic, Partition: p,
				MinBytes: 1, MaxBytes: kafkasource.DefaultMaxBytes, MaxWait: kafkasource.DefaultMaxWait,
				IsolationLevel: kafka.ReadCommitted})
			defer r.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			for n := 0; n < env.perPart; n++ {
				if _, err := r.FetchMessage(ctx); err != nil {
					errs <- err
					return
				}
				if n == 0 {
					first.CompareAndSwap(0, time.Now().UnixNano())
				}
			}
		})
	}
	wg.Wait()
	end := time.Now()
	close(errs)
	for err := range errs {
		b.Fatalf("raw: %v", err)
	}
	return end.Sub(time.Unix(0, first.Load())), checkpoints{}
}

// chainVariant runs main.go's chain (newChain with the default sink and
// source options) with a consumer group of its own, on a fresh database.
func chainVariant(interval time.Duration, perRecord bool) func(b *testing.B, env *e2eEnv) (time.Duration, checkpoints) {
	return chainVariantWith(interval, perRecord, kafkasource.Options{}, false)
}

// chainVariantWith is chainVariant with the Source's options, and
// synchronous checkpoints (checkpoint.Options.Synchronous) if sync.
func chainVariantWith(interval time.Duration, perRecord bool, srcOpts kafkasource.Options, sync bool) func(b *testing.B, env *e2eEnv) (time.Duration, checkpoints) {
	return func(b *testing.B, env *e2eEnv) (time.Duration, checkpoints) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		db := testkit.NewDatabase(b, env.chAddr)
		require.NoError(b, createTables(ctx, ch.Options{Address: env.chAddr}, db))
		storage, err := checkpoint.NewFSStorage(filepath.Join(b.TempDir(), "state"))
		require.NoError(b, err)
		store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
		require.NoError(b, err)
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), holdBuckets)
		coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: interval, MeterProvider: mp, Synchronous: sync})
		require.NoError(b, err)
		defer coord.Close()
		var seen atomic.Int64
		var first time.Time
		total := int64(env.partitions * env.perPart)
		chain := kafkasource.Chains(store, newChain(chainConfig{ClickHouse: chsink.DB{Addr: env.chAddr, Database: db},
			Sink: chsink.Options{MeterProvider: mp}, Logger: slog.New(slog.DiscardHandler), PerRecord: perRecord}))
		src, err := kafkasource.New(kafkasource.Group{Brokers: env.brokers, ID: fmt.Sprintf("e2e-%d", env.runs), Topics: []string{env.topic}},
			coord, counted(chain, &seen), srcOpts)
		require.NoError(b, err)
		done := make(chan error, 1)
		go func() { done <- src.Run(ctx) }()
		for tick := time.NewTicker(time.Millisecond); ; <-tick.C {
			n := seen.Load()
			if n > 0 && first.IsZero() {
				first = time.Now()
			}
			if n == total {
				tick.Stop()
				break
			}
			select {
			case err := <-done:
				b.Fatalf("chain stopped: %v", err)
			default:
			}
		}
		took := time.Since(first)
		ck := checkpointsOf(b, reader)
		require.NoError(b, src.Checkpoint(ctx)) // every row in ClickHouse
		got := testkit.Count(b, env.chAddr, db, "SELECT count() FROM events")
		require.Equal(b, uint64(env.distinct), got, "events rows: every delivery exactly once")
		cancel()
		require.NoError(b, <-done)
		return took, ck
	}
}

// checkpointsOf reads the checkpoint histograms.
func checkpointsOf(b *testing.B, reader *sdkmetric.ManualReader) checkpoints {
	var rm metricdata.ResourceMetrics
	require.NoError(b, reader.Collect(context.Background(), &rm))
	var ck checkpoints
	var bounds []float64
	var counts []uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "exactlyonce.checkpoint.skips" {
				for _, dp := range d.DataPoints {
					ck.skips += dp.Value
				}
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, dp := range h.DataPoints {
				sum := time.Duration(dp.Sum * float64(time.Second))
				switch m.Name {
				case "exactlyonce.checkpoint.duration":
					ck.count += int(dp.Count)
					ck.dur += sum
				case "exactlyonce.checkpoint.hold":
					ck.holds += int(dp.Count)
					ck.held += sum
					bounds = dp.Bounds
					if counts == nil {
						counts = make([]uint64, len(dp.BucketCounts))
					}
					for i, c := range dp.BucketCounts {
						counts[i] += c
					}
				case "exactlyonce.sink.snapshot_duration":
					ck.sinks += sum
				}
			}
		}
	}
	quantile := func(q float64) time.Duration {
		want := uint64(q*float64(ck.holds) + 0.5)
		var n uint64
		for i, c := range counts {
			if n += c; n >= max(want, 1) {
				if i < len(bounds) {
					return time.Duration(bounds[i] * float64(time.Second))
				}
				return time.Duration(float64(time.Second) * 10) // above the last bound
			}
		}
		return 0
	}
	ck.p50, ck.p99 = quantile(0.5), quantile(0.99)
	return ck
}

// runFetch reads every partition through kafkasource with a Process that
// does nothing and no checkpoints: the SDK's own fetch path, the limit of
// the chain on this stack.
func runFetch(b *testing.B, env *e2eEnv) (time.Duration, checkpoints) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	storage, err := checkpoint.NewFSStorage(filepath.Join(b.TempDir(), "state"))
	require.NoError(b, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(b, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(b, err)
	defer coord.Close()
	var seen atomic.Int64
	total := int64(env.partitions * env.perPart)
	noop := func(context.Context, checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		return &kafkasource.Processor{Process: func(context.Context, kafka.Message) error { seen.Add(1); return nil }}, nil
	}
	src, err := kafkasource.New(kafkasource.Group{Brokers: env.brokers, ID: fmt.Sprintf("e2e-%d", env.runs), Topics: []string{env.topic}},
		coord, noop, kafkasource.Options{})
	require.NoError(b, err)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	var first time.Time
	for tick := time.NewTicker(time.Millisecond); ; <-tick.C {
		n := seen.Load()
		if n > 0 && first.IsZero() {
			first = time.Now()
		}
		if n == total {
			tick.Stop()
			break
		}
		select {
		case err := <-done:
			b.Fatalf("fetch: source stopped: %v", err)
		default:
		}
	}
	took := time.Since(first)
	cancel()
	require.NoError(b, <-done)
	return took, checkpoints{}
}

// report prints the table of medians (and ranges over rounds) and reports
// the medians as benchmark metrics.
func report(b *testing.B, variants []variant, samples map[string][]sample, events int) {
	med := func(name string, f func(sample) float64) (m, lo, hi float64) {
		var xs []float64
		for _, s := range samples[name] {
			xs = append(xs, f(s))
		}
		if len(xs) == 0 { // a variant not run (E2E_VARIANTS)
			return 0, 0, 0
		}
		sort.Float64s(xs)
		return xs[len(xs)/2], xs[0], xs[len(xs)-1]
	}
	eps := func(s sample) float64 { return s.eventsPerSec }
	raw, _, _ := med("raw", eps)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nend-to-end: %d events, 4 partitions, %d round(s); medians [min-max]\n", events, len(samples["raw"]))
	fmt.Fprintf(&sb, "%-36s %26s %8s %10s %10s %10s %10s\n", "variant", "events/s", "of (a)", "cpu ns/ev", "ch ns/ev", "kafka ns/ev", "allocs/ev")
	for _, v := range variants {
		m, lo, hi := med(v.name, eps)
		cpu, _, _ := med(v.name, func(s sample) float64 { return s.cpuNsPerEvent })
		chc, _, _ := med(v.name, func(s sample) float64 { return s.chCPUNsPerEvent })
		kc, _, _ := med(v.name, func(s sample) float64 { return s.kafkaCPUNsPerEvt })
		al, _, _ := med(v.name, func(s sample) float64 { return s.allocsPerEvent })
		share := m / raw
		fmt.Fprintf(&sb, "%-36s %9.0f [%6.0f-%6.0f] %7.1f%% %10.0f %10.0f %10.0f %10.1f\n", v.desc, m, lo, hi, 100*share, cpu, chc, kc, al)
		if ckm, _, _ := med(v.name, func(s sample) float64 { return s.ckptMs }); ckm > 0 {
			hm, hlo, hhi := med(v.name, func(s sample) float64 { return s.holdMs })
			held, heldLo, heldHi := med(v.name, func(s sample) float64 { return 100 * s.heldShare })
			sk, _, _ := med(v.name, func(s sample) float64 { return s.sinksMs })
			p50, _, _ := med(v.name, func(s sample) float64 { return s.p50Ms })
			p99, p99lo, p99hi := med(v.name, func(s sample) float64 { return s.p99Ms })
			skips, _, _ := med(v.name, func(s sample) float64 { return s.skips })
			fmt.Fprintf(&sb, "%-36s barrier to durable checkpoint %.0f ms; a barrier held its chain %.1f ms [%.1f-%.1f] on average (the sinks' parts %.1f ms), p50 <= %.1f ms, p99 <= %.1f ms [%.1f-%.1f]; barriers held the chains %.2f%% [%.2f-%.2f] of the time; %.0f interval barriers skipped\n",
				"", ckm, hm, hlo, hhi, sk, p50, p99, p99lo, p99hi, held, heldLo, heldHi, skips)
		}
		if v.name == "chain" || v.name == "chain-sync" {
			if off, _, _ := med("chain-nockpt", eps); off > 0 {
				var shares []string
				for i, s := range samples[v.name] {
					if i < len(samples["chain-nockpt"]) {
						shares = append(shares, fmt.Sprintf("%.0f%%", 100*s.eventsPerSec/samples["chain-nockpt"][i].eventsPerSec))
					}
				}
				fmt.Fprintf(&sb, "%-36s %.1f%% of checkpoints off (b), medians; by round: %s\n", "", 100*m/off, strings.Join(shares, " "))
			}
		}
		if v.name != "raw" && len(samples[v.name]) > 1 {
			// Each run beside the raw run of its round: the machine's load
			// moves both.
			var shares []string
			for i, s := range samples[v.name] {
				shares = append(shares, fmt.Sprintf("%.0f%%", 100*s.eventsPerSec/samples["raw"][i].eventsPerSec))
			}
			fmt.Fprintf(&sb, "%-36s share of raw by round: %s\n", "", strings.Join(shares, " "))
		}
		fmt.Fprintf(&sb, "%-36s %s\n", "", strings.Repeat("#", int(share*50+0.5)))
		b.ReportMetric(m, v.name+"-ev/s")
		if v.name != "raw" {
			b.ReportMetric(100*share, v.name+"-%raw")
		}
		b.ReportMetric(cpu, v.name+"-cpu-ns/ev")
		b.ReportMetric(chc, v.name+"-ch-ns/ev")
		b.ReportMetric(al, v.name+"-allocs/ev")
	}
	fmt.Print(sb.String())
}

// e2eKafka is the broker of BenchmarkEndToEnd: its addresses and the
// process whose CPU it counts.
type e2eKafka interface {
	Brokers() []string
	PID() int
}

// apacheBroker is testkit's Apache Kafka broker as an e2eKafka.
type apacheBroker struct{ *testkit.ApacheKafka }

func (a apacheBroker) PID() int { return a.NodePID(1) }

// startE2EKafka starts the broker E2E_KAFKA names, stopped at cleanup.
func startE2EKafka(ctx context.Context, b *testing.B) e2eKafka {
	switch v := os.Getenv(envKafka); v {
	case "", "kfake":
		kp, err := embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{})
		if err != nil {
			b.Skipf("kafka process: %v", err)
		}
		b.Cleanup(func() { _ = kp.Stop() })
		fmt.Printf("kafka: kfake, pid %d\n", kp.PID())
		return kp
	case "apache":
		kb := testkit.StartApacheKafka(b)
		fmt.Printf("kafka: Apache Kafka %s, pid %d\n", kb.Version(), kb.NodePID(1))
		return apacheBroker{kb}
	default:
		b.Fatalf("%s=%q: want kfake or apache", envKafka, v)
		return nil
	}
}
