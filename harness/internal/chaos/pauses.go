package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
)

// The fault kinds of issue #41: pauses past a timeout, a slow
// co-participant, another writer, clock jumps and transactional id expiry.
const (
	// KindProcessorPause freezes a processor (SIGSTOP) for longer than the
	// consumer group's session timeout, then continues it (SIGCONT): its
	// partitions move to the other instance meanwhile, and the process
	// wakes up as a zombie that still believes it owns them. Hit: the
	// group dropped the frozen member before it was continued.
	KindProcessorPause = "processor-pause"
	// KindProcessorPauseCheckpoint freezes a processor while it writes a
	// checkpoint (its state directory holds a new temporary checkpoint
	// file, as for processor-kill-checkpoint), keeps it frozen past the
	// session timeout, then continues it: the checkpoint's save finishes
	// after another instance took the partition over. The demo's pipeline
	// has no Kafka transaction (no kafkasink), so this is the processor's
	// pause "past the transaction timeout": past every timeout that lets
	// another owner in. Hit: caught writing, and its member dropped.
	// Checkpoints fs only.
	KindProcessorPauseCheckpoint = "processor-pause-checkpoint"
	// KindTxnWriterPause holds the run's transactional writer (record.go)
	// between its last produce and its commit for longer than its
	// transaction timeout, so that the broker aborts the transaction
	// under it; then the writer commits. Hit: the commit failed. A commit
	// that succeeds there while the broker aborted is a lost write, which
	// the history's checker reports.
	KindTxnWriterPause = "txn-writer-pause"
	// KindTxnIDExpiry makes the broker expire the transactional writer's
	// transactional id: transactional.id.expiration.ms is set to 500 ms,
	// the writer stays idle (no transaction open) until ListTransactions
	// no longer shows its id or 3 s passed, the setting is restored, and
	// the writer goes on with its producer, whose id the broker forgot
	// (INVALID_PRODUCER_ID_MAPPING). Hit: the id was seen expired. kfake
	// only: Apache Kafka reads the setting at start-up, and its check runs
	// hourly by default.
	KindTxnIDExpiry = "txn-id-expiry"
	// KindClickHouseSlow slows the processors' link to ClickHouse (a
	// proxy in front of it) by 100 ms to 1 s each way for 2 to 5 s: the
	// sinks' inserts, which each checkpoint's asynchronous part awaits,
	// outlast several checkpoint intervals. Hit: requests crossed the
	// slowed link.
	KindClickHouseSlow = "clickhouse-slow"
	// KindClickHouseWriter has another writer insert 20 to 200 blocks of
	// 1 to 20 rows into normalized_events (and so its views:
	// employee_metrics_hourly, deployments, incidents) and into
	// employee_metrics_window, while the processors insert: the sinks'
	// deduplication windows and lost-part checks see another writer's
	// blocks and block numbers. Its rows have organisations starting with
	// demo.OtherWriterOrg, which the verdict and the audit leave out. Hit:
	// the processors inserted rows during the burst.
	KindClickHouseWriter = "clickhouse-second-writer"
	// KindProcessorClockJump moves the processors' wall clock (the
	// checkpoints', the sinks' and the window operator's processing
	// clock, through the demo build's -clock-offset-file) to a new offset
	// between -10 and +10 minutes, forward or back. Hit: a processor that
	// ran at the jump was still running 300 ms later (it read the file
	// every 100 ms).
	KindProcessorClockJump = "processor-clock-jump"
)

// newKinds are the kinds of this file, in Kinds' order.
var newKinds = []string{KindProcessorPause, KindProcessorPauseCheckpoint, KindTxnWriterPause, KindTxnIDExpiry,
	KindClickHouseSlow, KindClickHouseWriter, KindProcessorClockJump}

// sessionTimeoutDuration is the processors' session timeout.
func (c *chaos) sessionTimeoutDuration() time.Duration {
	d, _ := time.ParseDuration(c.sessionTimeout())
	return d
}

// groupMembers returns the consumer group's member ids, nil on an error.
func (c *chaos) groupMembers(ctx context.Context) []string {
	sup := c.d.Supervisor
	g, err := demo.DescribeGroup(ctx, c.d.Servers.Brokers, sup.Group, sup.ConsumerProtocol)
	if err != nil {
		return nil
	}
	return g.IDs()
}

// holdFrozen keeps a frozen processor stopped for hold, watching the
// group; it reports whether a member left the group meanwhile (the frozen
// one expired) and after how long. The members it watches are stable, the
// group seen just before the freeze, or better a snapshot asked half a
// session timeout into the freeze and answered before three quarters of
// it, when the frozen member cannot have expired yet: a member that was
// leaving anyway (the group in flux after another fault) is gone by then
// and does not count. A later answer does not replace them: at load 80,
// with a 2 s session timeout, the snapshot came after the frozen member
// was fenced, so it never saw it leave and reported the fault as missed.
// A coordinator slow to expire the member (two freezes of 8.7 s over a
// 6 s session timeout went unseen in one CI run) keeps the process frozen
// longer, up to twice hold: the fault is the member dropped while frozen,
// not a given length.
func (c *chaos) holdFrozen(ctx context.Context, hold time.Duration, stable []string) (bool, time.Duration) {
	start := time.Now()
	deadline, limit := start.Add(hold), start.Add(2*hold)
	timeout := c.sessionTimeoutDuration()
	before := stable
	for time.Now().Before(limit) && (time.Now().Before(deadline) || ctx.Err() == nil) {
		time.Sleep(100 * time.Millisecond)
		asked := time.Since(start)
		now := c.groupMembers(ctx)
		if now == nil {
			continue
		}
		if time.Since(start) < timeout*3/4 {
			if asked >= timeout/2 {
				before = now
			}
			continue
		}
		for _, m := range before {
			if !slices.Contains(now, m) {
				left := time.Since(start)
				// Frozen for the whole hold all the same, even when ctx
				// ends: the caller continues the process right after.
				demo.Sleep(context.WithoutCancel(ctx), nil, time.Until(deadline))
				return true, left
			}
		}
	}
	return false, time.Since(start)
}

// pauseProcessor freezes a processor past the session timeout and
// continues it; inCheckpoint first waits for a checkpoint write as
// killInCheckpoint does.
func (c *chaos) pauseProcessor(ctx context.Context, inCheckpoint bool, between func(lo, hi time.Duration) time.Duration) (bool, string) {
	sup := c.d.Supervisor
	timeout := c.sessionTimeoutDuration()
	if inCheckpoint && c.cfg.KafkaSink {
		// Past the output leg's transaction timeout too, and the broker's
		// abort of it.
		timeout = max(timeout, outTxnTimeout+c.txnAbortDelay())
	}
	hold := timeout + between(time.Second, 3*time.Second)
	// Every instance a member first: one restarted by an earlier fault
	// may still be starting (restoring its chain) and not have joined,
	// and freezing it drops no member (two freezes of 15 s and 17 s over a
	// 6 s session timeout "kept every member" in a CI rehearsal).
	stable, err := awaitAssigned(ctx, sup, c.d.Topic, c.cfg.Partitions, nil, 30*time.Second)
	if err != nil {
		c.cfg.Logger.Info("chaos: pausing a processor before every instance is a member", "err", err)
	}
	tmp := c.tempFiles()
	for try := 0; try < 200 && ctx.Err() == nil; try++ {
		cmd := sup.Instance(c.rng)
		if cmd == nil {
			demo.Sleep(ctx, nil, 50*time.Millisecond)
			continue
		}
		if cmd.Process.Signal(syscall.SIGSTOP) != nil {
			continue
		}
		fresh := ""
		if inCheckpoint {
			for name := range c.tempFiles() {
				if !tmp[name] {
					fresh = filepath.Base(name)
					break
				}
			}
			if fresh == "" {
				_ = cmd.Process.Signal(syscall.SIGCONT)
				demo.Sleep(ctx, nil, time.Duration(c.rng.IntN(40))*time.Millisecond)
				continue
			}
		}
		frozenAt := time.Now()
		expired, after := c.holdFrozen(ctx, hold, stable)
		_ = cmd.Process.Signal(syscall.SIGCONT) // a process killed meanwhile ignores it
		frozen := time.Since(frozenAt).Round(time.Millisecond)
		what := fmt.Sprintf("processor pid %d frozen for %v (session timeout %v), continued", cmd.Process.Pid,
			frozen, c.sessionTimeout())
		if inCheckpoint {
			what = fmt.Sprintf("processor pid %d frozen while writing %s (look %d) for %v (session timeout %v), continued",
				cmd.Process.Pid, fresh, try+1, frozen, c.sessionTimeout())
			if c.cfg.KafkaSink {
				what += fmt.Sprintf(" (the output leg's transaction timeout %v)", outTxnTimeout)
			}
		}
		if expired {
			what += fmt.Sprintf("; its member left the group after %v", after.Round(100*time.Millisecond))
		} else {
			what += "; the group kept every member"
		}
		return expired, what
	}
	return false, "no checkpoint write caught in 200 looks; nothing frozen"
}

// writerFault is an order to the transactional writer, taken between two
// transactions.
type writerFault struct {
	// idle: wait this long, no transaction open, before the next one.
	idle time.Duration
	// beforeCommit: hold the next transaction this long between its last
	// produce and its commit (it commits, whatever the draw).
	beforeCommit time.Duration
	// done receives the next transaction's outcome.
	done chan error
}

// orderWriter hands f to the writer and returns the outcome of the
// transaction that followed.
func (c *chaos) orderWriter(ctx context.Context, f writerFault) (taken bool, outcome error) {
	f.done = make(chan error, 1)
	select {
	case c.writerFaults <- f:
	case <-ctx.Done():
		return false, nil
	case <-time.After(30 * time.Second):
		return false, nil
	}
	select {
	case err := <-f.done:
		return true, err
	case <-ctx.Done():
		return false, nil
	case <-time.After(f.idle + f.beforeCommit + time.Minute):
		return false, nil
	}
}

// txnAbortDelay is how long after its timeout the broker aborts a
// transaction at the latest: kfake at once, Apache Kafka on its check every
// transaction.abort.timed.out.transaction.cleanup.interval.ms (10 s).
func (c *chaos) txnAbortDelay() time.Duration {
	if c.d.Servers.Kfake != nil {
		return 0
	}
	return 10 * time.Second
}

func (c *chaos) pauseWriter(ctx context.Context, between func(lo, hi time.Duration) time.Duration) (bool, string) {
	hold := txnTimeout + c.txnAbortDelay() + between(500*time.Millisecond, 2*time.Second)
	ok, err := c.orderWriter(ctx, writerFault{beforeCommit: hold})
	switch {
	case !ok:
		return false, "the transactional writer did not take the order"
	case err != nil:
		return true, fmt.Sprintf("transactional writer held %v before its commit (transaction timeout %v): the commit failed: %v",
			hold.Round(time.Millisecond), txnTimeout, err)
	}
	return false, fmt.Sprintf("transactional writer held %v before its commit (transaction timeout %v): the commit succeeded (the history checks its records)",
		hold.Round(time.Millisecond), txnTimeout)
}

// expireTxnID shortens the broker's transactional.id.expiration.ms, keeps
// the writer idle until its id is gone, restores the setting and lets the
// writer go on.
func (c *chaos) expireTxnID(ctx context.Context) (bool, string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.d.Servers.Brokers...))
	if err != nil {
		return false, "not injected: " + err.Error()
	}
	defer cl.Close()
	setExpiration := func(v string) error {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType = kmsg.ConfigResourceTypeBroker
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value = "transactional.id.expiration.ms", kmsg.StringPtr(v)
		res.Configs = append(res.Configs, cfg)
		req.Resources = append(req.Resources, res)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && len(resp.Resources) == 1 && resp.Resources[0].ErrorCode != 0 {
			err = fmt.Errorf("error code %d", resp.Resources[0].ErrorCode)
		}
		return err
	}
	listed := func() (bool, error) {
		resp, err := kmsg.NewPtrListTransactionsRequest().RequestWith(ctx, cl)
		if err != nil {
			return false, err
		}
		for _, t := range resp.TransactionStates {
			if t.TransactionalID == c.txnID() {
				return true, nil
			}
		}
		return false, nil
	}
	// The writer idles while the id expires: the order is taken between
	// two transactions, the watch below runs meanwhile.
	idle := 3 * time.Second
	outcome := make(chan error, 1)
	taken := make(chan bool, 1)
	go func() {
		ok, err := c.orderWriter(ctx, writerFault{idle: idle})
		taken <- ok
		outcome <- err
	}()
	if err := setExpiration("500"); err != nil {
		return false, "not injected: transactional.id.expiration.ms: " + err.Error()
	}
	expired := false
	start := time.Now()
	for time.Since(start) < idle && ctx.Err() == nil && !expired {
		time.Sleep(100 * time.Millisecond)
		if there, err := listed(); err == nil && !there {
			expired = true
		}
	}
	restoreErr := setExpiration(strconv.Itoa(7 * 24 * 3600 * 1000)) // Kafka's default
	ok, err := <-taken, <-outcome
	what := fmt.Sprintf("transactional.id.expiration.ms 500 for %v", time.Since(start).Round(100*time.Millisecond))
	if expired {
		what += "; the writer's id expired"
	} else {
		what += "; the writer's id was still listed"
	}
	switch {
	case !ok:
		what += "; the writer did not take the order"
	case err != nil:
		what += fmt.Sprintf("; its next transaction failed: %v", err)
	default:
		what += "; its next transaction committed"
	}
	if restoreErr != nil {
		what += "; restoring the setting failed: " + restoreErr.Error()
	}
	return expired, what
}

// txnID is the transactional writer's current transactional id.
func (c *chaos) txnID() string { return fmt.Sprintf("chaos-writer-%s-%d", c.d.DB, c.txnGen.Load()) }

// slowClickHouse slows the processors' link to ClickHouse for a while.
func (c *chaos) slowClickHouse(ctx context.Context, between func(lo, hi time.Duration) time.Duration) (bool, string) {
	if c.link == nil {
		return false, "not injected: no link in front of ClickHouse"
	}
	delay, period := between(100*time.Millisecond, time.Second), between(2*time.Second, 5*time.Second)
	before := c.link.delayed.Load()
	c.link.setDelay(delay)
	demo.Sleep(ctx, nil, period)
	c.link.setDelay(0)
	n := c.link.delayed.Load() - before
	return n > 0, fmt.Sprintf("ClickHouse %v slower each way for %v: %d chunks toward it held back", delay.Round(time.Millisecond),
		period.Round(time.Millisecond), n)
}

// clockFile is the processors' -clock-offset-file.
func (c *chaos) clockFile() string { return filepath.Join(c.d.Dir, "processor", "clock-offset") }

// jumpClock writes a new clock offset for the processors.
func (c *chaos) jumpClock(ctx context.Context) (bool, string) {
	sup := c.d.Supervisor
	offset := time.Duration(c.rng.Int64N(int64(20*time.Minute))) - 10*time.Minute
	offset = offset.Round(time.Second)
	i, pid := sup.Pick(c.rng)
	tmp := c.clockFile() + ".tmp"
	if err := os.WriteFile(tmp, []byte(offset.String()), 0o644); err != nil {
		return false, "not injected: " + err.Error()
	}
	if err := os.Rename(tmp, c.clockFile()); err != nil {
		return false, "not injected: " + err.Error()
	}
	jump := offset - c.clock
	c.clock = offset
	demo.Sleep(ctx, nil, 300*time.Millisecond)
	hit := i >= 0 && sup.CmdOf(i) != nil && sup.CmdOf(i).Process.Pid == pid
	return hit, fmt.Sprintf("processors' wall clock jumped %+v, now %+v off", jump, offset)
}
