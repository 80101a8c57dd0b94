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
	"slices"
	"strconv"
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
	Checkpoints                     string // fs or s3 (see s3.go)
	Logger                          *slog.Logger
}

const topic = "webhooks"

// demo is one run: its servers, the gateway, the supervised processors and
// the simulated providers. runDemo walks it through its phases.
type demo struct {
	cfg   demoConfig
	say   func(format string, a ...any)
	dir   string
	rng   *rand.Rand // drawn from the demo's goroutine only
	close []func()   // run in reverse order at the end

	chAddr  string
	ch      *embedded.ClickHouse   // nil with CLICKHOUSE_ADDR
	brokers []string               //
	kafka   *embedded.KafkaProcess // nil with KAFKA_BROKERS
	topic   string
	dlq     string // dead-letter topic of the processor
	poison  []int64
	db      string

	newStore func() (idempotency.Store, error)
	gw       *gateway
	prov     *provider
	sup      *supervisor
	faults   *faultPlan
	board    *dashboard
}

func runDemo(ctx context.Context, cfg demoConfig) error {
	if cfg.Events <= 0 || cfg.Orgs <= 0 || cfg.Partitions <= 0 || cfg.Kills < 0 || cfg.Instances <= 0 {
		return errors.New("-events, -orgs, -partitions and -instances must be positive, -kills not negative")
	}
	if cfg.Instances > 1 && cfg.KillKafka {
		// See supervisor.sharedGroup.
		return errors.New("-instances > 1 shares one consumer group, which a restarted kfake broker never rebalances: add -kill-kafka=false")
	}
	began := time.Now()
	d := &demo{
		cfg: cfg,
		say: func(format string, a ...any) {
			fmt.Printf("[%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, a...))
		},
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
	}
	defer func() {
		for i := len(d.close) - 1; i >= 0; i-- {
			d.close[i]()
		}
	}()
	if err := d.startServers(ctx); err != nil {
		return err
	}
	if err := d.startPipeline(ctx); err != nil {
		return err
	}
	examples, err := loadGitHubExamples(ctx)
	if err != nil {
		return fmt.Errorf("GitHub's example payloads: %w", err)
	}
	tpl, err := pickTemplates(examples)
	if err != nil {
		return err
	}
	events := generate(d.rng, tpl, cfg.Events, cfg.Orgs, eventSpan)
	if err := d.injectPoison(ctx); err != nil {
		return err
	}
	d.faults = newFaultPlan(cfg, d.rng)
	d.close = append(d.close, d.faults.stop) // before the servers stop
	d.board = &dashboard{addr: d.chAddr, db: d.db, early: map[string]uint64{}}
	boardCtx, stopBoard := context.WithCancel(ctx)
	boardDone := make(chan struct{})
	go func() { defer close(boardDone); d.board.run(boardCtx, 200*time.Millisecond) }()
	err = d.deliver(ctx, events)
	stopBoard()
	<-boardDone
	if err != nil {
		return err
	}
	if cfg.Faults {
		if err := d.redeliverAfterGatewayRestart(ctx, events); err != nil {
			return err
		}
	}
	if err := d.awaitGitHubRecovered(ctx); err != nil {
		return err
	}
	d.faults.finish(ctx, d.sup, d.say)
	if err := d.awaitExact(ctx, events); err != nil {
		return err
	}
	early, err := d.board.verdict(expect(events).counts)
	if err != nil {
		return err
	}
	d.say("%s", early)
	d.say("processor: %d instance(s), %d starts, %d killed with SIGKILL, %d exits with an error (restarted from the last checkpoint)",
		cfg.Instances, d.sup.starts.Load(), d.sup.kills.Load(), d.sup.failures.Load())
	d.say("Kafka: %d records in %s", kafkaRecords(ctx, d.brokers, d.topic, cfg.Partitions), d.topic)
	fmt.Println("PASS: every event counted exactly once, every per-employee metric exact (hourly rows shown early, final rows exact), through every injected fault")
	return nil
}

// startServers starts ClickHouse and Kafka, embedded unless the environment
// names real ones, and creates the topic and the tables.
func (d *demo) startServers(ctx context.Context) error {
	d.dir = d.cfg.Dir
	if d.dir == "" {
		var err error
		if d.dir, err = os.MkdirTemp("", "exactlyonce-demo-"); err != nil {
			return err
		}
		d.close = append(d.close, func() { os.RemoveAll(d.dir) })
	}
	if d.chAddr = os.Getenv("CLICKHOUSE_ADDR"); d.chAddr == "" {
		d.say("starting ClickHouse 26.7 (clickhouse-local from libchdb.so; the first run downloads it)")
		ch, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{Dir: d.dir + "/clickhouse"})
		if err != nil {
			return fmt.Errorf("start ClickHouse: %w", err)
		}
		d.ch, d.chAddr = ch, ch.Addr()
		watchCtx, stopWatch := context.WithCancel(ctx)
		d.close = append(d.close, func() { _ = ch.Stop() }, stopWatch)
		go watchClickHouse(watchCtx, ch, d.say)
		d.say("ClickHouse %s listening on %s", ch.Version(), d.chAddr)
	}
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		d.brokers = strings.Split(env, ",")
	} else {
		// The broker runs as its own process, with its log on disk, so that
		// it can be killed with SIGKILL and come back with what it acknowledged.
		k, err := embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{DataDir: d.dir + "/kafka"})
		if err != nil {
			return fmt.Errorf("start Kafka: %w", err)
		}
		d.kafka, d.brokers = k, k.Brokers()
		d.close = append(d.close, func() { _ = k.Stop() })
		d.say("Kafka (kfake, pid %d) listening on %s", k.PID(), d.brokers[0])
	}
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	d.topic, d.db = topic+"_"+runID, "demo_"+runID
	d.dlq = d.topic + "_dlq"
	if err := embedded.CreateTopic(ctx, d.brokers, d.topic, d.cfg.Partitions); err != nil {
		return err
	}
	if err := embedded.CreateTopic(ctx, d.brokers, d.dlq, 1); err != nil {
		return err
	}
	if err := createTables(ctx, d.chAddr, d.db); err != nil {
		return err
	}
	d.say("database %s: normalized_events → mv_employee_metrics_hourly → employee_metrics_hourly, deployments and incidents (ReplacingMergeTree, read with FINAL), employee_metrics_window (window operator, ReplacingMergeTree by window)", d.db)
	return nil
}

// startPipeline starts the gateway and the supervised stream processors.
func (d *demo) startPipeline(ctx context.Context) error {
	newStore, storeName, closeStore, err := keyStore(ctx, d.cfg.Store)
	if err != nil {
		return err
	}
	d.newStore = newStore
	d.close = append(d.close, closeStore)
	if err := d.startGateway(ctx, 0, d.cfg.Faults); err != nil {
		return err
	}
	d.say("gateway listening on %s (idempotency keys in %s)", d.gw.URL(), storeName)
	// GitHub waits 10 s for an answer, then records the delivery as failed.
	d.prov = &provider{client: &http.Client{Timeout: 10 * time.Second}, baseURL: d.gw.URL()}
	if err := d.startGitHub(ctx); err != nil {
		return err
	}
	if d.cfg.Faults {
		d.prov.dupRate = 0.1
	}

	// The stream processor runs as its own process, so that it can be killed
	// with SIGKILL like a crashed pod. The supervisor restarts it.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	group := "aggregator-" + d.db
	d.sup = &supervisor{say: d.say, instances: d.cfg.Instances, sharedGroup: d.cfg.Instances > 1, group: group, brokers: d.brokers,
		args: []string{self, "-role=processor",
			"-brokers=" + strings.Join(d.brokers, ","), "-topic=" + d.topic, "-group=" + group,
			"-clickhouse=" + d.chAddr, "-database=" + d.db, "-dlq=" + d.dlq, "-state=" + d.dir + "/processor"}}
	if d.cfg.Verbose {
		d.sup.args = append(d.sup.args, "-v")
	}
	s3Args, err := d.startCheckpointStore(ctx)
	if err != nil {
		return err
	}
	d.sup.args = append(d.sup.args, s3Args...)
	supCtx, stopSup := context.WithCancel(ctx)
	supDone := make(chan struct{})
	go func() { defer close(supDone); d.sup.run(supCtx) }()
	d.close = append(d.close, func() { stopSup(); <-supDone })
	return nil
}

// startGateway starts gateway incarnation n, with a fresh key store (one that
// forgets, for the memory store), and stops it at the end.
func (d *demo) startGateway(ctx context.Context, n uint64, faults bool) error {
	store, err := d.newStore()
	if err != nil {
		return err
	}
	// The gateway draws its faults from its own generator: it runs in HTTP
	// handlers, concurrently with the demo's goroutine.
	gw, err := startGateway(ctx, d.brokers, d.topic, store, rand.New(rand.NewPCG(d.cfg.Seed, 0x9a7e+n)), faults)
	if err != nil {
		return err
	}
	d.gw = gw
	d.close = append(d.close, func() { _ = gw.Close(context.Background()) })
	return nil
}

// deliver is stage 1: the providers deliver every event, some twice at
// once, and retry until accepted, while the fault plan strikes.
func (d *demo) deliver(ctx context.Context, events []delivery) error {
	d.say("delivering %d webhooks (GitHub example payloads varied, Jira issue payloads, pings, 30%% of GitHub ones form-encoded) of %d organisations (%v of event time)",
		len(events), d.cfg.Orgs, eventSpan)
	// Which events are delivered twice is drawn up front, from the seed.
	dups := make([]bool, len(events))
	for i := range dups {
		dups[i] = d.rng.Float64() < d.prov.dupRate
	}
	var (
		delivered  atomic.Int64
		deliverErr error
		errOnce    sync.Once
		wg         sync.WaitGroup
	)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := d.prov.deliver(ctx, events[i], dups[i]); err != nil {
					errOnce.Do(func() { deliverErr = err })
					continue
				}
				delivered.Add(1)
			}
		})
	}
	for i := range events {
		d.faults.at(ctx, i, d.sup, d.ch, d.kafka, d.say)
		if w := events[i].Want; w != nil {
			d.board.sending(w.Time)
		}
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
	d.say("delivered: %d requests for %d webhooks (%d duplicate deliveries, %d retries after 503, %d answered from the idempotency store; %d pings and uncounted activities answered 200 unpublished, %d unnormalizable payloads answered 422)",
		d.prov.requests.Load(), delivered.Load(), d.prov.duplicates.Load(), d.prov.retries.Load(), d.prov.replayed.Load(),
		d.prov.ignored.Load(), d.prov.rejected.Load())
	d.say("Kafka publishes: %d written (%d of them after a lost ack, so duplicates), %d failed before the write",
		d.gw.flaky.published.Load(), d.gw.flaky.ackLost.Load(), d.gw.flaky.failedBefore.Load())
	return nil
}

// redeliverAfterGatewayRestart restarts the gateway (a deploy), then an
// operator redelivers a few past deliveries by hand, as GitHub allows for
// three days. Keys in memory are gone with the old process, so the new
// gateway publishes those events again and the stream processor's dedup
// must drop them; keys in Redis survive and the gateway answers with the
// stored 2xx.
func (d *demo) redeliverAfterGatewayRestart(ctx context.Context, events []delivery) error {
	if err := d.gw.Close(ctx); err != nil {
		return err
	}
	if err := d.startGateway(ctx, 1, false); err != nil {
		return err
	}
	d.prov.setBaseURL(d.gw.URL())
	n := max(len(events)/20, 1)
	replayedBefore := d.prov.replayed.Load()
	for range n {
		if err := d.prov.deliver(ctx, events[d.rng.IntN(len(events))], false); err != nil {
			return err
		}
	}
	d.say("fault: gateway restarted; %d past deliveries redelivered by hand: %d published to Kafka again, %d answered from the idempotency store",
		n, d.gw.flaky.published.Load(), d.prov.replayed.Load()-replayedBefore)
	return nil
}

// awaitExact waits until the processors have checkpointed every record in
// Kafka and ClickHouse then holds exactly what the providers sent, and fails
// at once on a duplicate, or with the gap after a timeout. Requiring the
// checkpoints first means a replay still pending after the last kill cannot
// add a duplicate after the verdict.
func (d *demo) awaitExact(ctx context.Context, events []delivery) error {
	want := expect(events)
	deadline := time.Now().Add(convergeTimeout())
	for {
		var gap []string
		lag, lagErr := checkpointLag(ctx, d.brokers, d.topic, d.cfg.Partitions, d.sup.joined())
		got, err := observe(ctx, d.chAddr, d.db)
		if err == nil {
			gap = diff(want, got)
			if len(gap) == 0 && lagErr == nil && lag == 0 {
				d.say("every Kafka record checkpointed; ClickHouse: normalized_events %d rows = %d distinct events sent; %d employee-hours exact in employee_metrics_hourly (materialized view) and employee_metrics_window FINAL (merged PRs, review comments, reviews and their average latency, deployments, incidents); deployments FINAL %d and incidents FINAL %d exact",
					got.rows, want.events, len(want.metrics), want.deploymentsTotal, want.incidentsTotal)
				return d.checkDeadLetters(ctx)
			}
			if got.rows > uint64(want.events) {
				return fmt.Errorf("DUPLICATES in ClickHouse:\n  %s", summarize(gap))
			}
			if len(gap) == 0 {
				gap = []string{fmt.Sprintf("exact, but %d records not yet checkpointed (%v)", lag, lagErr)}
			}
		} else {
			gap = []string{err.Error()}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if os.Getenv("PIPELINE_DUMP") != "" {
				d.sup.signal(syscall.SIGQUIT) // the processors' goroutines, to see where they stall
				time.Sleep(time.Second)
			}
			return fmt.Errorf("ClickHouse did not converge to the expected result (Kafka holds %d records):\n  %s",
				kafkaRecords(ctx, d.brokers, d.topic, d.cfg.Partitions), summarize(gap))
		}
		if os.Getenv("PIPELINE_GAP") != "" { // say what is still missing, every half second

			d.say("gap: %s", summarize(gap))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// faultPlan kills the processor and ClickHouse at fixed fractions of the
// deliveries.
// A server it kills is restarted by a goroutine the plan owns: stop cancels
// a restart still waiting and waits for one under way, so no server is
// started again after the demo stopped it.
type faultPlan struct {
	rng            *rand.Rand
	processorKills map[int]bool
	clickhouseKill int
	kafkaKill      int

	restarts sync.WaitGroup
	stopped  chan struct{}
	stopOnce sync.Once
}

func newFaultPlan(cfg demoConfig, rng *rand.Rand) *faultPlan {
	f := &faultPlan{rng: rng, processorKills: map[int]bool{}, clickhouseKill: -1, kafkaKill: -1,
		stopped: make(chan struct{})}
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
		f.restarts.Go(func() {
			if !f.sleep(ctx, time.Second) {
				return
			}
			if err := kafkaServer.Start(ctx); err != nil {
				say("restart Kafka: %v", err)
				return
			}
			say("Kafka is back")
		})
	}
	if f.processorKills[i] {
		sup.kill(ctx, f.rng, say)
	}
	if i == f.clickhouseKill && chServer != nil {
		say("fault: ClickHouse killed with SIGKILL; restarting it in 2s on the same data directory")
		if err := chServer.Kill(); err != nil {
			say("kill ClickHouse: %v", err)
		}
		f.restarts.Go(func() {
			if !f.sleep(ctx, 2*time.Second) {
				return
			}
			if bringUp(ctx, chServer, func(d time.Duration) bool { return f.sleep(ctx, d) }, say) {
				say("ClickHouse is back")
			}
		})
	}
}

// sleep waits for d and reports whether the plan is still running then.
func (f *faultPlan) sleep(ctx context.Context, d time.Duration) bool {
	return sleep(ctx, f.stopped, d)
}

// sleep waits for d and reports whether neither ctx ended nor stop closed
// meanwhile (a nil stop never closes).
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-stop:
	}
	return false
}

// stop cancels the restarts still waiting and waits for those under way. It
// is safe to call more than once.
func (f *faultPlan) stop() {
	f.stopOnce.Do(func() { close(f.stopped) })
	f.restarts.Wait()
}

// finish kills the processor once more while it catches up, after the last
// delivery.
func (f *faultPlan) finish(ctx context.Context, sup *supervisor, say func(string, ...any)) {
	if len(f.processorKills) > 0 {
		time.Sleep(300 * time.Millisecond)
		sup.kill(ctx, f.rng, say)
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
	group       string   // the -group argument in args
	brokers     []string // where the group lives
	say         func(string, ...any)

	mu                      sync.Mutex
	cmds                    []*exec.Cmd // by instance; nil while restarting
	groups                  []string    // every consumer group an instance joined
	starts, kills, failures atomic.Int64
}

// joined returns every consumer group an instance has joined so far.
func (s *supervisor) joined() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.groups)
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
		group := s.group
		if !s.sharedGroup {
			suffix := strconv.FormatInt(s.starts.Load(), 10)
			args = append(args, "-group-suffix="+suffix)
			group += "-" + suffix
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
		if !slices.Contains(s.groups, group) {
			s.groups = append(s.groups, group)
		}
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
//
// With a shared group it first waits, for a few seconds at most, until the
// group is stable. kfake keeps a member killed in the middle of joining as
// a member for good, with partitions assigned and never expired (Kafka
// expires it after session.timeout.ms), which would leave those partitions
// unread; a kill between rebalances is expired as on Kafka.
func (s *supervisor) kill(ctx context.Context, rng *rand.Rand, say func(string, ...any)) {
	if s.sharedGroup {
		awaitStableGroup(ctx, s.brokers, s.group, 15*time.Second)
	}
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

// awaitStableGroup waits until group is Stable (no join or sync in
// progress), ctx ends or timeout passes.
func awaitStableGroup(ctx context.Context, brokers []string, group string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 2 * time.Second}
	for ctx.Err() == nil {
		resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
		if err == nil && len(resp.Groups) == 1 && resp.Groups[0].GroupState == "Stable" {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
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

// checkpointLag counts the records of the topic past the highest offset any
// of groups has committed. A processor commits an offset only after the
// checkpoint that covers it completed, and restores from its newest
// checkpoint, so at lag 0 no record will be processed again.
func checkpointLag(ctx context.Context, brokers []string, topic string, partitions int, groups []string) (int64, error) {
	ends := make([]int64, partitions)
	for p := range partitions {
		conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p)
		if err != nil {
			return 0, err
		}
		ends[p], err = conn.ReadLastOffset()
		_ = conn.Close()
		if err != nil {
			return 0, err
		}
	}
	committed := make([]int64, partitions)
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second}
	all := make([]int, partitions)
	for p := range all {
		all[p] = p
	}
	for _, g := range groups {
		resp, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: g, Topics: map[string][]int{topic: all}})
		if err != nil {
			return 0, err
		}
		if errors.Is(resp.Error, kafka.GroupIdNotFound) {
			// kfake forgets a group that never committed once it restarts
			// (real Kafka answers with no offsets): nothing to count.
			continue
		}
		if resp.Error != nil {
			return 0, resp.Error
		}
		for _, p := range resp.Topics[topic] {
			if p.Error == nil && p.Partition >= 0 && p.Partition < partitions {
				committed[p.Partition] = max(committed[p.Partition], p.CommittedOffset)
			}
		}
	}
	var lag int64
	for p := range partitions {
		lag += max(ends[p]-committed[p], 0)
	}
	return lag, nil
}

// watchClickHouse restarts the embedded ClickHouse if it exits on its own, as
// systemd or Kubernetes would, and says why it stopped.
func watchClickHouse(ctx context.Context, c *embedded.ClickHouse, say func(string, ...any)) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	wait := func(d time.Duration) bool { return sleep(ctx, nil, d) }
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Crashed(); err != nil {
			say("ClickHouse exited on its own; restarting it: %v", err)
			bringUp(ctx, c, wait, say)
		}
	}
}

// bringUp starts ClickHouse unless it runs, and tries again after a failed
// start (clickhouse-local can abort while it starts) until it serves, wait
// says to give up, or ctx ends. It reports whether ClickHouse serves. The
// fault plan and the watchdog may both call it: one starts the server, the
// other finds it running.
func bringUp(ctx context.Context, c *embedded.ClickHouse, wait func(time.Duration) bool, say func(string, ...any)) bool {
	backoff := 200 * time.Millisecond
	for {
		_, err := c.EnsureRunning(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		say("restart ClickHouse: %v; trying again in %v", err, backoff)
		if !wait(backoff) {
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
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
				// Concurrent requests share pipelines, as the package doc advises.
				ap, err := rdb.AutoPipeline()
				if err != nil {
					return nil, err
				}
				return redisstore.New(ap, redisstore.Options{Prefix: prefix})
			}, "Redis at " + addr, func() {
				_ = rdb.Close()
				stop()
			}, nil
	default:
		return nil, "", nil, fmt.Errorf("-store %q: want memory or redis", kind)
	}
}
