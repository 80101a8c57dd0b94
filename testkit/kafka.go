package testkit

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Kafka returns the bootstrap brokers of a Kafka cluster for this test: the
// ones in $KAFKA_BROKERS if set (shared by all tests, so name topics and
// groups with Name), otherwise a fresh one-broker cluster inside the test
// binary (franz-go's kfake), closed at cleanup.
func Kafka(t testing.TB) []string {
	t.Helper()
	if v := os.Getenv(EnvKafkaBrokers); v != "" {
		return strings.Split(v, ",")
	}
	k, err := embedded.StartKafka(embedded.KafkaOptions{})
	if err != nil {
		Unavailable(t, "kafka (kfake)", err)
		return nil
	}
	t.Cleanup(k.Close)
	return k.Brokers()
}

// CreateTopic creates topic with the given number of partitions and waits
// until every partition has a leader. Creating a topic that exists with the
// same partition count is a no-op; another count fails the test, as does
// any other error.
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int) {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	if err := embedded.CreateTopic(ctx, brokers, topic, partitions); err != nil {
		t.Fatalf("testkit: %v", err)
	}
}

// KafkaCluster is a dedicated in-process Kafka cluster (franz-go's kfake)
// for one test, for tests that inject faults into the broker.
type KafkaCluster struct {
	k *embedded.Kafka
}

// StartKafka starts a dedicated one-broker kfake cluster for this test,
// closed at cleanup. extra are further kfake options (more brokers, broker
// configs, TLS, kfake's own Control hooks). It ignores $KAFKA_BROKERS: a
// test that injects faults needs its own broker.
func StartKafka(t testing.TB, extra ...kfake.Opt) *KafkaCluster {
	t.Helper()
	k, err := embedded.StartKafka(embedded.KafkaOptions{Extra: extra})
	if err != nil {
		Unavailable(t, "kafka (kfake)", err)
		return nil
	}
	t.Cleanup(k.Close)
	return &KafkaCluster{k: k}
}

// Brokers returns the bootstrap addresses.
func (c *KafkaCluster) Brokers() []string { return c.k.Brokers() }

// Cluster returns the kfake cluster, for fault injection with Control and
// ControlKey.
func (c *KafkaCluster) Cluster() *kfake.Cluster { return c.k.Cluster() }

// Close shuts the cluster down before the test's cleanup does. It is safe
// to call more than once.
func (c *KafkaCluster) Close() { c.k.Close() }

// KafkaProcessOptions configures StartKafkaProcess. The zero value is
// valid.
type KafkaProcessOptions struct {
	// MinSessionTimeout is the smallest consumer-group session timeout the
	// broker accepts, so a test can expire a frozen member quickly.
	// Default: kfake's, 6s.
	MinSessionTimeout time.Duration
	// ExpireMembers makes the broker expire consumer-group members that
	// sent nothing for their session timeout, as Kafka does (kfake alone
	// keeps a member that died while joining). Default: false.
	ExpireMembers bool
}

// KafkaServer is a one-broker kfake cluster in its own process, persisting
// to a per-test directory, for tests that kill Kafka or keep it alive while
// they kill its clients. Its methods fail the test on error, so call them
// from the test's goroutine.
type KafkaServer struct {
	t testing.TB
	k *embedded.KafkaProcess
}

// StartKafkaProcess starts a dedicated broker process for this test,
// stopped at cleanup. Records and committed offsets survive Kill and Start.
// It ignores $KAFKA_BROKERS: a test that kills a broker needs its own. The
// first use on a machine builds the broker program into the cache.
func StartKafkaProcess(t testing.TB, opts ...KafkaProcessOptions) *KafkaServer {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	var o KafkaProcessOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	k, err := embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{
		DataDir:           t.TempDir(),
		MinSessionTimeout: o.MinSessionTimeout,
		ExpireMembers:     o.ExpireMembers,
	})
	if err != nil {
		Unavailable(t, "kafka (kfakeserver process)", err)
		return nil
	}
	t.Cleanup(func() { _ = k.Stop() })
	return &KafkaServer{t: t, k: k}
}

// Brokers returns the bootstrap address; it stays the same across Kill and
// Start.
func (s *KafkaServer) Brokers() []string { return s.k.Brokers() }

// PID returns the broker's process id, 0 while it is down.
func (s *KafkaServer) PID() int { return s.k.PID() }

// Kill kills the broker with SIGKILL and waits until it is gone.
func (s *KafkaServer) Kill() {
	s.t.Helper()
	if err := s.k.Kill(); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}

// Start starts the broker again on the same port and data directory.
func (s *KafkaServer) Start() {
	s.t.Helper()
	ctx, cancel := setupContext(s.t)
	defer cancel()
	if err := s.k.Start(ctx); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}

// Stop closes the broker cleanly and waits until it is gone.
func (s *KafkaServer) Stop() {
	s.t.Helper()
	if err := s.k.Stop(); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}
