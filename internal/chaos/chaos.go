package chaos

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
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/internal/demo"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// The chaos run (make chaos, command internal/cmd/chaos) is the demo's
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
	// Kafka is the embedded broker, as in demo.Config: demo.KafkaFake
	// (the default; the only one with the wire-level fault kinds),
	// demo.KafkaApache or demo.KafkaApache39.
	Kafka string
	// Dir is the state directory. Default: a new temporary one.
	Dir string
	// JSON is a file the result is written to as JSON. Default: none.
	JSON string
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
	res := &Result{Seed: cfg.Seed, Events: cfg.Events, Instances: cfg.Instances, Kinds: cfg.Kinds}
	c := &chaos{cfg: cfg, res: res, began: began, log: map[string]*FaultCount{}}
	for _, k := range cfg.Kinds {
		c.log[k] = &FaultCount{}
	}
	c.d = &demo.Pipeline{
		Config: demo.Config{Events: cfg.Events, Orgs: cfg.Orgs, Partitions: cfg.Partitions, Instances: cfg.Instances,
			Store: "redis", Seed: cfg.Seed, Dir: cfg.Dir, Checkpoints: cfg.Checkpoints, Kafka: cfg.Kafka, Logger: cfg.Logger,
			Stdout: cfg.Stdout, Binaries: cfg.Binaries, Verbose: cfg.Verbose},
		Say: c.say,
		Rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
	}
	c.rng = rand.New(rand.NewPCG(cfg.Seed, 0xc4a05))
	err := c.run(ctx)
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
	case k == KindProcessorKillCheckpoint && cfg.Checkpoints != "fs":
		return errors.New("chaos: processor-kill-checkpoint needs -checkpoints fs (it looks for the checkpoint's temporary file)")
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

// startPipeline starts Redis, the gateway (keys in Redis) and the
// supervised processors in one consumer group.
func (c *chaos) startPipeline(ctx context.Context) error {
	d := c.d
	redisAddr, redisSays := os.Getenv("REDIS_ADDR"), "your Redis"
	if redisAddr == "" {
		r, err := embedded.StartRedis(ctx, embedded.RedisOptions{})
		if err != nil {
			return fmt.Errorf("start Redis: %w", err)
		}
		c.redis = r
		d.Cleanups = append(d.Cleanups, func() { _ = r.Stop() })
		redisAddr, redisSays = r.Addr(), fmt.Sprintf("Redis (pid %d)", r.PID())
	}
	d.GatewayArgs = []string{"-pipeline=devmetrics", "-brokers=" + strings.Join(d.Servers.Brokers, ","), "-topic=" + d.Topic,
		"-retry-after=1s", "-pending-ttl=8s", d.LogLevel(), "-store=redis", "-redis=" + redisAddr,
		"-redis-prefix=chaos:" + d.DB + ":", // this run's keys only, on a shared server too
		"-audit-topic=" + d.AuditTopic()}
	d.GatewayEnv = []string{"GITHUB_WEBHOOK_SECRET=" + demo.WebhookSecret, "JIRA_WEBHOOK_SECRET=" + demo.WebhookSecret}
	if err := d.StartGateway(ctx, false); err != nil {
		return err
	}
	c.say("gateway (examples/gateway, pid %d) on %s, idempotency keys in %s at %s", d.Gateway.PID(), d.Gateway.URL(), redisSays, redisAddr)
	// Jira's 30-minute retry window is compressed less than in the demo:
	// the faults are not compressed, and a random schedule can keep the
	// gateway failing for tens of seconds (six Redis outages and four
	// gateway kills in 45 s of a 1 M-event run outlasted 36 s).
	d.Provider = &demo.Provider{Client: &http.Client{Timeout: 10 * time.Second}, BaseURL: d.Gateway.URL(), DupRate: 0.05,
		JiraWindow: 5 * time.Minute}
	if err := d.StartGitHub(ctx); err != nil {
		return err
	}
	d.Supervisor = &demo.Supervisor{Say: d.Say, Instances: c.cfg.Instances, SharedGroup: true,
		Group: "aggregator-" + d.DB, Brokers: d.Servers.Brokers,
		Command: []string{d.Binaries.Processor, "-pipeline=devmetrics", "-listen=127.0.0.1:0",
			"-brokers=" + strings.Join(d.Servers.Brokers, ","), "-topic=" + d.Topic,
			"-clickhouse=" + d.Servers.ClickHouseAddr, "-database=" + d.DB, "-create-tables=false", "-dlq=" + d.DLQ,
			"-state-dir=" + c.stateDir(),
			// A killed instance is noticed within 2 s (the broker expires
			// it, see StartServers), checkpoints are frequent so that
			// kills land in them.
			"-session-timeout=" + c.sessionTimeout(), "-rebalance-timeout=2s", "-heartbeat-interval=200ms", "-fetch-max-wait=100ms",
			"-sink-max-delay=200ms", "-checkpoint-interval=300ms", d.LogLevel(), "-audit", "-audit-topic=" + d.AuditTopic()}}
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

// sessionTimeout is the processors' consumer-group session: 2 s on the
// embedded broker, which allows it; Kafka refuses less than its
// group.min.session.timeout.ms, 6 s by default.
func (c *chaos) sessionTimeout() string {
	if c.d.Servers.Kafka == nil {
		return "6s"
	}
	return "2s"
}

func (c *chaos) stateDir() string { return filepath.Join(c.d.Dir, "processor", "state") }

// deliver sends every event through the providers while the fault
// goroutine strikes, and returns the events without their bodies (what the
// verdict needs). The deliveries advance no faster than Duration allows
// and, with FaultsPerKind, no faster than the faults.
func (c *chaos) deliver(ctx context.Context, g *demo.Generator) ([]demo.Delivery, error) {
	d, n := c.d, c.cfg.Events
	c.sentAt = make([]atomic.Int64, n)
	events := make([]demo.Delivery, n)
	dups := make([]bool, n)
	for i := range dups {
		dups[i] = d.Rng.Float64() < d.Provider.DupRate
	}
	faultCtx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); c.strike(faultCtx) }()
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); c.watchGateway(watchCtx) }()
	defer func() { stopWatch(); <-watchDone }()
	defer func() { stopFaults(); <-faultsDone }()
	progressCtx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); c.progress(progressCtx) }()
	defer func() { stopProgress(); <-progressDone }()

	var (
		deliverErr error
		errOnce    sync.Once
		wg         sync.WaitGroup
	)
	type job struct {
		i  int
		dl demo.Delivery
	}
	jobs := make(chan job, 64)
	for range 16 {
		wg.Go(func() {
			for j := range jobs {
				c.sentAt[j.i].Store(time.Now().UnixMilli())
				if err := d.Provider.Deliver(ctx, j.dl, dups[j.i]); err != nil {
					errOnce.Do(func() { deliverErr = err })
					continue
				}
				c.delivered.Add(1)
			}
		})
	}
	c.say("delivering %d webhooks of %d organisations (%v of event time) while faults strike", n, c.cfg.Orgs, demo.EventSpan)
	start := time.Now()
	total := c.cfg.FaultsPerKind * len(c.cfg.Kinds)
	for i := range n {
		dl := g.Nth(i, n, demo.EventSpan)
		// Pace: not before Duration*i/n, not ahead of the faults.
		if c.cfg.Duration > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(c.cfg.Duration) * float64(i) / float64(n)))); wait > 0 {
				if !demo.Sleep(ctx, nil, wait) {
					break
				}
			}
		}
		for total > 0 && float64(i)/float64(n) > c.faultProgress(total)+0.002 && ctx.Err() == nil {
			if faultsFinished(faultsDone) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		select {
		case jobs <- job{i, dl}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		events[i] = demo.Delivery{Provider: dl.Provider, ID: dl.ID, Want: dl.Want, Reject: dl.Reject} // no body: 1M of them would not fit
	}
	close(jobs)
	wg.Wait()
	// Let the faults reach their count (they no longer wait for data).
	if total > 0 {
		for c.faults.Load() < int64(total) && ctx.Err() == nil && !faultsFinished(faultsDone) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	stopFaults()
	<-faultsDone
	if deliverErr != nil {
		return events, deliverErr
	}
	if err := ctx.Err(); err != nil {
		return events, err
	}
	c.say("delivered: %d requests for %d webhooks (%d duplicate deliveries, %d retries after 503 or no answer, %d answered from the idempotency store)",
		d.Provider.Requests.Load(), c.delivered.Load(), d.Provider.Duplicates.Load(), d.Provider.Retries.Load(), d.Provider.Replayed.Load())
	return events, nil
}

// faultProgress is the share of the fault schedule done, counting the
// fault under way by the time it has taken against the mean so far, so that
// deliveries flow during each fault rather than in bursts between them.
func (c *chaos) faultProgress(total int) float64 {
	done := c.faults.Load()
	start := c.strikeStart.Load()
	if start == 0 {
		return 0
	}
	now := time.Now().UnixNano()
	mean := float64(now-start) / float64(max(done, 1))
	if done == 0 {
		mean = float64(time.Second)
	}
	part := min(float64(now-c.lastFault.Load())/mean, 1)
	return (float64(done) + part) / float64(total)
}

// watchGateway restarts the gateway when it exits on its own, as a service
// manager would, and says why it stopped (the runs found gateways dying
// with no word while servers around them were killed).
func (c *chaos) watchGateway(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.gwMu.Lock()
		gw := c.d.Gateway
		if exited, err := gw.Exited(); exited {
			c.mu.Lock()
			c.res.GatewayExits++
			c.mu.Unlock()
			c.say("gateway pid %d exited on its own (%v); restarting it", gw.PID(), err)
			if serr := c.d.StartGateway(context.WithoutCancel(ctx), false); serr != nil {
				c.say("restart the gateway: %v", serr)
			} else {
				c.d.Provider.SetBaseURL(c.d.Gateway.URL())
			}
		}
		c.gwMu.Unlock()
	}
}

func faultsFinished(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// progress keeps the live line up to date until ctx ends.
func (c *chaos) progress(ctx context.Context) {
	tty := isTerminal(c.cfg.Stdout)
	every := 10 * time.Second
	if tty {
		every = 500 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := int64(0)
		for i := range c.sentAt {
			if c.sentAt[i].Load() != 0 {
				sent++
			}
		}
		line := fmt.Sprintf("[%7.1fs] events %d/%d sent, %d accepted; faults %d; %s", time.Since(c.began).Seconds(),
			sent, c.cfg.Events, c.delivered.Load(), c.faults.Load(), c.statusLine())
		c.mu.Lock()
		if tty {
			fmt.Fprintf(c.cfg.Stdout, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(c.cfg.Stdout, line)
		}
		c.mu.Unlock()
	}
}

func (c *chaos) statusLine() string {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	return c.status
}

func (c *chaos) setStatus(s string) {
	c.statusMu.Lock()
	c.status = s
	c.statusMu.Unlock()
}

// isTerminal reports whether w is a terminal (for the live line).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
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
