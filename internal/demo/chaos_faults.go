package demo

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/segmentio/kafka-go"

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
)

// kafkaKindPrefix names the broker's wire-level faults: "kafka-" and a
// kafkafault.Kind.
const kafkaKindPrefix = "kafka-"

// ChaosKinds lists every fault kind of a chaos run.
func ChaosKinds() []string {
	kinds := []string{KindProcessorKill, KindProcessorKillCheckpoint, KindProcessorKillReplay, KindProcessorKillRebalance,
		KindGatewayKill, KindRedisRestart, KindRedisDown, KindKafkaKill, KindClickHouseKill, KindS3Kill}
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
		if !sleep(ctx, nil, pause) {
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
		pid, ok := d.sup.killOne(c.rng, -1)
		c.kill("processor", ok)
		return ok, fmt.Sprintf("processor pid %d killed", pid)
	case KindProcessorKillCheckpoint:
		return c.killInCheckpoint(ctx)
	case KindProcessorKillReplay:
		return c.killInReplay(ctx, between(50*time.Millisecond, 500*time.Millisecond))
	case KindProcessorKillRebalance:
		return c.killInRebalance(ctx)
	case KindGatewayKill:
		return c.killGateway(ctx)
	case KindRedisRestart, KindRedisDown:
		down := time.Duration(0)
		if kind == KindRedisDown {
			// Longer than the gateway's store timeout (2 s), which its
			// Redis client's own retries can otherwise bridge.
			down = between(2500*time.Millisecond, 4*time.Second)
		}
		failedBefore := d.prov.retries.Load() + d.prov.githubFailed.Load()
		_ = c.redis.Kill()
		c.kill("redis", true)
		sleep(ctx, nil, down)
		err := c.redis.Start(context.WithoutCancel(ctx))
		if kind == KindRedisDown {
			// Hit: deliveries answered 503 (or not at all) because it was
			// down; the answers come up to the store timeout late.
			failed := func() bool { return d.prov.retries.Load()+d.prov.githubFailed.Load() > failedBefore }
			for deadline := time.Now().Add(3 * time.Second); !failed() && time.Now().Before(deadline) && ctx.Err() == nil; {
				time.Sleep(20 * time.Millisecond)
			}
			hit = failed()
			return hit, fmt.Sprintf("Redis down for %v, back empty (%v); %d deliveries failed meanwhile",
				down.Round(time.Millisecond), errOrOK(err), d.prov.retries.Load()+d.prov.githubFailed.Load()-failedBefore)
		}
		return err == nil, fmt.Sprintf("Redis restarted empty (%v)", errOrOK(err))
	case KindKafkaKill:
		c.saveKafkaStats(ctx)
		_ = d.srv.Kafka.Kill()
		c.kill("kafka", true)
		down := between(300*time.Millisecond, 1500*time.Millisecond)
		sleep(ctx, nil, down)
		err := d.srv.Kafka.Start(context.WithoutCancel(ctx))
		return err == nil, fmt.Sprintf("Kafka broker down for %v (%v)", down.Round(time.Millisecond), errOrOK(err))
	case KindClickHouseKill:
		return c.killClickHouse(ctx, between(300*time.Millisecond, 1500*time.Millisecond))
	case KindS3Kill:
		if d.s3 == nil {
			return false, ""
		}
		_ = d.s3.Kill()
		c.kill("s3", true)
		down := between(300*time.Millisecond, 1500*time.Millisecond)
		sleep(ctx, nil, down)
		err := d.s3.Start(context.WithoutCancel(ctx))
		return err == nil, fmt.Sprintf("S3 down for %v (%v)", down.Round(time.Millisecond), errOrOK(err))
	}
	// A wire-level Kafka fault. Its hits are counted by the broker.
	f := kafkafault.Fault{Kind: kafkafault.Kind(strings.TrimPrefix(kind, kafkaKindPrefix)), Count: 1 + c.rng.IntN(3)}
	if f.Kind == kafkafault.Slow {
		f.Delay, f.Duration = between(50*time.Millisecond, 500*time.Millisecond), between(500*time.Millisecond, 2*time.Second)
	}
	if err := d.srv.Kafka.InjectFault(ctx, f); err != nil {
		return false, fmt.Sprintf("not injected: %v", err)
	}
	return true, ""
}

// isWireKind reports whether kind is one of the broker's wire-level faults.
func isWireKind(kind string) bool {
	return strings.HasPrefix(kind, kafkaKindPrefix) && kind != KindKafkaKill
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// kill counts a SIGKILL of service.
func (c *chaos) kill(service string, ok bool) {
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.res.Kills == nil {
		c.res.Kills = map[string]int{}
	}
	c.res.Kills[service]++
}

// killInCheckpoint freezes a random processor at random moments until its
// state directory holds a temporary checkpoint file it did not hold before
// (a write under way), then kills it. After 200 looks it kills it anyway,
// as a miss.
func (c *chaos) killInCheckpoint(ctx context.Context) (bool, string) {
	sup := c.d.sup
	before := c.tempFiles()
	for try := 0; try < 200 && ctx.Err() == nil; try++ {
		cmd := sup.instance(c.rng)
		if cmd == nil {
			sleep(ctx, nil, 50*time.Millisecond)
			continue
		}
		if cmd.Process.Signal(syscall.SIGSTOP) != nil {
			continue
		}
		var fresh string
		for name := range c.tempFiles() {
			if !before[name] {
				fresh = name
				break
			}
		}
		if fresh != "" {
			_ = cmd.Process.Kill()
			sup.kills.Add(1)
			c.kill("processor", true)
			return true, fmt.Sprintf("processor pid %d killed while writing %s (look %d)", cmd.Process.Pid, fresh, try+1)
		}
		_ = cmd.Process.Signal(syscall.SIGCONT)
		sleep(ctx, nil, time.Duration(c.rng.IntN(40))*time.Millisecond)
	}
	pid, ok := sup.killOne(c.rng, -1)
	c.kill("processor", ok)
	return false, fmt.Sprintf("no checkpoint write caught in 200 looks; processor pid %d killed anyway", pid)
}

// tempFiles lists the checkpoint storage's temporary files (named with
// checkpoint's "#" marker) under the processors' state directory.
func (c *chaos) tempFiles() map[string]bool {
	out := map[string]bool{}
	_ = filepath.WalkDir(c.stateDir(), func(path string, e fs.DirEntry, err error) error {
		// "#lock" is the storage's lock file, always there once a
		// directory was written; the rest are writes under way.
		if err == nil && !e.IsDir() && strings.HasPrefix(e.Name(), "#") && e.Name() != "#lock" {
			out[path] = true
		}
		return nil
	})
	return out
}

// killInReplay kills a processor, waits for its restart, and kills the new
// process after after.
func (c *chaos) killInReplay(ctx context.Context, after time.Duration) (bool, string) {
	sup := c.d.sup
	i, pid := sup.pick(c.rng)
	if i < 0 {
		return false, "no processor running"
	}
	sup.killOne(c.rng, i)
	c.kill("processor", true)
	var next *exec.Cmd
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		if next = sup.cmdOf(i); next != nil && next.Process.Pid != pid {
			break
		}
		next = nil
		time.Sleep(5 * time.Millisecond)
	}
	if next == nil {
		return false, fmt.Sprintf("processor pid %d killed; it was not restarted in 10s", pid)
	}
	started := time.Now()
	sleep(ctx, nil, after)
	if sup.cmdOf(i) != next {
		return false, fmt.Sprintf("processor pid %d killed; its successor exited on its own", pid)
	}
	_ = next.Process.Kill()
	sup.kills.Add(1)
	c.kill("processor", true)
	return true, fmt.Sprintf("processor pid %d killed, then its successor pid %d %v after its start (restoring and replaying)",
		pid, next.Process.Pid, time.Since(started).Round(time.Millisecond))
}

// killInRebalance kills a processor so that the group rebalances, then
// kills an instance while DescribeGroups shows the rebalance under way.
func (c *chaos) killInRebalance(ctx context.Context) (bool, string) {
	sup := c.d.sup
	first, ok := sup.killOne(c.rng, -1)
	c.kill("processor", ok)
	client := &kafka.Client{Addr: kafka.TCP(sup.Brokers...), Timeout: 2 * time.Second}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{sup.Group}})
		if err == nil && len(resp.Groups) == 1 {
			// Another process than the one just killed (which the
			// supervisor may not have replaced yet).
			if state := resp.Groups[0].GroupState; state == "PreparingRebalance" || state == "CompletingRebalance" {
				if i, pid := sup.pick(c.rng); i >= 0 && pid != first {
					sup.killOne(c.rng, i)
					c.kill("processor", true)
					return true, fmt.Sprintf("processor pid %d killed, then pid %d while the group was %s", first, pid, state)
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false, fmt.Sprintf("processor pid %d killed; no rebalance seen in 10s", first)
}

// killGateway holds Kafka's answers back, waits until the gateway holds
// claims whose publish has not returned, and kills it there; then starts a
// new gateway, which the providers retry and redeliver to.
func (c *chaos) killGateway(ctx context.Context) (bool, string) {
	c.gwMu.Lock()
	defer c.gwMu.Unlock()
	d := c.d
	if d.srv.Kafka != nil { // your own Kafka answers at its pace: the kill may land between publishes
		_ = d.srv.Kafka.InjectFault(ctx, kafkafault.Fault{Kind: kafkafault.Slow, Delay: time.Second, Duration: 3 * time.Second})
	}
	inFlight := 0.0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		claimed, err1 := d.gw.Counter(ctx, "exactlyonce_idempotency_claims_total", `outcome="claimed"`)
		effects, err2 := d.gw.Counter(ctx, "exactlyonce_idempotency_side_effect_duration_seconds_count")
		if err1 == nil && err2 == nil && claimed > effects {
			inFlight = claimed - effects
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	old := d.gw
	_ = old.cmd.Process.Kill()
	<-old.done
	old.done <- nil // for a later Stop
	c.kill("gateway", true)
	if err := d.startGateway(context.WithoutCancel(ctx), false); err != nil {
		return false, fmt.Sprintf("gateway pid %d killed; restart failed: %v", old.PID(), err)
	}
	d.prov.setBaseURL(d.gw.URL())
	return inFlight > 0, fmt.Sprintf("gateway pid %d killed with %.0f claims between claim and complete; gateway pid %d on %s",
		old.PID(), inFlight, d.gw.PID(), d.gw.URL())
}

// killClickHouse kills ClickHouse as soon as system.processes shows an
// insert (3 s at most), then brings it back after down.
func (c *chaos) killClickHouse(ctx context.Context, down time.Duration) (bool, string) {
	d := c.d
	hit := false
	if conn, err := ch.Dial(ctx, ch.Options{Address: d.srv.ClickHouseAddr, DialTimeout: 2 * time.Second}); err == nil {
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil && !hit; {
			var n proto.ColUInt64
			err := conn.Do(ctx, ch.Query{Body: "SELECT count() FROM system.processes WHERE query_kind = 'Insert'",
				Result: proto.Results{{Name: "count()", Data: &n}}})
			if err != nil {
				break
			}
			hit = n.Rows() == 1 && n.Row(0) > 0
			if !hit {
				time.Sleep(2 * time.Millisecond)
			}
		}
		_ = conn.Close()
	}
	_ = d.srv.ClickHouse.Kill()
	c.kill("clickhouse", true)
	sleep(ctx, nil, down)
	ok := bringUp(context.WithoutCancel(ctx), d.srv.ClickHouse, func(t time.Duration) bool { return sleep(ctx, nil, t) }, c.say)
	state := "during an insert"
	if !hit {
		state = "(no insert seen in 3s)"
	}
	return hit, fmt.Sprintf("ClickHouse killed %s, down for %v, back: %v", state, down.Round(time.Millisecond), ok)
}

// saveKafkaStats adds the broker's wire-fault hits to kafkaBase before a
// kill takes them away.
func (c *chaos) saveKafkaStats(ctx context.Context) {
	if c.d.srv.Kafka == nil {
		return // your own Kafka: no wire faults
	}
	s, err := c.d.srv.Kafka.FaultStats(ctx)
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
	if d.srv.Kafka != nil {
		if err := d.srv.Kafka.Start(ctx); err != nil {
			return err
		}
		if err := d.srv.Kafka.ClearFaults(ctx); err != nil {
			return err
		}
		c.saveKafkaStats(ctx)
	}
	if d.srv.ClickHouse != nil && !bringUp(ctx, d.srv.ClickHouse, func(t time.Duration) bool { return sleep(ctx, nil, t) }, c.say) {
		return ctx.Err()
	}
	if c.redis != nil {
		if err := c.redis.Start(ctx); err != nil {
			return err
		}
	}
	if d.s3 != nil {
		if err := d.s3.Start(ctx); err != nil {
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

// pick returns a running instance and its pid, chosen by rng, or -1.
func (s *Supervisor) pick(rng *rand.Rand) (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var running []int
	for i, cmd := range s.cmds {
		if cmd != nil {
			running = append(running, i)
		}
	}
	if len(running) == 0 {
		return -1, 0
	}
	i := running[rng.IntN(len(running))]
	return i, s.cmds[i].Process.Pid
}

// instance returns a running instance's command, chosen by rng, or nil.
func (s *Supervisor) instance(rng *rand.Rand) *exec.Cmd {
	i, _ := s.pick(rng)
	if i < 0 {
		return nil
	}
	return s.cmdOf(i)
}

// cmdOf returns instance i's running command, or nil.
func (s *Supervisor) cmdOf(i int) *exec.Cmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.cmds) {
		return nil
	}
	return s.cmds[i]
}

// killOne kills instance i (-1: one chosen by rng) with SIGKILL at once,
// unlike Kill, which waits for a stable group first. It returns the pid
// killed.
func (s *Supervisor) killOne(rng *rand.Rand, i int) (int, bool) {
	if i < 0 {
		i, _ = s.pick(rng)
	}
	cmd := s.cmdOf(i)
	if cmd == nil {
		return 0, false
	}
	_ = cmd.Process.Kill()
	s.kills.Add(1)
	return cmd.Process.Pid, true
}
