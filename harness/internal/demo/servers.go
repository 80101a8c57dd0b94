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

// The Kafka a run starts (Config.Kafka, -kafka) when KAFKA_BROKERS is
// unset.
const (
	// KafkaFake is kfake in a process of its own, with its log on disk:
	// quick to start and restart, and the only one with wire-level faults
	// (package kafkafault: lost acknowledgements, failed single requests).
	KafkaFake = "kfake"
	// KafkaApache is Apache Kafka 4.4 (KRaft, one node, a JVM), the
	// broker users run; a start or a restart takes 5 to 20 s.
	KafkaApache = "apache"
	// KafkaApache39 is Apache Kafka 3.9, the last 3.x line.
	KafkaApache39 = "apache-3.9"
	// KafkaCluster is three Apache Kafka 4.4 brokers (replication factor
	// 3, min.insync.replicas 2) beside a dedicated KRaft controller, so
	// that brokers killed never take the quorum with them.
	KafkaCluster = "cluster"
)

// Broker is the embedded Kafka broker a run kills with SIGKILL and starts
// again on the same log directory and port.
type Broker interface {
	Kill() error
	Start(ctx context.Context) error
}

// Servers are the servers a run needs: ClickHouse and Kafka, embedded
// unless CLICKHOUSE_ADDR or KAFKA_BROKERS name real ones (which are then
// never killed).
type Servers struct {
	ClickHouseAddr string
	ClickHouse     *embedded.ClickHouse // nil with CLICKHOUSE_ADDR
	Brokers        []string
	// Kafka is the embedded broker, kfake or Apache Kafka; nil with
	// KAFKA_BROKERS.
	Kafka Broker
	// Kfake is Kafka when it is kfake, whose wire-level faults a run
	// injects; nil otherwise (Apache Kafka has no fault hooks).
	Kfake *embedded.KafkaProcess
	// Apache is Kafka when it is Apache Kafka, whose brokers a run may
	// kill one by one; nil otherwise.
	Apache *embedded.ApacheKafka

	stop []func()
}

// StartServers starts the embedded servers with their data under dir: a
// ClickHouse that a watchdog restarts when it exits on its own (as systemd
// would), and a Kafka broker (kafka: KafkaFake, KafkaApache or
// KafkaApache39) in its own process with its log on disk, so either can be
// killed with SIGKILL and come back with what it acknowledged. Stop stops
// them.
func StartServers(ctx context.Context, dir, kafka string, say func(string, ...any)) (*Servers, error) {
	if kafka != KafkaFake && kafka != KafkaApache && kafka != KafkaApache39 && kafka != KafkaCluster {
		return nil, fmt.Errorf("-kafka %q: want %s, %s, %s or %s", kafka, KafkaFake, KafkaApache, KafkaApache39, KafkaCluster)
	}
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
	if kafka != KafkaFake {
		if err := s.startApacheKafka(ctx, dir, kafka, say); err != nil {
			s.Stop()
			return nil, err
		}
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
	s.Kafka, s.Kfake, s.Brokers = k, k, k.Brokers()
	s.stop = append(s.stop, func() { _ = k.Stop() })
	say("Kafka (kfake, pid %d) listening on %s", k.PID(), s.Brokers[0])
	return s, nil
}

// startApacheKafka starts one Apache Kafka node (broker and KRaft
// controller), or with KafkaCluster three brokers and a controller, with
// their logs under dir, at the embedded package's test timing:
// consumer-group sessions down to 100 ms are accepted, a new group's first
// rebalance is not delayed, a dead broker is fenced after 3 s.
func (s *Servers) startApacheKafka(ctx context.Context, dir, kafka string, say func(string, ...any)) error {
	opts := embedded.ApacheKafkaOptions{Version: embedded.ApacheKafka4, Dir: filepath.Join(dir, "kafka"), Progress: os.Stderr,
		// The consumer group protocol's session timeout and heartbeat
		// interval are the broker's (45 s and 5 s by default): at the
		// classic groups' test timing here, so that a processor killed
		// under either protocol is noticed within 2 s. 3.9 ignores them.
		Configs: map[string]string{
			"group.consumer.min.session.timeout.ms":    "1000",
			"group.consumer.session.timeout.ms":        "2000",
			"group.consumer.min.heartbeat.interval.ms": "100",
			"group.consumer.heartbeat.interval.ms":     "200",
		}}
	what := "one node"
	switch kafka {
	case KafkaApache39:
		opts.Version = embedded.ApacheKafka39
	case KafkaCluster:
		opts.Nodes, opts.Controllers = 3, 1
		what = "three brokers and a KRaft controller"
	}
	say("starting Apache Kafka %s (KRaft, %s; the first run fetches its jars with Maven)", opts.Version, what)
	k, err := embedded.StartApacheKafka(ctx, opts)
	if err != nil {
		return fmt.Errorf("start Kafka: %w", err)
	}
	s.Kafka, s.Apache, s.Brokers = k, k, k.Brokers()
	// Killed, not stopped: a clean shutdown takes seconds and the log is
	// thrown away with the run's directory.
	s.stop = append(s.stop, func() { _ = k.Close() })
	say("Kafka (Apache Kafka %s, pid %d) listening on %s", opts.Version, k.Node(1).PID(), strings.Join(s.Brokers, ","))
	return nil
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
