package testenv

import (
	"os"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Kafka returns the bootstrap brokers of a Kafka cluster for this test: the
// ones in $KAFKA_BROKERS if set (shared by all tests, so use Name for topics
// and groups), otherwise a fresh in-process kfake cluster with one broker,
// closed at cleanup.
func Kafka(t testing.TB) []string {
	t.Helper()
	if v := os.Getenv(EnvKafkaBrokers); v != "" {
		return strings.Split(v, ",")
	}
	return StartKafka(t).Brokers()
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
	}
	t.Cleanup(k.Close)
	return k
}

// CreateTopic creates topic with the given number of partitions and waits
// until every partition has a leader. It fails the test on error. Creating
// an existing topic with the same partition count is a no-op.
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int) {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	if err := embedded.CreateTopic(ctx, brokers, topic, partitions); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}
