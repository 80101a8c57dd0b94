package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Servers are the servers a run needs: ClickHouse and Kafka, embedded
// unless CLICKHOUSE_ADDR or KAFKA_BROKERS name real ones (which are then
// never killed).
type Servers struct {
	ClickHouseAddr string
	ClickHouse     *embedded.ClickHouse // nil with CLICKHOUSE_ADDR
	Brokers        []string
	Kafka          *embedded.KafkaProcess // nil with KAFKA_BROKERS

	stop []func()
}

// StartServers starts the embedded servers with their data under dir: a
// ClickHouse that a watchdog restarts when it exits on its own (as systemd
// would), and a Kafka broker in its own process with its log on disk, so
// either can be killed with SIGKILL and come back with what it
// acknowledged. Stop stops them.
func StartServers(ctx context.Context, dir string, say func(string, ...any)) (*Servers, error) {
	s := &Servers{}
	if s.ClickHouseAddr = os.Getenv("CLICKHOUSE_ADDR"); s.ClickHouseAddr == "" {
		say("starting ClickHouse 26.7 (clickhouse-local from libchdb.so; the first run downloads it)")
		ch, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{Dir: filepath.Join(dir, "clickhouse")})
		if err != nil {
			return nil, fmt.Errorf("start ClickHouse: %w", err)
		}
		s.ClickHouse, s.ClickHouseAddr = ch, ch.Addr()
		watchCtx, stopWatch := context.WithCancel(context.Background())
		watched := make(chan struct{})
		go func() { defer close(watched); WatchClickHouse(watchCtx, ch, say) }()
		s.stop = append(s.stop, func() { _ = ch.Stop() }, func() { stopWatch(); <-watched })
		say("ClickHouse %s listening on %s", ch.Version(), s.ClickHouseAddr)
	}
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		s.Brokers = strings.Split(env, ",")
		return s, nil
	}
	// ExpireMembers: kfake alone never expires a processor killed while
	// its group rebalances (see kafkafault.ExpireMembers); Kafka does, after
	// the session timeout. A session timeout down to 1s is accepted, so a
	// run can notice a killed processor quickly.
	k, err := embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{DataDir: filepath.Join(dir, "kafka"),
		ExpireMembers: true, MinSessionTimeout: time.Second})
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("start Kafka: %w", err)
	}
	s.Kafka, s.Brokers = k, k.Brokers()
	s.stop = append(s.stop, func() { _ = k.Stop() })
	say("Kafka (kfake, pid %d) listening on %s", k.PID(), s.Brokers[0])
	return s, nil
}

// Stop stops the servers StartServers started, the watchdog first.
func (s *Servers) Stop() {
	for i := len(s.stop) - 1; i >= 0; i-- {
		s.stop[i]()
	}
	s.stop = nil
}

// WatchClickHouse restarts the embedded ClickHouse if it exits on its own, as
// systemd or Kubernetes would, and says why it stopped.
func WatchClickHouse(ctx context.Context, c *embedded.ClickHouse, say func(string, ...any)) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	wait := func(d time.Duration) bool { return Sleep(ctx, nil, d) }
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Crashed(); err != nil {
			say("ClickHouse exited on its own; restarting it: %v", err)
			BringUp(ctx, c, wait, say)
		}
	}
}

// BringUp starts ClickHouse unless it runs, and tries again after a failed
// start (clickhouse-local can abort while it starts) until it serves, wait
// says to give up, or ctx ends. It reports whether ClickHouse serves. The
// fault plan and the watchdog may both call it: one starts the server, the
// other finds it running.
func BringUp(ctx context.Context, c *embedded.ClickHouse, wait func(time.Duration) bool, say func(string, ...any)) bool {
	backoff := 200 * time.Millisecond
	for {
		_, err := c.EnsureRunning(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		say("restart ClickHouse: %v; trying again in %v", err, backoff)
		if !wait(backoff) {
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
