package testenv

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// Kafka returns the bootstrap brokers of a Kafka cluster for this test: the
// ones in $KAFKA_BROKERS if set (shared by all tests, so use Name for topics
// and groups), otherwise a fresh in-process kfake cluster with one broker,
// closed at cleanup.
func Kafka(t testing.TB) []string {
	t.Helper()
	return testkit.Kafka(t)
}

// StartKafka starts a dedicated in-process kfake cluster, closed at cleanup,
// and returns it, so a test can inject faults through Cluster().Control or
// close it. It ignores $KAFKA_BROKERS.
func StartKafka(t testing.TB, opts ...embedded.KafkaOptions) *embedded.Kafka {
	t.Helper()
	var o embedded.KafkaOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	k, err := embedded.StartKafka(o)
	if err != nil {
		unavailable(t, "kafka (kfake)", err)
		return nil
	}
	t.Cleanup(k.Close)
	return k
}

// CreateTopic creates topic with the given number of partitions and waits
// until every partition has a leader. It fails the test on error. Creating
// an existing topic with the same partition count is a no-op.
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int) {
	t.Helper()
	testkit.CreateTopic(t, brokers, topic, partitions)
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
// It ignores $KAFKA_BROKERS: a test that kills a broker needs its own.
// Options, if given, are used with DataDir set to a temporary directory.
func StartKafkaProcess(t testing.TB, opts ...embedded.KafkaProcessOptions) *KafkaServer {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	var o embedded.KafkaProcessOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	o.DataDir = t.TempDir()
	k, err := embedded.StartKafkaProcess(ctx, o)
	if err != nil {
		unavailable(t, "kafka (kfakeserver process)", err)
		return nil
	}
	t.Cleanup(func() { _ = k.Stop() })
	return &KafkaServer{t: t, k: k}
}

// Brokers returns the bootstrap address; it stays the same across Kill and
// Start.
func (s *KafkaServer) Brokers() []string { return s.k.Brokers() }

// Process returns the underlying process handle.
func (s *KafkaServer) Process() *embedded.KafkaProcess { return s.k }

// Kill kills the broker with SIGKILL and waits until it is gone.
func (s *KafkaServer) Kill() {
	s.t.Helper()
	if err := s.k.Kill(); err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}

// Start starts the broker again on the same port and data directory.
func (s *KafkaServer) Start() {
	s.t.Helper()
	ctx, cancel := setupContext(s.t)
	defer cancel()
	if err := s.k.Start(ctx); err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}

// Stop closes the broker cleanly and waits until it is gone.
func (s *KafkaServer) Stop() {
	s.t.Helper()
	if err := s.k.Stop(); err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}
