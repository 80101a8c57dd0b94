package chaos

import (
	"context"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

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
	sup := c.d.Supervisor
	before := c.tempFiles()
	for try := 0; try < 200 && ctx.Err() == nil; try++ {
		cmd := sup.Instance(c.rng)
		if cmd == nil {
			demo.Sleep(ctx, nil, 50*time.Millisecond)
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
			sup.KillProcess(cmd)
			c.kill("processor", true)
			return true, fmt.Sprintf("processor pid %d killed while writing %s (look %d)", cmd.Process.Pid, fresh, try+1)
		}
		_ = cmd.Process.Signal(syscall.SIGCONT)
		demo.Sleep(ctx, nil, time.Duration(c.rng.IntN(40))*time.Millisecond)
	}
	pid, ok := sup.KillOne(c.rng, -1)
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
	sup := c.d.Supervisor
	i, pid := sup.Pick(c.rng)
	if i < 0 {
		return false, "no processor running"
	}
	sup.KillOne(c.rng, i)
	c.kill("processor", true)
	var next *exec.Cmd
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		if next = sup.CmdOf(i); next != nil && next.Process.Pid != pid {
			break
		}
		next = nil
		time.Sleep(5 * time.Millisecond)
	}
	if next == nil {
		return false, fmt.Sprintf("processor pid %d killed; it was not restarted in 10s", pid)
	}
	started := time.Now()
	demo.Sleep(ctx, nil, after)
	if sup.CmdOf(i) != next {
		return false, fmt.Sprintf("processor pid %d killed; its successor exited on its own", pid)
	}
	sup.KillProcess(next)
	c.kill("processor", true)
	return true, fmt.Sprintf("processor pid %d killed, then its successor pid %d %v after its start (restoring and replaying)",
		pid, next.Process.Pid, time.Since(started).Round(time.Millisecond))
}

// killInRebalance kills a processor so that the group rebalances, then
// kills an instance while DescribeGroups shows the rebalance under way.
func (c *chaos) killInRebalance(ctx context.Context) (bool, string) {
	sup := c.d.Supervisor
	first, ok := sup.KillOne(c.rng, -1)
	c.kill("processor", ok)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		g, err := demo.DescribeGroup(ctx, sup.Brokers, sup.Group, sup.ConsumerProtocol)
		// Another process than the one just killed (which the supervisor
		// may not have replaced yet).
		if err == nil && g.Rebalancing() {
			if i, pid := sup.Pick(c.rng); i >= 0 && pid != first {
				sup.KillOne(c.rng, i)
				c.kill("processor", true)
				return true, fmt.Sprintf("processor pid %d killed, then pid %d while the group was %s", first, pid, g.State)
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
	if d.Servers.Kfake != nil { // Apache Kafka and yours answer at their pace: the kill may land between publishes
		_ = d.Servers.Kfake.InjectFault(ctx, kafkafault.Fault{Kind: kafkafault.Slow, Delay: time.Second, Duration: 3 * time.Second})
	}
	inFlight := 0.0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		claimed, err1 := d.Gateway.Counter(ctx, "exactlyonce_idempotency_claims_total", `outcome="claimed"`)
		effects, err2 := d.Gateway.Counter(ctx, "exactlyonce_idempotency_side_effect_duration_seconds_count")
		if err1 == nil && err2 == nil && claimed > effects {
			inFlight = claimed - effects
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	old := d.Gateway
	old.Kill()
	c.kill("gateway", true)
	if err := d.StartGateway(context.WithoutCancel(ctx), false); err != nil {
		return false, fmt.Sprintf("gateway pid %d killed; restart failed: %v", old.PID(), err)
	}
	d.Provider.SetBaseURL(d.Gateway.URL())
	return inFlight > 0, fmt.Sprintf("gateway pid %d killed with %.0f claims between claim and complete; gateway pid %d on %s",
		old.PID(), inFlight, d.Gateway.PID(), d.Gateway.URL())
}

// killClickHouse kills ClickHouse as soon as system.processes shows an
// insert (3 s at most), then brings it back after down.
func (c *chaos) killClickHouse(ctx context.Context, down time.Duration) (bool, string) {
	d := c.d
	hit := false
	if conn, err := ch.Dial(ctx, ch.Options{Address: d.Servers.ClickHouseAddr, DialTimeout: 2 * time.Second}); err == nil {
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
	_ = d.Servers.ClickHouse.Kill()
	c.kill("clickhouse", true)
	demo.Sleep(ctx, nil, down)
	ok := demo.BringUp(context.WithoutCancel(ctx), d.Servers.ClickHouse, func(t time.Duration) bool { return demo.Sleep(ctx, nil, t) }, c.say)
	state := "during an insert"
	if !hit {
		state = "(no insert seen in 3s)"
	}
	return hit, fmt.Sprintf("ClickHouse killed %s, down for %v, back: %v", state, down.Round(time.Millisecond), ok)
}
