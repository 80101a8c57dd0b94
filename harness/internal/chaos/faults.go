package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

// The fault kinds of a chaos run. Each kill is a SIGKILL; a killed server
// is started again on the same port and data (Redis: empty, as a Redis
// without persistence comes back).
const (
	// KindProcessorKill kills a processor instance at a random moment.
	KindProcessorKill = "processor-kill"
	// KindProcessorKillCheckpoint kills a processor while it writes a
	// checkpoint: the instance is frozen (SIGSTOP) at random moments until
	// its state directory holds a checkpoint file being written (a new
	// temporary file), then killed.
	KindProcessorKillCheckpoint = "processor-kill-checkpoint"
	// KindProcessorKillReplay kills a processor, then kills the restarted
	// instance again within half a second of its start, while it restores
	// its checkpoint and replays its sink journals.
	KindProcessorKillReplay = "processor-kill-replay"
	// KindProcessorKillRebalance kills a processor, then kills an
	// instance while the consumer group rebalances (seen through
	// DescribeGroups).
	KindProcessorKillRebalance = "processor-kill-rebalance"
	// KindGatewayKill kills the gateway between claim and complete: Kafka
	// answers are held back until the gateway's metrics show claims whose
	// publish has not returned, then the gateway is killed and restarted;
	// the providers retry and redeliver.
	KindGatewayKill = "gateway-kill"
	// KindRedisRestart kills Redis and starts it again at once, empty.
	KindRedisRestart = "redis-restart"
	// KindRedisDown kills Redis and starts it again, empty, after 2.5 to
	// 4 s, while the gateway answers 503.
	KindRedisDown = "redis-down"
	// KindKafkaKill kills the broker and starts it again after 0.3 to
	// 1.5 s on the same log directory.
	KindKafkaKill = "kafka-kill"
	// KindClickHouseKill kills ClickHouse during an insert (one seen in
	// system.processes) and starts it again after 0.3 to 1.5 s.
	KindClickHouseKill = "clickhouse-kill"
	// KindS3Kill kills the S3 server holding the checkpoints and starts
	// it again after 0.3 to 1.5 s (Checkpoints s3).
	KindS3Kill = "s3-kill"

	// The kinds of a three-broker cluster (Kafka demo.KafkaCluster).

	// KindKafkaBrokerKill kills one broker at random and starts it again
	// after 0.3 to 1.5 s: the partitions it led elect new leaders, the
	// coordinators it held move.
	KindKafkaBrokerKill = "kafka-broker-kill"
	// KindKafkaISRDown kills two of the three brokers and starts them
	// again 4 to 6 s later: once the controller fences them (3 s) every
	// ISR is below min.insync.replicas, and the gateway must answer 503.
	KindKafkaISRDown = "kafka-isr-down"
	// KindKafkaRollingRestart restarts every broker in turn, each with
	// SIGTERM, as a deployment's rolling restart does.
	KindKafkaRollingRestart = "kafka-rolling-restart"
)

// clusterKinds are the kinds only a cluster has.
var clusterKinds = []string{KindKafkaBrokerKill, KindKafkaISRDown, KindKafkaRollingRestart}

// kafkaKindPrefix names the broker's wire-level faults: "kafka-" and a
// kafkafault.Kind.
const kafkaKindPrefix = "kafka-"

// Kinds lists every fault kind of a chaos run.
func Kinds() []string {
	kinds := []string{KindProcessorKill, KindProcessorKillCheckpoint, KindProcessorKillReplay, KindProcessorKillRebalance, KindProcessorRollingRestart,
		KindGatewayKill, KindRedisRestart, KindRedisDown, KindKafkaKill, KindClickHouseKill, KindS3Kill}
	kinds = append(kinds, newKinds...)
	kinds = append(kinds, clusterKinds...)
	for _, k := range kafkafault.Kinds() {
		kinds = append(kinds, kafkaKindPrefix+string(k))
	}
	return kinds
}

// strike injects faults one after another, a random pause apart, until
// ctx ends or, with FaultsPerKind, every kind reached its count.
func (c *chaos) strike(ctx context.Context) {
	now := time.Now().UnixNano()
	c.strikeStart.Store(now)
	c.lastFault.Store(now)
	for ctx.Err() == nil {
		kind := c.pick()
		if kind == "" {
			return
		}
		c.setStatus("fault: " + kind)
		hit, what := c.do(ctx, kind)
		if ctx.Err() != nil && what == "" {
			return
		}
		c.mu.Lock()
		fc := c.log[kind]
		fc.Injected++
		if hit {
			fc.Hit++
		}
		c.mu.Unlock()
		c.faults.Add(1)
		c.lastFault.Store(time.Now().UnixNano())
		if what != "" {
			c.say("fault %d: %s: %s", c.faults.Load(), kind, what)
		}
		c.setStatus("last: " + kind)
		pause := time.Duration(c.rng.ExpFloat64() * float64(c.cfg.FaultInterval))
		if !demo.Sleep(ctx, nil, pause) {
			return
		}
	}
}

// pick draws the next kind among those still short of FaultsPerKind.
func (c *chaos) pick() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var open []string
	for _, k := range c.cfg.Kinds {
		if c.cfg.FaultsPerKind == 0 || c.log[k].Injected < c.cfg.FaultsPerKind {
			open = append(open, k)
		}
	}
	if len(open) == 0 {
		return ""
	}
	return open[c.rng.IntN(len(open))]
}

// do injects one fault of kind and reports whether it hit the joint it
// aims at, and what it did.
func (c *chaos) do(ctx context.Context, kind string) (hit bool, what string) {
	d := c.d
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(c.rng.Int64N(int64(hi-lo))) }
	switch kind {
	case KindProcessorKill:
		pid, ok := d.Supervisor.KillOne(c.rng, -1)
		c.kill("processor", ok)
		return ok, fmt.Sprintf("processor pid %d killed", pid)
	case KindProcessorKillCheckpoint:
		return c.killInCheckpoint(ctx)
	case KindProcessorKillReplay:
		return c.killInReplay(ctx, between(50*time.Millisecond, 500*time.Millisecond))
	case KindProcessorKillRebalance:
		return c.killInRebalance(ctx)
	case KindProcessorRollingRestart:
		return c.rollingRestart(ctx)
	case KindGatewayKill:
		return c.killGateway(ctx)
	case KindRedisRestart, KindRedisDown:
		down := time.Duration(0)
		if kind == KindRedisDown {
			// Longer than the gateway's store timeout (2 s), which its
			// Redis client's own retries can otherwise bridge.
			down = between(2500*time.Millisecond, 4*time.Second)
		}
		failedBefore := d.Provider.Retries.Load() + d.Provider.GitHubFailed.Load()
		_ = c.redis.Kill()
		c.kill("redis", true)
		demo.Sleep(ctx, nil, down)
		err := c.redis.Start(context.WithoutCancel(ctx))
		if kind == KindRedisDown {
			// Hit: deliveries answered 503 (or not at all) because it was
			// down; the answers come up to the store timeout late.
			failed := func() bool { return d.Provider.Retries.Load()+d.Provider.GitHubFailed.Load() > failedBefore }
			for deadline := time.Now().Add(3 * time.Second); !failed() && time.Now().Before(deadline) && ctx.Err() == nil; {
				time.Sleep(20 * time.Millisecond)
			}
			hit = failed()
			return hit, fmt.Sprintf("Redis down for %v, back empty (%v); %d deliveries failed meanwhile",
				down.Round(time.Millisecond), errOrOK(err), d.Provider.Retries.Load()+d.Provider.GitHubFailed.Load()-failedBefore)
		}
		return err == nil, fmt.Sprintf("Redis restarted empty (%v)", errOrOK(err))
	case KindKafkaKill:
		c.saveKafkaStats(ctx)
		_ = d.Servers.Kafka.Kill()
		c.kill("kafka", true)
		down := between(300*time.Millisecond, 1500*time.Millisecond)
		demo.Sleep(ctx, nil, down)
		err := d.Servers.Kafka.Start(context.WithoutCancel(ctx))
		return err == nil, fmt.Sprintf("Kafka broker down for %v (%v)", down.Round(time.Millisecond), errOrOK(err))
	case KindKafkaBrokerKill, KindKafkaISRDown, KindKafkaRollingRestart:
		return c.clusterFault(ctx, kind, between)
	case KindClickHouseKill:
		return c.killClickHouse(ctx, between(300*time.Millisecond, 1500*time.Millisecond))
	case KindProcessorPause, KindProcessorPauseCheckpoint:
		return c.pauseProcessor(ctx, kind == KindProcessorPauseCheckpoint, between)
	case KindTxnWriterPause:
		return c.pauseWriter(ctx, between)
	case KindTxnIDExpiry:
		return c.expireTxnID(ctx)
	case KindClickHouseSlow:
		return c.slowClickHouse(ctx, between)
	case KindClickHouseWriter:
		return c.writeBeside(ctx)
	case KindProcessorClockJump:
		return c.jumpClock(ctx)
	case KindS3Kill:
		if d.S3 == nil {
			return false, ""
		}
		_ = d.S3.Kill()
		c.kill("s3", true)
		down := between(300*time.Millisecond, 1500*time.Millisecond)
		demo.Sleep(ctx, nil, down)
		err := d.S3.Start(context.WithoutCancel(ctx))
		return err == nil, fmt.Sprintf("S3 down for %v (%v)", down.Round(time.Millisecond), errOrOK(err))
	}
	// A wire-level Kafka fault. Its hits are counted by the broker.
	f := kafkafault.Fault{Kind: kafkafault.Kind(strings.TrimPrefix(kind, kafkaKindPrefix)), Count: 1 + c.rng.IntN(3)}
	if f.Kind == kafkafault.Slow {
		f.Delay, f.Duration = between(50*time.Millisecond, 500*time.Millisecond), between(500*time.Millisecond, 2*time.Second)
	}
	if d.Servers.Kfake == nil { // refused by ChaosConfig.refuse; never reached
		return false, "not injected: the broker is not kfake"
	}
	if err := d.Servers.Kfake.InjectFault(ctx, f); err != nil {
		return false, fmt.Sprintf("not injected: %v", err)
	}
	return true, ""
}

// isWireKind reports whether kind is one of the broker's wire-level faults.
func isWireKind(kind string) bool {
	return strings.HasPrefix(kind, kafkaKindPrefix) && kind != KindKafkaKill && !slices.Contains(clusterKinds, kind)
}

// clusterFault strikes one of the cluster's kinds (refused by
// Config.refuse unless the run has the cluster).
func (c *chaos) clusterFault(ctx context.Context, kind string, between func(lo, hi time.Duration) time.Duration) (bool, string) {
	d := c.d
	k := d.Servers.Apache
	brokers := k.Nodes()[:len(k.Brokers())] // the dedicated controller last, never killed
	start := func(n *embedded.KafkaNode) error { return n.Start(context.WithoutCancel(ctx)) }
	switch kind {
	case KindKafkaBrokerKill:
		n := brokers[c.rng.IntN(len(brokers))]
		_ = n.Kill()
		c.kill("kafka", true)
		down := between(300*time.Millisecond, 1500*time.Millisecond)
		demo.Sleep(ctx, nil, down)
		t0 := time.Now()
		err := start(n)
		return err == nil, fmt.Sprintf("broker %d killed, started again after %v, serving %v later (%v)",
			n.ID(), down.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), errOrOK(err))
	case KindKafkaISRDown:
		i := c.rng.IntN(len(brokers))
		down := []*embedded.KafkaNode{brokers[i], brokers[(i+1)%len(brokers)]}
		failedBefore := d.Provider.Retries.Load() + d.Provider.GitHubFailed.Load()
		for _, n := range down {
			_ = n.Kill()
			c.kill("kafka", true)
		}
		wait := between(4*time.Second, 6*time.Second)
		demo.Sleep(ctx, nil, wait)
		failed := d.Provider.Retries.Load() + d.Provider.GitHubFailed.Load() - failedBefore
		var errs []error
		for _, n := range down {
			errs = append(errs, start(n))
		}
		err := errors.Join(errs...)
		// Hit: deliveries refused (503) while the ISR was below
		// min.insync.replicas.
		return failed > 0 && err == nil, fmt.Sprintf("brokers %d and %d down for %v, %d deliveries refused meanwhile (%v)",
			down[0].ID(), down[1].ID(), wait.Round(time.Millisecond), failed, errOrOK(err))
	default: // KindKafkaRollingRestart
		t0 := time.Now()
		var errs []error
		for _, n := range brokers {
			if err := n.Stop(); err != nil {
				errs = append(errs, err)
			}
			errs = append(errs, start(n))
		}
		err := errors.Join(errs...)
		return err == nil, fmt.Sprintf("%d brokers restarted in turn (SIGTERM) in %v (%v)", len(brokers), time.Since(t0).Round(time.Millisecond), errOrOK(err))
	}
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// saveKafkaStats adds the broker's wire-fault hits to kafkaBase before a
// kill takes them away.
func (c *chaos) saveKafkaStats(ctx context.Context) {
	if c.d.Servers.Kfake == nil {
		return // Apache Kafka or yours: no wire faults
	}
	s, err := c.d.Servers.Kfake.FaultStats(ctx)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kafkaBase == nil {
		c.kafkaBase = map[string]int{}
	}
	for k, n := range s {
		c.kafkaBase[kafkaKindPrefix+string(k)] += n.Hits
	}
}

// heal ends every fault once the deliveries are done: Kafka's faults are
// cleared, every server and the gateway run.
func (c *chaos) heal(ctx context.Context) error {
	d := c.d
	// Your own servers (nil here) were never killed.
	if d.Servers.Kafka != nil {
		if err := d.Servers.Kafka.Start(ctx); err != nil {
			return err
		}
		if d.Servers.Kfake != nil {
			if err := d.Servers.Kfake.ClearFaults(ctx); err != nil {
				return err
			}
		}
		c.saveKafkaStats(ctx)
	}
	if d.Servers.ClickHouse != nil && !demo.BringUp(ctx, d.Servers.ClickHouse, func(t time.Duration) bool { return demo.Sleep(ctx, nil, t) }, c.say) {
		return ctx.Err()
	}
	if c.redis != nil {
		if err := c.redis.Start(ctx); err != nil {
			return err
		}
	}
	if d.S3 != nil {
		if err := d.S3.Start(ctx); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, fc := range c.log {
		if isWireKind(k) {
			fc.Hit = c.kafkaBase[k]
		}
	}
	return nil
}
