package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// The chaos run (make chaos, command harness/cmd/chaos) is the demo's
// pipeline under a long randomized schedule of faults: every kind of
// Kinds, drawn at random from the seed, one after another while the
// providers deliver, then the same verdict as the demo, reported as a table
// and as JSON. It reuses the demo's servers, binaries, providers, fake
// GitHub with its redeliverer, supervisor and verification.

// Config is one chaos run. The zero value of every field but Events
// is valid.
type Config struct {
	// Events the providers send. Required.
	Events int
	// Orgs (the partitioning key), Partitions of the topic and processor
	// Instances sharing one consumer group. Defaults: 12, 4, 2.
	Orgs, Partitions, Instances int
	// Duration is the shortest time the deliveries are spread over.
	// Default: 0, as fast as the pipeline takes them (still gated by the
	// faults, see FaultsPerKind).
	Duration time.Duration
	// FaultsPerKind is how many faults of each kind the run injects. The
	// deliveries advance with the faults, so the faults land while data
	// flows. Default: 0, faults are drawn until the deliveries are done.
	FaultsPerKind int
	// FaultInterval is the mean pause between two faults. Default 300ms.
	FaultInterval time.Duration
	// Kinds are the fault kinds to inject. Default: every one of Kinds
	// that the configuration allows (s3-kill needs Checkpoints s3,
	// processor-kill-checkpoint needs fs), processor-rolling-restart on
	// Apache Kafka only.
	Kinds []string
	// Seed of the events and of the fault schedule.
	Seed uint64
	// Checkpoints: fs (default) or s3, as in Config.
	Checkpoints string
	// KafkaSink adds a transactional leg to the processors (the demo
	// build's -output-topic): every record of the topic they process is
	// written again to <topic>_out through a kafkasink.Sink, one Kafka
	// transaction per checkpoint, and the history checks that the output
	// holds each record of the input exactly once. processor-pause-checkpoint
	// then holds a processor past the sink's transaction timeout
	// (OutputTransactionTimeout). Apache Kafka only: kfake, killed with a
	// transaction open, later counts its records into the same producer's
	// next committed transaction (see writeTransactions). Default: off.
	KafkaSink bool
	// Kafka is the embedded broker, as in demo.Config: demo.KafkaFake
	// (the default; the only one with the wire-level fault kinds),
	// demo.KafkaApache or demo.KafkaApache39.
	Kafka string
	// GroupProtocol the processors join their group with: "classic" (the
	// default) or "consumer" (KIP-848; Apache Kafka 4 only, see
	// demo.StartServers for the embedded broker's consumer-group timing).
	GroupProtocol string
	// Dir is the state directory. Default: a new temporary one.
	Dir string
	// LogDir keeps each binary's log at level info, one file per process
	// (demo.Logs), named in the result. Default: Dir/logs when Dir is set,
	// else a new directory under the temporary directory, kept after the
	// run.
	LogDir string
	// JSON is a file the result is written to as JSON. Default: none.
	JSON string
	// History is a file the run's history (package history) is written
	// to, one JSON operation a line, as the run goes. Default: none; a
	// failing run writes it to a file in the temporary directory and
	// names it.
	History string
	// Verbose makes the binaries log warnings.
	Verbose bool
	// Stdout receives the progress line, the fault log and the table.
	// Default os.Stdout.
	Stdout io.Writer
	// Logger receives the harness's own logs. Default: discards.
	Logger *slog.Logger
	// Binaries to run. Default: BuildBinaries into Dir.
	Binaries demo.Binaries
}

// ErrMismatch is wrapped by Run's error when ClickHouse does not
// hold exactly what the providers sent (an event lost or counted twice, a
// metric off).
var ErrMismatch = errors.New("chaos: the pipeline's result differs from the ground truth")

// Run runs the pipeline under randomized faults and returns the
// result. The error is non-nil when the run could not be carried out, or
// wraps ErrMismatch when any figure differs from the ground truth; the
// result is filled as far as the run got either way.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	res := &Result{Seed: cfg.Seed, Events: cfg.Events, Instances: cfg.Instances, Kinds: cfg.Kinds, Transactions: map[string]int{}}
	c := &chaos{cfg: cfg, res: res, began: began, log: map[string]*FaultCount{}, writerFaults: make(chan writerFault)}
	for _, k := range cfg.Kinds {
		c.log[k] = &FaultCount{}
	}
	c.d = &demo.Pipeline{
		Config: demo.Config{Events: cfg.Events, Orgs: cfg.Orgs, Partitions: cfg.Partitions, Instances: cfg.Instances,
			Store: "redis", Seed: cfg.Seed, Dir: cfg.Dir, LogDir: cfg.LogDir, Checkpoints: cfg.Checkpoints, Kafka: cfg.Kafka, Logger: cfg.Logger,
			Stdout: cfg.Stdout, Binaries: cfg.Binaries, Verbose: cfg.Verbose},
		Say: c.say,
		Rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
	}
	c.rng = rand.New(rand.NewPCG(cfg.Seed, 0xc4a05))
	err := c.run(ctx)
	if cerr := c.closeHistory(); cerr != nil && err == nil {
		err = cerr
	}
	if res.Faults == nil {
		c.collectFaults() // the run stopped before verify: say what it injected
	}
	res.Elapsed = time.Since(began)
	if err == nil && !res.Pass {
		err = fmt.Errorf("%w (seed %d)", ErrMismatch, cfg.Seed)
	}
	res.printTable(cfg.Stdout)
	if cfg.JSON != "" {
		if werr := res.writeJSON(cfg.JSON); werr != nil && err == nil {
			err = werr
		}
	}
	fmt.Fprintf(cfg.Stdout, "the binaries' logs: %s\n", cfg.LogDir)
	if err != nil {
		res.Error = err.Error()
		fmt.Fprintf(cfg.Stdout, "FAIL (seed %d, replay with -seed %d): %v\n", cfg.Seed, cfg.Seed, err)
		return res, err
	}
	fmt.Fprintf(cfg.Stdout, "PASS: %d events, %d faults, every event exactly once, every metric exact (seed %d)\n",
		cfg.Events, res.totalFaults(), cfg.Seed)
	return res, nil
}

func (cfg *Config) setDefaults() error {
	if cfg.Events <= 0 {
		return errors.New("chaos: -events must be positive")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Orgs, 12)
	def(&cfg.Partitions, 4)
	def(&cfg.Instances, 2)
	if cfg.Orgs < 0 || cfg.Partitions < 0 || cfg.Instances < 0 || cfg.FaultsPerKind < 0 || cfg.Duration < 0 || cfg.FaultInterval < 0 {
		return errors.New("chaos: counts and durations must not be negative")
	}
	if cfg.FaultInterval == 0 {
		cfg.FaultInterval = 300 * time.Millisecond
	}
	if cfg.Checkpoints == "" {
		cfg.Checkpoints = "fs"
	}
	if cfg.Checkpoints != "fs" && cfg.Checkpoints != "s3" {
		return fmt.Errorf("chaos: -checkpoints %q: want fs or s3", cfg.Checkpoints)
	}
	if cfg.Kafka == "" {
		cfg.Kafka = demo.KafkaFake
	}
	if cfg.KafkaSink && cfg.Kafka == demo.KafkaFake && os.Getenv("KAFKA_BROKERS") == "" {
		return fmt.Errorf("chaos: -kafkasink needs Apache Kafka (-kafka %s, %s or %s, or KAFKA_BROKERS): kfake, killed with a transaction open, later counts its records into the same producer's next committed transaction", demo.KafkaApache, demo.KafkaApache39, demo.KafkaCluster)
	}
	switch cfg.GroupProtocol {
	case "":
		cfg.GroupProtocol = "classic"
	case "classic":
	case "consumer":
		if (cfg.Kafka == demo.KafkaFake || cfg.Kafka == demo.KafkaApache39) && os.Getenv("KAFKA_BROKERS") == "" {
			return fmt.Errorf("chaos: -group-protocol consumer needs Apache Kafka 4 (-kafka %s or %s, or KAFKA_BROKERS): 3.9 lacks the protocol, and the kfake process cannot be given a consumer-group session timeout short enough to notice a killed processor in time", demo.KafkaApache, demo.KafkaCluster)
		}
	default:
		return fmt.Errorf("chaos: -group-protocol %q: want classic or consumer", cfg.GroupProtocol)
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Kinds) == 0 {
		for _, k := range Kinds() {
			if cfg.refuse(k) == nil && (k != KindProcessorRollingRestart || cfg.Kafka != demo.KafkaFake) {
				cfg.Kinds = append(cfg.Kinds, k)
			}
		}
	}
	for _, k := range cfg.Kinds {
		if !slices.Contains(Kinds(), k) {
			return fmt.Errorf("chaos: unknown fault kind %q (kinds: %s)", k, strings.Join(Kinds(), ","))
		}
		if err := cfg.refuse(k); err != nil {
			return err
		}
	}
	switch {
	case cfg.LogDir != "":
	case cfg.Dir != "":
		cfg.LogDir = filepath.Join(cfg.Dir, "logs")
	default:
		dir, err := os.MkdirTemp("", fmt.Sprintf("exactlyonce-chaos-%d-logs-", cfg.Seed))
		if err != nil {
			return err
		}
		cfg.LogDir = dir
	}
	return nil
}

// refuse says why fault kind k cannot run in this configuration: it kills
// or instruments a server the run starts itself, and the environment names
// the user's own instead (that server is used, never killed), or it needs
// the other checkpoint store.
func (cfg *Config) refuse(k string) error {
	if env := ownServerEnv(k); env != "" && os.Getenv(env) != "" {
		return fmt.Errorf("chaos: %s kills or instruments the embedded server, and %s names your own (unset it, or leave %s out of -kinds)", k, env, k)
	}
	switch {
	case k == KindS3Kill && cfg.Checkpoints != "s3":
		return errors.New("chaos: s3-kill needs -checkpoints s3")
	case slices.Contains(clusterKinds, k) && cfg.Kafka != demo.KafkaCluster:
		return fmt.Errorf("chaos: %s needs the three-broker cluster (-kafka %s)", k, demo.KafkaCluster)
	case isWireKind(k) && cfg.Kafka != demo.KafkaFake:
		return fmt.Errorf("chaos: %s is a wire-level fault of kfake's (package kafkafault), and -kafka is %s", k, cfg.Kafka)
	case (k == KindProcessorKillCheckpoint || k == KindProcessorPauseCheckpoint) && cfg.Checkpoints != "fs":
		return fmt.Errorf("chaos: %s needs -checkpoints fs (it looks for the checkpoint's temporary file)", k)
	case k == KindTxnIDExpiry && cfg.Kafka != demo.KafkaFake:
		return fmt.Errorf("chaos: %s needs kfake (-kafka %s): Apache Kafka reads transactional.id.expiration.ms at start-up only, and checks it hourly by default", k, demo.KafkaFake)
	}
	return nil
}

// ownServerEnv is the variable that points the run at the user's own
// server which fault kind k would kill or instrument; "" for kinds that
// only kill the pipeline's own processes.
func ownServerEnv(k string) string {
	switch {
	case k == KindRedisRestart || k == KindRedisDown:
		return "REDIS_ADDR"
	case k == KindTxnIDExpiry: // alters the broker's settings
		return "KAFKA_BROKERS"
	case strings.HasPrefix(k, kafkaKindPrefix): // kafka-kill and the wire faults
		return "KAFKA_BROKERS"
	case k == KindClickHouseKill:
		return "CLICKHOUSE_ADDR"
	case k == KindS3Kill:
		return "S3_ENDPOINT"
	}
	return ""
}

// chaos is one run.
type chaos struct {
	cfg   Config
	res   *Result
	d     *demo.Pipeline
	began time.Time
	rng   *rand.Rand // the fault schedule's; drawn by the fault goroutine only
	hist  *recorder  // the run's history (record.go)

	// writerFaults carries orders to the transactional writer (pauses.go).
	writerFaults chan writerFault
	// link slows the processors' ClickHouse connections
	// (KindClickHouseSlow); nil without that kind.
	link *slowLink
	// clock is the processors' clock offset (KindProcessorClockJump);
	// written by the fault goroutine only.
	clock time.Duration
	burst int // the second writer's bursts so far (writer.go)
	// txnGen numbers the transactional writer's transactional ids
	// (record.go).
	txnGen atomic.Int64

	redis *embedded.Redis // the gateway's key store
	gwMu  sync.Mutex      // held while the gateway is replaced (killGateway, watchGateway)

	mu     sync.Mutex
	log    map[string]*FaultCount
	faults atomic.Int64 // faults done, of every kind
	// strikeStart and lastFault are when the first fault began and the
	// last one ended (unix ns), for faultProgress.
	strikeStart, lastFault atomic.Int64
	delivered              atomic.Int64
	sentAt                 []atomic.Int64 // unix ms of each event's first send, by index
	kafkaBase              map[string]int // wire-fault hits of brokers killed since (their stats die with them)

	statusMu sync.Mutex
	status   string // the live line's fault part
}

func (c *chaos) say(format string, a ...any) {
	line := fmt.Sprintf("[%7.1fs] %s", time.Since(c.began).Seconds(), fmt.Sprintf(format, a...))
	c.mu.Lock()
	defer c.mu.Unlock()
	if isTerminal(c.cfg.Stdout) {
		fmt.Fprintf(c.cfg.Stdout, "\r\033[K%s\n", line)
		return
	}
	fmt.Fprintln(c.cfg.Stdout, line)
}

func (c *chaos) run(ctx context.Context) error {
	d := c.d
	defer func() {
		for i := len(d.Cleanups) - 1; i >= 0; i-- {
			d.Cleanups[i]()
		}
	}()
	c.say("chaos: %d events, %d processor instance(s), fault kinds %s, seed %d", c.cfg.Events, c.cfg.Instances,
		strings.Join(c.cfg.Kinds, ","), c.cfg.Seed)
	if err := d.StartServers(ctx); err != nil {
		return err
	}
	// When each row landed, for the webhook-to-row latency.
	if err := execCH(ctx, d.Servers.ClickHouseAddr, fmt.Sprintf(
		"ALTER TABLE %s.normalized_events ADD COLUMN IF NOT EXISTS chaos_inserted_at DateTime64(3) DEFAULT now64(3)", d.DB)); err != nil {
		return fmt.Errorf("add the insert time column: %w", err)
	}
	if err := c.startPipeline(ctx); err != nil {
		return err
	}
	if err := c.startHistory(ctx); err != nil {
		return err
	}
	examples, err := demo.LoadGitHubExamples(ctx)
	if err != nil {
		return fmt.Errorf("GitHub's example payloads: %w", err)
	}
	tpl, err := demo.PickTemplates(examples)
	if err != nil {
		return err
	}
	if err := d.InjectPoison(ctx); err != nil {
		return err
	}
	events, err := c.deliver(ctx, demo.NewGenerator(d.Rng, tpl, c.cfg.Orgs))
	if err != nil {
		return err
	}
	if err := c.heal(ctx); err != nil {
		return err
	}
	if err := d.AwaitGitHubRecovered(ctx); err != nil {
		return err
	}
	c.res.Sent = int64(len(events))
	c.res.Requests = d.Provider.Requests.Load()
	c.res.Duplicates = d.Provider.Duplicates.Load()
	c.res.Retries = d.Provider.Retries.Load()
	c.res.Replayed = d.Provider.Replayed.Load()
	c.res.Ignored, c.res.Rejected = d.Provider.Ignored.Load(), d.Provider.Rejected.Load()
	if err := c.verify(ctx, events); err != nil {
		return err
	}
	if err := c.checkHistory(ctx); err != nil {
		return err
	}
	// The audit, as `exactlyonce audit` sees the run from the pipeline's
	// own counts: it must agree with the ground truth.
	rep, err := d.RunAudit(ctx, demo.Expect(events))
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		c.res.Pass = false
		c.res.Differences = append(c.res.Differences, err.Error())
	}
	c.res.Audit, c.res.auditTruth = rep, demo.AuditTruth(demo.Expect(events))
	if c.res.Pass {
		if err := d.CheckDeadLetters(ctx); err != nil {
			c.res.Pass = false
			c.res.Differences = append(c.res.Differences, err.Error())
		}
	}
	return nil
}

// execCH runs one statement on ClickHouse.
func execCH(ctx context.Context, addr, query string) error {
	conn, err := ch.Dial(ctx, ch.Options{Address: addr, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Do(ctx, ch.Query{Body: query})
}
