package testkit

import (
	"os"
	"strings"
	"testing"

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
