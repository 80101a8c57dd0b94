package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

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
	// The processors reach ClickHouse through a link that
	// KindClickHouseSlow slows, and read their clock's offset from a file
	// that KindProcessorClockJump writes: only with those kinds.
	chAddr := d.Servers.ClickHouseAddr
	if slices.Contains(c.cfg.Kinds, KindClickHouseSlow) {
		l, err := newSlowLink(chAddr)
		if err != nil {
			return fmt.Errorf("the link to ClickHouse: %w", err)
		}
		c.link, chAddr = l, l.Addr()
		d.Cleanups = append(d.Cleanups, l.Close)
	}
	var clockArgs []string // and the output leg's (KafkaSink)
	if slices.Contains(c.cfg.Kinds, KindProcessorClockJump) {
		if err := os.MkdirAll(filepath.Dir(c.clockFile()), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(c.clockFile(), []byte("0s"), 0o644); err != nil {
			return err
		}
		clockArgs = []string{"-clock-offset-file=" + c.clockFile()}
	}
	if c.cfg.KafkaSink {
		if err := embedded.CreateTopic(ctx, d.Servers.Brokers, c.outTopic(), c.cfg.Partitions); err != nil {
			return fmt.Errorf("the processors' output topic: %w", err)
		}
		clockArgs = append(clockArgs, "-output-topic="+c.outTopic(), "-output-transaction-timeout="+outTxnTimeout.String())
	}
	d.Supervisor = &demo.Supervisor{Say: d.Say, Instances: c.cfg.Instances, SharedGroup: true,
		ConsumerProtocol: c.cfg.GroupProtocol == "consumer",
		Output:           d.ProcessorOutput,
		Group:            "aggregator-" + d.DB, Brokers: d.Servers.Brokers,
		Command: []string{d.Binaries.Processor, "-pipeline=devmetrics", "-listen=127.0.0.1:0",
			"-brokers=" + strings.Join(d.Servers.Brokers, ","), "-topic=" + d.Topic,
			"-clickhouse=" + chAddr, "-database=" + d.DB, "-create-tables=false", "-dlq=" + d.DLQ,
			"-state-dir=" + c.stateDir(),
			// A killed instance is noticed within 2 s (the broker expires
			// it, see StartServers), checkpoints are frequent so that
			// kills land in them.
			"-session-timeout=" + c.sessionTimeout(), "-rebalance-timeout=2s", "-heartbeat-interval=200ms", "-fetch-max-wait=100ms",
			"-sink-max-delay=200ms", "-checkpoint-interval=300ms", d.LogLevel(), "-audit", "-audit-topic=" + d.AuditTopic(),
			"-group-protocol=" + c.cfg.GroupProtocol}}
	s3Args, s3Env, err := d.StartCheckpointStore(ctx)
	if err != nil {
		return err
	}
	d.Supervisor.Command = append(append(d.Supervisor.Command, clockArgs...), s3Args...)
	d.Supervisor.Env = s3Env
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
		if dl.Want != nil {
			c.hist.sent(deliveryKey(dl.Want.Source, dl.Want.EventID))
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
