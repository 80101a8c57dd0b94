package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/exactlyonce/exactlyonce/audit"
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
	Kafka string
	Seed  uint64
	Dir   string // state directory; default a new temporary one
	// LogDir keeps each binary's log, at level info, in a file of its own
	// there (gateway.log, processor-0.log, ...; see Logs). Default "": the
	// logs go to the terminal only, at -v's level.
	LogDir      string
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

	logs     *Logs // nil unless Config.LogDir is set
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
