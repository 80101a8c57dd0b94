package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Config is one run of the demo. Events, Orgs, Partitions and Instances
// must be positive.
type Config struct {
	Events, Orgs, Partitions, Kills int
	KillClickHouse, KillKafka       bool
	// Faults injects Kafka publish failures (before and after the write)
	// at the gateway, duplicate deliveries, and a gateway restart with
	// manual redeliveries.
	Faults  bool
	Verbose bool   // the binaries log warnings, not only errors
	Store   string // the gateway's idempotency keys: memory or redis
	// Instances of the processor; more than 1 share one consumer group
	// and need KillKafka false on kfake (see Supervisor.SharedGroup).
	Instances int
	// Kafka is the broker the run starts unless KAFKA_BROKERS names one:
	// KafkaFake (the default), KafkaApache or KafkaApache39.
	Kafka       string
	Seed        uint64
	Dir         string // state directory; default a new temporary one
	Checkpoints string // fs or s3 (see s3.go)
	Logger      *slog.Logger
	// Stdout receives the demo's report. Default os.Stdout.
	Stdout io.Writer
	// Binaries to run. Default: BuildBinaries into Dir.
	Binaries Binaries
	// Naive runs joints the naive way beside the correct pipeline
	// (gateway, sink, merge, mv or avg: devmetrics.Naive; a
	// comma-separated list, or all) and reports both figures. Default "":
	// none.
	Naive string
}

const topic = "webhooks"

// lostAckEvery: a lost acknowledgement at the wire before every
// lostAckEvery-th delivery, about 3% of the publishes.
const lostAckEvery = 30

// WebhookSecret signs the simulated deliveries; the gateway verifies them.
const WebhookSecret = "demo-webhook-secret"

// Pipeline is one run: its servers, the gateway, the supervised processors and
// the simulated providers. Run walks it through its phases.
type Pipeline struct {
	Config   Config
	Say      func(format string, a ...any)
	Dir      string
	Rng      *rand.Rand // drawn from the demo's goroutine only
	Cleanups []func()   // run in reverse order at the end

	Servers  *Servers
	Binaries Binaries
	Topic    string
	DLQ      string // dead-letter topic of the processor
	poison   []int64
	DB       string

	GatewayArgs []string // without the fault flags
	GatewayEnv  []string
	storeName   string
	Gateway     *Gateway
	gwStarts    uint64
	Provider    *Provider
	Supervisor  *Supervisor
	faults      *FaultPlan
	board       *dashboard
	result      Result
	S3          *embedded.S3 // the embedded S3 of -checkpoints s3, nil otherwise

	naives    []devmetrics.Naive
	naiveGW   *Gateway  // NaiveGateway only
	naiveProv *Provider // sends to naiveGW
}

// Result is what a run counted on its way.
type Result struct {
	// LostAcks is how many produce acknowledgements were lost at the wire
	// (embedded kfake only).
	LostAcks int
	// Records in the topic once every webhook was delivered, before the
	// gateway restart, and the distinct deliveries among them: every record
	// beyond Distinct was written twice.
	Records, Distinct int64
	// Naive is each naive joint's report, NaiveShows whether one of its
	// naive figures differed from the ground truth (Config.Naive only).
	Naive      map[devmetrics.Naive][]Figure
	NaiveShows map[devmetrics.Naive]bool
	// Audit is the audit's report (audit.go), AuditFlags whether it
	// flagged each naive joint it can see (avg is not a count).
	Audit      *audit.Report
	AuditFlags map[devmetrics.Naive]bool
}

// Run runs the demo: servers, the gateway and processor binaries, the
// providers' deliveries under the fault plan, and the verdict. It returns
// nil only when every figure is exact.
func Run(ctx context.Context, cfg Config) error {
	_, err := RunResult(ctx, cfg)
	return err
}

// RunResult is Run, and returns what the run counted.
func RunResult(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Events <= 0 || cfg.Orgs <= 0 || cfg.Partitions <= 0 || cfg.Kills < 0 || cfg.Instances <= 0 {
		return Result{}, errors.New("-events, -orgs, -partitions and -instances must be positive, -kills not negative")
	}
	if cfg.Kafka == "" {
		cfg.Kafka = KafkaFake
	}
	if cfg.Instances > 1 && cfg.KillKafka && cfg.Kafka == KafkaFake {
		// See Supervisor.SharedGroup.
		return Result{}, errors.New("-instances > 1 shares one consumer group, which a restarted kfake broker never rebalances: add -kill-kafka=false or -kafka=apache")
	}
	naives, err := devmetrics.ParseNaives(cfg.Naive)
	if err != nil {
		return Result{}, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	began := time.Now()
	d := &Pipeline{
		Config: cfg,
		Say: func(format string, a ...any) {
			fmt.Fprintf(cfg.Stdout, "[%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, a...))
		},
		Rng:    rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		naives: naives,
	}
	defer func() {
		for i := len(d.Cleanups) - 1; i >= 0; i-- {
			d.Cleanups[i]()
		}
	}()
	if err := d.StartServers(ctx); err != nil {
		return d.result, err
	}
	if err := d.startPipeline(ctx); err != nil {
		return d.result, err
	}
	examples, err := LoadGitHubExamples(ctx)
	if err != nil {
		return d.result, fmt.Errorf("GitHub's example payloads: %w", err)
	}
	tpl, err := PickTemplates(examples)
	if err != nil {
		return d.result, err
	}
	events := generate(d.Rng, tpl, cfg.Events, cfg.Orgs, EventSpan)
	if err := d.InjectPoison(ctx); err != nil {
		return d.result, err
	}
	sched := Schedule{Events: cfg.Events, Kills: cfg.Kills, KillClickHouse: cfg.KillClickHouse, KillKafka: cfg.KillKafka}
	if cfg.Faults {
		sched.LostAckEvery = lostAckEvery
	}
	d.faults = NewFaultPlan(sched, d.Rng)
	d.Cleanups = append(d.Cleanups, d.faults.Stop) // before the servers stop
	d.board = &dashboard{addr: d.Servers.ClickHouseAddr, db: d.DB, early: map[string]uint64{}}
	boardCtx, stopBoard := context.WithCancel(ctx)
	boardDone := make(chan struct{})
	go func() { defer close(boardDone); d.board.run(boardCtx, 200*time.Millisecond) }()
	err = d.deliver(ctx, events)
	stopBoard()
	<-boardDone
	if err != nil {
		return d.result, err
	}
	if cfg.Faults {
		if err := d.redeliverAfterGatewayRestart(ctx, events); err != nil {
			return d.result, err
		}
	}
	if err := d.AwaitGitHubRecovered(ctx); err != nil {
		return d.result, err
	}
	d.faults.Finish(ctx, d.Supervisor, d.Say)
	if err := d.awaitExact(ctx, events); err != nil {
		return d.result, err
	}
	early, err := d.board.verdict(Expect(events).counts)
	if err != nil {
		return d.result, err
	}
	d.Say("%s", early)
	d.Say("processor: %d instance(s), %d starts, %d killed with SIGKILL, %d exits with an error (restarted from the last checkpoint)",
		cfg.Instances, d.Supervisor.Starts(), d.Supervisor.Kills(), d.Supervisor.Failures())
	if records, distinct, err := topicDeliveries(ctx, d.Servers.Brokers, d.Topic, cfg.Partitions); err == nil {
		d.Say("Kafka: %d records in %s for %d distinct deliveries: %d written twice (%d before the gateway restart, the others by the restarted gateway), each counted once by the processor's dedup",
			records, d.Topic, distinct, records-distinct, d.result.Records-d.result.Distinct)
	} else {
		d.Say("Kafka: cannot read %s back: %v", d.Topic, err)
	}
	if _, err := d.RunAudit(ctx, Expect(events)); err != nil {
		return d.result, err
	}
	for _, n := range d.naives {
		figs, err := d.naiveFigures(ctx, n, Expect(events))
		if err != nil {
			return d.result, err
		}
		shows, err := d.reportNaive(n, figs)
		if d.result.Naive == nil {
			d.result.Naive, d.result.NaiveShows = map[devmetrics.Naive][]Figure{}, map[devmetrics.Naive]bool{}
		}
		d.result.Naive[n], d.result.NaiveShows[n] = figs, shows
		if err != nil {
			return d.result, err
		}
	}
	fmt.Fprintln(cfg.Stdout, "PASS: every event counted exactly once, every per-employee metric exact (hourly rows shown early, final rows exact), through every injected fault")
	return d.result, nil
}

// StartServers starts ClickHouse and Kafka, embedded unless the environment
// names real ones, builds the binaries, and creates the topics and the
// tables.
func (d *Pipeline) StartServers(ctx context.Context) error {
	d.Dir = d.Config.Dir
	if d.Dir == "" {
		var err error
		if d.Dir, err = os.MkdirTemp("", "exactlyonce-demo-"); err != nil {
			return err
		}
		d.Cleanups = append(d.Cleanups, func() { os.RemoveAll(d.Dir) })
	}
	built := make(chan error, 1)
	d.Binaries = d.Config.Binaries
	if d.Binaries == (Binaries{}) {
		go func() {
			var err error
			d.Binaries, err = BuildBinaries(ctx, filepath.Join(d.Dir, "bin"))
			built <- err
		}()
	} else {
		built <- nil
	}
	srv, err := StartServers(ctx, d.Dir, d.Config.Kafka, d.Say)
	if err != nil {
		<-built
		return err
	}
	d.Servers = srv
	d.Cleanups = append(d.Cleanups, srv.Stop)
	if err := <-built; err != nil {
		return err
	}
	d.Say("gateway and processor: the binaries of examples/gateway and examples/processor (-pipeline devmetrics) in %s", filepath.Dir(d.Binaries.Gateway))
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	d.Topic, d.DB = topic+"_"+runID, "demo_"+runID
	d.DLQ = d.Topic + "_dlq"
	if err := embedded.CreateTopic(ctx, srv.Brokers, d.Topic, d.Config.Partitions); err != nil {
		return err
	}
	if err := embedded.CreateTopic(ctx, srv.Brokers, d.DLQ, 1); err != nil {
		return err
	}
	if err := embedded.CreateTopic(ctx, srv.Brokers, d.AuditTopic(), d.Config.Partitions); err != nil { // audit.go
		return err
	}
	if err := devmetrics.CreateTables(ctx, ch.Options{Address: srv.ClickHouseAddr}, d.DB); err != nil {
		return err
	}
	if err := chaudit.CreateTable(ctx, ch.Options{Address: srv.ClickHouseAddr}, d.DB, chaudit.DefaultTable); err != nil { // audit.go
		return err
	}
	if len(d.naives) > 0 {
		if err := d.setUpNaive(ctx); err != nil {
			return err
		}
	}
	d.Say("database %s: normalized_events → mv_employee_metrics_hourly → employee_metrics_hourly, deployments and incidents (ReplacingMergeTree, read with FINAL), employee_metrics_window (window operator, ReplacingMergeTree by window)", d.DB)
	return nil
}

// stderr receives the binaries' logs.
func (d *Pipeline) stderr() io.Writer { return os.Stderr }

// createTopic creates a topic on the run's brokers.
func createTopic(ctx context.Context, brokers []string, topic string, partitions int) error {
	return embedded.CreateTopic(ctx, brokers, topic, partitions)
}

// LogLevel is the binaries' -log-level.
func (d *Pipeline) LogLevel() string {
	if d.Config.Verbose {
		return "-log-level=warn"
	}
	return "-log-level=error"
}

// startPipeline starts the gateway and the supervised stream processors.
func (d *Pipeline) startPipeline(ctx context.Context) error {
	// The idempotent producer: a produce retried after a lost
	// acknowledgement is dropped by the broker, not written twice.
	d.GatewayArgs = []string{"-pipeline=devmetrics", "-idempotent-producer", "-brokers=" + strings.Join(d.Servers.Brokers, ","),
		"-topic=" + d.Topic, "-retry-after=1s", d.LogLevel(), "-audit-topic=" + d.AuditTopic()}
	d.GatewayEnv = []string{"GITHUB_WEBHOOK_SECRET=" + WebhookSecret, "JIRA_WEBHOOK_SECRET=" + WebhookSecret}
	storeArgs, storeName, closeStore, err := keyStore(ctx, d.Config.Store)
	if err != nil {
		return err
	}
	d.GatewayArgs, d.storeName = append(d.GatewayArgs, storeArgs...), storeName
	d.Cleanups = append(d.Cleanups, closeStore)
	if err := d.StartGateway(ctx, d.Config.Faults); err != nil {
		return err
	}
	d.Say("gateway (examples/gateway, pid %d) listening on %s (idempotency keys in %s)", d.Gateway.PID(), d.Gateway.URL(), storeName)
	if d.hasNaive(devmetrics.NaiveGateway) {
		if err := d.startNaiveGateway(ctx); err != nil {
			return err
		}
	}
	// GitHub waits 10 s for an answer, then records the delivery as failed.
	d.Provider = &Provider{Client: &http.Client{Timeout: 10 * time.Second}, BaseURL: d.Gateway.URL()}
	if err := d.StartGitHub(ctx); err != nil {
		return err
	}
	if d.Config.Faults {
		d.Provider.DupRate = 0.1
	}

	// The stream processor runs as its own process, so that it can be killed
	// with SIGKILL like a crashed pod. The supervisor restarts it.
	listen := "-listen=127.0.0.1:0"
	d.Supervisor = &Supervisor{Say: d.Say, Instances: d.Config.Instances, SharedGroup: d.Config.Instances > 1,
		Group: "aggregator-" + d.DB, Brokers: d.Servers.Brokers,
		Command: []string{d.Binaries.Processor, "-pipeline=devmetrics", listen,
			"-brokers=" + strings.Join(d.Servers.Brokers, ","), "-topic=" + d.Topic,
			"-clickhouse=" + d.Servers.ClickHouseAddr, "-database=" + d.DB, "-create-tables=false", "-dlq=" + d.DLQ,
			"-state-dir=" + filepath.Join(d.Dir, "processor", "state"),
			// Quick to notice a killed instance (kfake's smallest session
			// timeout is 6 s) and to insert: the demo lasts seconds.
			"-session-timeout=6s", "-rebalance-timeout=3s", "-heartbeat-interval=200ms", "-fetch-max-wait=100ms",
			"-sink-max-delay=200ms", d.LogLevel(), "-audit", "-audit-topic=" + d.AuditTopic()}}
	var procNaive []string
	for _, n := range []devmetrics.Naive{devmetrics.NaiveSink, devmetrics.NaiveMV} {
		if d.hasNaive(n) {
			procNaive = append(procNaive, string(n))
		}
	}
	if len(procNaive) > 0 {
		d.Supervisor.Command = append(d.Supervisor.Command, "-naive="+strings.Join(procNaive, ","))
	}
	s3Args, s3Env, err := d.StartCheckpointStore(ctx)
	if err != nil {
		return err
	}
	d.Supervisor.Command, d.Supervisor.Env = append(d.Supervisor.Command, s3Args...), s3Env
	supCtx, stopSup := context.WithCancel(ctx)
	supDone := make(chan struct{})
	go func() { defer close(supDone); d.Supervisor.Run(supCtx) }()
	d.Cleanups = append(d.Cleanups, func() { stopSup(); <-supDone })
	return nil
}

// StartGateway starts the next gateway process, with Kafka publish faults
// if faults is set. A gateway with keys in memory starts with none.
func (d *Pipeline) StartGateway(ctx context.Context, faults bool) error {
	args := d.GatewayArgs
	if faults {
		// Its own seed per incarnation: it draws in its HTTP handlers.
		args = append(slices.Clone(args), "-inject-publish-failures=0.03", fmt.Sprintf("-inject-seed=%d", d.Config.Seed+d.gwStarts))
		if d.Servers.Kfake == nil {
			// No broker to lose acknowledgements at the wire (only kfake
			// has the hook): the gateway loses them itself, after the
			// write (the retry writes again).
			args = append(args, "-inject-lost-acks=0.03")
		}
	}
	gw, err := StartGateway(ctx, d.Binaries.Gateway, args, d.GatewayEnv, d.stderr())
	if err != nil {
		return err
	}
	d.gwStarts++
	d.Gateway = gw
	d.Cleanups = append(d.Cleanups, func() { _ = gw.Stop() })
	return nil
}

// publishCounts reads the faults the running gateway injected from its
// /metrics.
func (d *Pipeline) publishCounts(ctx context.Context) (unreachable, ackLost float64, err error) {
	if unreachable, err = d.Gateway.Counter(ctx, "gateway_injected_faults_total", `fault="unreachable"`); err != nil {
		return
	}
	ackLost, err = d.Gateway.Counter(ctx, "gateway_injected_faults_total", `fault="ack_lost"`)
	return
}

// deliver is stage 1: the providers deliver every event, some twice at
// once, and retry until accepted, while the fault plan strikes.
func (d *Pipeline) deliver(ctx context.Context, events []Delivery) error {
	d.Say("delivering %d webhooks (GitHub example payloads varied, Jira issue payloads, pings, 30%% of GitHub ones form-encoded) of %d organisations (%v of event time)",
		len(events), d.Config.Orgs, EventSpan)
	// Which events are delivered twice is drawn up front, from the seed.
	dups := make([]bool, len(events))
	for i := range dups {
		dups[i] = d.Rng.Float64() < d.Provider.DupRate
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
				if d.naiveProv != nil {
					d.deliverNaive(ctx, events[i], dups[i])
				}
				if err := d.Provider.Deliver(ctx, events[i], dups[i]); err != nil {
					errOnce.Do(func() { deliverErr = err })
					continue
				}
				delivered.Add(1)
			}
		})
	}
	for i := range events {
		d.faults.At(ctx, i, d.Supervisor, d.Servers, d.Say)
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
	d.Say("delivered: %d requests for %d webhooks (%d duplicate deliveries, %d retries after 503, %d answered from the idempotency store; %d pings and uncounted activities answered 200 unpublished, %d unnormalizable payloads answered 422)",
		d.Provider.Requests.Load(), delivered.Load(), d.Provider.Duplicates.Load(), d.Provider.Retries.Load(), d.Provider.Replayed.Load(),
		d.Provider.Ignored.Load(), d.Provider.Rejected.Load())
	unreachable, ackLost, err := d.publishCounts(ctx)
	if err != nil {
		return fmt.Errorf("the gateway's /metrics: %w", err)
	}
	records, distinct, err := topicDeliveries(ctx, d.Servers.Brokers, d.Topic, d.Config.Partitions)
	if err != nil {
		return fmt.Errorf("read %s back: %w", d.Topic, err)
	}
	d.result.Records, d.result.Distinct = records, distinct
	if d.Servers.Kfake != nil {
		armed, hit := d.faults.LostAcks(ctx, d.Servers)
		d.result.LostAcks = hit
		d.Say("Kafka publishes (idempotent producer): %d acknowledgements lost at the wire (of %d armed: the broker wrote the batch and closed the connection instead of answering), %.0f publishes failed before the write (injected at the gateway); the topic holds %d records for %d distinct deliveries: %d written twice",
			hit, armed, unreachable, records, distinct, records-distinct)
	} else {
		d.Say("Kafka publishes: %.0f acknowledgements lost (injected at the gateway after the write), %.0f publishes failed before the write (injected); the topic holds %d records for %d distinct deliveries: %d written twice",
			ackLost, unreachable, records, distinct, records-distinct)
	}
	return nil
}

// redeliverAfterGatewayRestart restarts the gateway (a deploy), then an
// operator redelivers a few past deliveries by hand, as GitHub allows for
// three days. Keys in memory are gone with the old process, so the new
// gateway publishes those events again and the stream processor's dedup
// must drop them; keys in Redis survive and the gateway answers with the
// stored 2xx.
func (d *Pipeline) redeliverAfterGatewayRestart(ctx context.Context, events []Delivery) error {
	if err := d.Gateway.Stop(); err != nil {
		return fmt.Errorf("gateway: SIGTERM: %w", err)
	}
	if err := d.StartGateway(ctx, false); err != nil {
		return err
	}
	d.Provider.SetBaseURL(d.Gateway.URL())
	n := max(len(events)/20, 1)
	replayedBefore := d.Provider.Replayed.Load()
	for range n {
		if err := d.Provider.Deliver(ctx, events[d.Rng.IntN(len(events))], false); err != nil {
			return err
		}
	}
	records, distinct, err := topicDeliveries(ctx, d.Servers.Brokers, d.Topic, d.Config.Partitions)
	if err != nil {
		return fmt.Errorf("read %s back: %w", d.Topic, err)
	}
	d.Say("fault: gateway restarted (SIGTERM, pid %d now); %d past deliveries redelivered by hand: %d written to Kafka again, %d answered from the idempotency store",
		d.Gateway.PID(), n, (records-distinct)-(d.result.Records-d.result.Distinct), d.Provider.Replayed.Load()-replayedBefore)
	return nil
}

// awaitExact waits until the processors have checkpointed every record in
// Kafka and ClickHouse then holds exactly what the providers sent, and fails
// at once on a duplicate, or with the gap after a timeout. Requiring the
// checkpoints first means a replay still pending after the last kill cannot
// add a duplicate after the verdict.
func (d *Pipeline) awaitExact(ctx context.Context, events []Delivery) error {
	want := Expect(events)
	deadline := time.Now().Add(ConvergeTimeout())
	for {
		var gap []string
		lag, lagErr := CheckpointLag(ctx, d.Servers.Brokers, d.Topic, d.Config.Partitions, d.Supervisor.Joined())
		got, err := Observe(ctx, d.Servers.ClickHouseAddr, d.DB)
		if err == nil {
			gap = Diff(want, got)
			if len(gap) == 0 && lagErr == nil && lag == 0 {
				d.Say("every Kafka record checkpointed; ClickHouse: normalized_events %d rows = %d distinct events sent; %d employee-hours exact in employee_metrics_hourly (materialized view) and employee_metrics_window FINAL (merged PRs, review comments, reviews and their average latency, deployments, incidents); deployments FINAL %d and incidents FINAL %d exact",
					got.Rows, want.Events, len(want.Metrics), want.DeploymentsTotal, want.IncidentsTotal)
				return d.CheckDeadLetters(ctx)
			}
			if got.Rows > uint64(want.Events) {
				return fmt.Errorf("DUPLICATES in ClickHouse:\n  %s", Summarize(gap))
			}
			if len(gap) == 0 {
				gap = []string{fmt.Sprintf("exact, but %d records not yet checkpointed (%v)", lag, lagErr)}
			}
		} else {
			gap = []string{err.Error()}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if os.Getenv("PIPELINE_DUMP") != "" {
				d.Supervisor.Signal(syscall.SIGQUIT) // the processors' goroutines, to see where they stall
				time.Sleep(time.Second)
			}
			return fmt.Errorf("ClickHouse did not converge to the expected result (Kafka holds %d records):\n  %s",
				kafkaRecords(ctx, d.Servers.Brokers, d.Topic, d.Config.Partitions), Summarize(gap))
		}
		if os.Getenv("PIPELINE_GAP") != "" { // say what is still missing, every half second

			d.Say("gap: %s", Summarize(gap))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ConvergeTimeout bounds the wait for ClickHouse to hold the expected result
// once every event was delivered (PIPELINE_CONVERGE overrides it).
func ConvergeTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PIPELINE_CONVERGE")); err == nil {
		return d
	}
	return 3 * time.Minute
}

// keyStore returns the gateway's flags for its idempotency store: keys in
// the gateway's memory, lost when it restarts, or in one Redis that
// outlives the gateways (REDIS_ADDR, or an embedded redis-server), under a
// prefix of this run's.
func keyStore(ctx context.Context, kind string) (args []string, name string, closeFn func(), err error) {
	switch kind {
	case "memory":
		return []string{"-store=memory"}, "memory", func() {}, nil
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
		prefix := fmt.Sprintf("demo:%d:", time.Now().UnixNano())
		return []string{"-store=redis", "-redis=" + addr, "-redis-prefix=" + prefix}, "Redis at " + addr, stop, nil
	default:
		return nil, "", nil, fmt.Errorf("-store %q: want memory or redis", kind)
	}
}
