package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

type demoConfig struct {
	Events, Orgs, Partitions, Kills int
	KillClickHouse, KillKafka       bool
	Faults, Verbose                 bool
	Store                           string
	Instances                       int
	Seed                            uint64
	Dir                             string
	Logger                          *slog.Logger
}

const topic = "webhooks"

func runDemo(ctx context.Context, cfg demoConfig) error {
	began := time.Now()
	say := func(format string, a ...any) {
		fmt.Printf("[%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, a...))
	}
	if cfg.Events <= 0 || cfg.Orgs <= 0 || cfg.Partitions <= 0 || cfg.Kills < 0 || cfg.Instances <= 0 {
		return errors.New("-events, -orgs, -partitions and -instances must be positive, -kills not negative")
	}
	if cfg.Instances > 1 && cfg.KillKafka {
		// See supervisor.sharedGroup.
		return errors.New("-instances > 1 shares one consumer group, which a restarted kfake broker never rebalances: add -kill-kafka=false")
	}
	dir := cfg.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "exactlyonce-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}

	// Services: embedded unless the environment names real ones.
	chAddr := os.Getenv("CLICKHOUSE_ADDR")
	var chServer *embedded.ClickHouse
	if chAddr == "" {
		say("starting ClickHouse 26.7 (clickhouse-local from libchdb.so; the first run downloads it)")
		var err error
		chServer, err = embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{Dir: dir + "/clickhouse"})
		if err != nil {
			return fmt.Errorf("start ClickHouse: %w", err)
		}
		defer chServer.Stop()
		chAddr = chServer.Addr()
		say("ClickHouse %s listening on %s", chServer.Version(), chAddr)
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go watchClickHouse(watchCtx, chServer, say)
	}
	var brokers []string
	var kafkaServer *embedded.KafkaProcess
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		brokers = strings.Split(env, ",")
	} else {
		// The broker runs as its own process, with its log on disk, so that
		// it can be killed with SIGKILL and come back with what it acknowledged.
		var err error
		kafkaServer, err = embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{DataDir: dir + "/kafka"})
		if err != nil {
			return fmt.Errorf("start Kafka: %w", err)
		}
		defer kafkaServer.Stop()
		brokers = kafkaServer.Brokers()
		say("Kafka (kfake, pid %d) listening on %s", kafkaServer.PID(), brokers[0])
	}
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	topicName := topic + "_" + runID
	if err := embedded.CreateTopic(ctx, brokers, topicName, cfg.Partitions); err != nil {
		return err
	}
	db := "demo_" + runID
	if err := createTables(ctx, chAddr, db); err != nil {
		return err
	}
	say("database %s: events (MergeTree) → events_hourly (materialized view), org_minute (ReplacingMergeTree)", db)

	// One generator per goroutine that draws: the gateway's fault injection
	// runs in HTTP handlers, everything else here.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	gatewayRNG := func(n uint64) *rand.Rand { return rand.New(rand.NewPCG(cfg.Seed, 0x9a7e+n)) }
	newStore, storeName, closeStore, err := keyStore(ctx, cfg.Store)
	if err != nil {
		return err
	}
	defer closeStore()
	store, err := newStore()
	if err != nil {
		return err
	}
	gw, err := startGateway(ctx, brokers, topicName, store, gatewayRNG(0), cfg.Faults)
	if err != nil {
		return err
	}
	defer func() { gw.Close(context.Background()) }()
	say("gateway listening on %s (idempotency keys in %s)", gw.URL(), storeName)

	// The stream processor runs as its own process, so that it can be killed
	// with SIGKILL like a crashed pod. The supervisor restarts it.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	sup := &supervisor{say: say, instances: cfg.Instances, sharedGroup: cfg.Instances > 1, args: []string{self, "-role=processor",
		"-brokers=" + strings.Join(brokers, ","), "-topic=" + topicName, "-group=aggregator-" + runID,
		"-clickhouse=" + chAddr, "-database=" + db, "-state=" + dir + "/processor"}}
	if cfg.Verbose {
		sup.args = append(sup.args, "-v")
	}
	supCtx, stopSup := context.WithCancel(ctx)
	supDone := make(chan struct{})
	go func() { defer close(supDone); sup.run(supCtx) }()
	defer func() { stopSup(); <-supDone }()

	// Stage 1: the providers deliver every event, some twice at once, and
	// retry until accepted.
	events := generate(rng, cfg.Events, cfg.Orgs, 20*time.Minute)
	prov := &provider{client: &http.Client{Timeout: 10 * time.Second}, baseURL: gw.URL()}
	if cfg.Faults {
		prov.dupRate = 0.1
	}
	say("delivering %d events of %d organisations (20 minutes of event time)", len(events), cfg.Orgs)
	faults := newFaultPlan(cfg, rng)
	var delivered atomic.Int64
	work := make(chan int)
	var wg sync.WaitGroup
	var deliverErr error
	var errOnce sync.Once
	// Which events are delivered twice is drawn up front, from the seed.
	dups := make([]bool, len(events))
	for i := range dups {
		dups[i] = rng.Float64() < prov.dupRate
	}
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := prov.deliver(ctx, events[i], dups[i]); err != nil {
					errOnce.Do(func() { deliverErr = err })
					continue
				}
				delivered.Add(1)
			}
		})
	}
	for i := range events {
		faults.at(ctx, i, sup, chServer, kafkaServer, say)
		select {
		case work <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		// Spread the deliveries over a few seconds of wall time so that the
		// faults land while data flows.
		if i%50 == 49 {
			time.Sleep(40 * time.Millisecond)
		}
	}
	close(work)
	wg.Wait()
	if deliverErr != nil {
		return deliverErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	say("delivered: %d requests for %d events (%d duplicate deliveries, %d retries after 503, %d answered from the idempotency store)",
		prov.requests.Load(), delivered.Load(), prov.duplicates.Load(), prov.retries.Load(), prov.replayed.Load())
	say("Kafka publishes: %d written (%d of them after a lost ack, so duplicates), %d failed before the write",
		gw.flaky.published.Load(), gw.flaky.ackLost.Load(), gw.flaky.failedBefore.Load())

	// The gateway restarts (a deploy), then an operator redelivers a few
	// past deliveries by hand, as GitHub allows for three days. Keys in
	// memory are gone with the old process, so the new gateway publishes
	// those events again and the stream processor's dedup must drop them;
	// keys in Redis survive and the gateway answers with the stored 2xx.
	if cfg.Faults {
		if err := gw.Close(ctx); err != nil {
			return err
		}
		if store, err = newStore(); err != nil {
			return err
		}
		if gw, err = startGateway(ctx, brokers, topicName, store, gatewayRNG(1), false); err != nil {
			return err
		}
		prov.baseURL = gw.URL()
		n := max(len(events)/20, 1)
		replayedBefore := prov.replayed.Load()
		for range n {
			if err := prov.deliver(ctx, events[rng.IntN(len(events))], false); err != nil {
				return err
			}
		}
		say("fault: gateway restarted; %d past deliveries redelivered by hand: %d published to Kafka again, %d answered from the idempotency store",
			n, gw.flaky.published.Load(), prov.replayed.Load()-replayedBefore)
	}
	faults.finish(ctx, sup, say)

	// Wait until ClickHouse holds exactly what was sent, or report the gap.
	want := expect(events)
	deadline := time.Now().Add(convergeTimeout())
	var last []string
	for {
		got, err := observe(ctx, chAddr, db)
		if err == nil {
			last = diff(want, got)
			if len(last) == 0 {
				say("ClickHouse: events %d rows = %d distinct events sent; events_hourly (materialized view) %d rows exact; org_minute FINAL %d windows exact (count, avg, max)",
					got.rows, want.events, len(want.hourly), len(want.minutes))
				break
			}
			if got.rows > uint64(want.events) {
				return fmt.Errorf("DUPLICATES in ClickHouse:\n  %s", summarize(last))
			}
		} else {
			last = []string{err.Error()}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if os.Getenv("PIPELINE_DUMP") != "" {
				sup.signal(syscall.SIGQUIT) // the processor's goroutines, to see where it stalls
				time.Sleep(time.Second)
			}
			return fmt.Errorf("ClickHouse did not converge to the expected result (Kafka holds %d records):\n  %s",
				kafkaRecords(ctx, brokers, topicName, cfg.Partitions), summarize(last))
		}
		time.Sleep(500 * time.Millisecond)
	}
	say("processor: %d instance(s), %d starts, %d killed with SIGKILL, %d exits with an error (restarted from the last checkpoint)",
		cfg.Instances, sup.starts.Load(), sup.kills.Load(), sup.failures.Load())
	say("Kafka: %d records in %s", kafkaRecords(ctx, brokers, topicName, cfg.Partitions), topicName)
	fmt.Println("PASS: every event counted exactly once, through every injected fault")
	return nil
}

// faultPlan kills the processor and ClickHouse at fixed fractions of the
// deliveries.
type faultPlan struct {
	rng            *rand.Rand
	processorKills map[int]bool
	clickhouseKill int
	kafkaKill      int
}

func newFaultPlan(cfg demoConfig, rng *rand.Rand) *faultPlan {
	f := &faultPlan{rng: rng, processorKills: map[int]bool{}, clickhouseKill: -1, kafkaKill: -1}
	for k := range cfg.Kills {
		// Spread the kills over the deliveries, each at a random point of its slice.
		slice := cfg.Events / (cfg.Kills + 1)
		f.processorKills[(k+1)*slice-slice/2+rng.IntN(max(slice, 1))] = true
	}
	if cfg.KillClickHouse {
		f.clickhouseKill = cfg.Events * 3 / 5
	}
	if cfg.KillKafka {
		f.kafkaKill = cfg.Events * 2 / 5
	}
	return f
}

func (f *faultPlan) at(ctx context.Context, i int, sup *supervisor, chServer *embedded.ClickHouse,
	kafkaServer *embedded.KafkaProcess, say func(string, ...any)) {
	if i == f.kafkaKill && kafkaServer != nil {
		say("fault: Kafka broker killed with SIGKILL; restarting it in 1s on the same log directory")
		if err := kafkaServer.Kill(); err != nil {
			say("kill Kafka: %v", err)
		}
		go func() {
			time.Sleep(time.Second)
			if err := kafkaServer.Start(ctx); err != nil {
				say("restart Kafka: %v", err)
				return
			}
			say("Kafka is back")
		}()
	}
	if f.processorKills[i] {
		sup.kill(f.rng, say)
	}
	if i == f.clickhouseKill && chServer != nil {
		say("fault: ClickHouse killed with SIGKILL; restarting it in 2s on the same data directory")
		if err := chServer.Kill(); err != nil {
			say("kill ClickHouse: %v", err)
		}
		go func() {
			time.Sleep(2 * time.Second)
			if err := chServer.Restart(ctx); err != nil {
				say("restart ClickHouse: %v", err)
				return
			}
			say("ClickHouse is back")
		}()
	}
}

// finish kills the processor once more while it catches up, after the last
// delivery.
func (f *faultPlan) finish(_ context.Context, sup *supervisor, say func(string, ...any)) {
	if len(f.processorKills) > 0 {
		time.Sleep(300 * time.Millisecond)
		sup.kill(f.rng, say)
	}
}

// supervisor keeps instances processor processes running, as a container
// runtime would, and kills one on request.
type supervisor struct {
	args      []string
	instances int
	// sharedGroup puts every instance and incarnation in one consumer group,
	// so partitions move between live instances. Otherwise each incarnation
	// joins a group of its own: a member killed with SIGKILL holds its
	// partitions until its session times out, and a kfake broker restored
	// from its log directory does not expire members at all. The group only
	// carries offsets for lag monitoring; where a partition resumes comes
	// from its checkpoint either way.
	sharedGroup bool
	say         func(string, ...any)

	mu                      sync.Mutex
	cmds                    []*exec.Cmd // by instance; nil while restarting
	starts, kills, failures atomic.Int64
}

// run runs every instance until ctx ends.
func (s *supervisor) run(ctx context.Context) {
	s.mu.Lock()
	s.cmds = make([]*exec.Cmd, s.instances)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for i := range s.instances {
		wg.Go(func() { s.keep(ctx, i) })
	}
	wg.Wait()
}

// keep runs instance i, restarting it whenever it exits, until ctx ends.
func (s *supervisor) keep(ctx context.Context, i int) {
	for ctx.Err() == nil {
		args := s.args[1:len(s.args):len(s.args)]
		if !s.sharedGroup {
			args = append(args, fmt.Sprintf("-group-suffix=%d", s.starts.Load()))
		}
		cmd := exec.Command(s.args[0], args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			s.say("start processor: %v", err)
			return
		}
		s.starts.Add(1)
		s.mu.Lock()
		s.cmds[i] = cmd
		s.mu.Unlock()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			return
		}
		s.mu.Lock()
		s.cmds[i] = nil
		s.mu.Unlock()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			continue // killed on purpose: restart at once
		}
		s.failures.Add(1)
		s.say("processor exited (%v); restarting it from its last checkpoint", err)
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// signal sends sig to every running instance.
func (s *supervisor) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cmd := range s.cmds {
		if cmd != nil {
			_ = cmd.Process.Signal(sig)
		}
	}
}

// kill kills one running instance, chosen by rng, with SIGKILL.
func (s *supervisor) kill(rng *rand.Rand, say func(string, ...any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var running []int
	for i, cmd := range s.cmds {
		if cmd != nil {
			running = append(running, i)
		}
	}
	if len(running) == 0 {
		return
	}
	i := running[rng.IntN(len(running))]
	if s.instances > 1 {
		say("fault: stream processor instance %d (pid %d) killed with SIGKILL", i, s.cmds[i].Process.Pid)
	} else {
		say("fault: stream processor (pid %d) killed with SIGKILL", s.cmds[i].Process.Pid)
	}
	_ = s.cmds[i].Process.Kill()
	s.kills.Add(1)
}

// kafkaRecords counts the records in the topic: more than the distinct events
// whenever an ack was lost and the gateway's retry wrote the event again.
func kafkaRecords(ctx context.Context, brokers []string, topic string, partitions int) int64 {
	var total int64
	for p := range partitions {
		conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p)
		if err != nil {
			return -1
		}
		first, last, err := conn.ReadOffsets()
		_ = conn.Close()
		if err != nil {
			return -1
		}
		total += last - first
	}
	return total
}

// watchClickHouse restarts the embedded ClickHouse if it exits on its own, as
// systemd or Kubernetes would, and says why it stopped.
func watchClickHouse(ctx context.Context, c *embedded.ClickHouse, say func(string, ...any)) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Crashed(); err != nil {
			say("ClickHouse exited on its own; restarting it: %v", err)
			if err := c.Restart(ctx); err != nil && ctx.Err() == nil {
				say("restart ClickHouse: %v", err)
			}
		}
	}
}

// convergeTimeout bounds the wait for ClickHouse to hold the expected result
// once every event was delivered (PIPELINE_CONVERGE overrides it).
func convergeTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PIPELINE_CONVERGE")); err == nil {
		return d
	}
	return 3 * time.Minute
}

// keyStore returns a constructor of the gateway's idempotency store: a fresh
// in-memory store per gateway process, or one Redis that outlives them
// (REDIS_ADDR, or an embedded redis-server).
func keyStore(ctx context.Context, kind string) (newStore func() (idempotency.Store, error), name string, closeFn func(), err error) {
	switch kind {
	case "memory":
		return func() (idempotency.Store, error) {
			return idempotency.NewMemoryStore(idempotency.MemoryOptions{})
		}, "memory", func() {}, nil
	case "redis":
		addr := os.Getenv("REDIS_ADDR")
		stop := func() {}
		if addr == "" {
			r, err := embedded.StartRedis(ctx, embedded.RedisOptions{})
			if err != nil {
				return nil, "", nil, fmt.Errorf("start Redis: %w", err)
			}
			addr, stop = r.Addr(), func() { _ = r.Stop() }
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		prefix := fmt.Sprintf("demo:%d:", time.Now().UnixNano()) // one per run, shared by its gateways
		return func() (idempotency.Store, error) {
				return redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			}, "Redis at " + addr, func() {
				_ = rdb.Close()
				stop()
			}, nil
	default:
		return nil, "", nil, fmt.Errorf("-store %q: want memory or redis", kind)
	}
}
