package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
)

// KindProcessorRollingRestart restarts every processor instance in turn,
// as a deployment does weekly: SIGTERM for each but one, chosen at random,
// which gets SIGKILL. After each restart it waits until the group is
// stable again with every instance a member and every partition of the
// topic assigned, and reports how long that took. A round takes a
// rebalance or two per instance, so on kfake, where the default kinds make
// the quick runs (TestChaos), it runs only when -kinds names it.
const KindProcessorRollingRestart = "processor-rolling-restart"

// rollingRestart restarts each instance in turn and says, per instance,
// the time from its stop to a group that consumes every partition again.
func (c *chaos) rollingRestart(ctx context.Context) (bool, string) {
	sup := c.d.Supervisor
	killed := c.rng.IntN(sup.Instances)
	var took []time.Duration
	for i := range sup.Instances {
		// Each restart starts from a settled group, so the time measured
		// is this restart's, not the previous one's tail.
		before, _ := awaitAssigned(ctx, sup, c.d.Topic, c.cfg.Partitions, nil, 30*time.Second)
		sig := syscall.SIGTERM
		if i == killed {
			sig = syscall.SIGKILL
		}
		t0 := time.Now()
		if _, _, err := sup.Restart(ctx, i, sig); err != nil {
			return len(took) > 0, fmt.Sprintf("instance %d not restarted: %v (after %s)", i, err, durations(took))
		}
		if sig == syscall.SIGKILL {
			c.kill("processor", true)
		}
		if _, err := awaitAssigned(ctx, sup, c.d.Topic, c.cfg.Partitions, before, 2*time.Minute); err != nil {
			return len(took) > 0, fmt.Sprintf("instance %d restarted with %v; %v (after %s)", i, sig, err, durations(took))
		}
		took = append(took, time.Since(t0))
	}
	sorted := slices.Clone(took)
	slices.Sort(sorted)
	return true, fmt.Sprintf("%d instances restarted in turn (SIGTERM, instance %d SIGKILL); every partition assigned again after %s (median %v, max %v)",
		sup.Instances, killed, durations(took), sorted[len(sorted)/2].Round(10*time.Millisecond), sorted[len(sorted)-1].Round(10*time.Millisecond))
}

// awaitAssigned waits until the group is Stable with sup.Instances
// members holding all partitions between them and, when before is not
// nil, a member set other than before (the restarted instance rejoined
// under a new member id). It returns the members' ids.
func awaitAssigned(ctx context.Context, sup *demo.Supervisor, topic string, partitions int, before []string, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "no answer"
	for {
		g, err := demo.DescribeGroup(ctx, sup.Brokers, sup.Group, sup.ConsumerProtocol)
		if err == nil {
			ids, assigned := g.IDs(), g.AssignedOf(topic)
			last = fmt.Sprintf("group %s, %d members, %d of %d partitions assigned", g.State, len(ids), assigned, partitions)
			if g.State == "Stable" && len(ids) == sup.Instances && assigned == partitions &&
				(before == nil || !slices.Equal(ids, before)) {
				return ids, nil
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("group not consuming every partition after %v: %s", timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// durations formats restart times for the fault log.
func durations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.Round(10 * time.Millisecond).String()
	}
	return "[" + strings.Join(s, " ") + "]"
}
