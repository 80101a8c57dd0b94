package testkit

import (
	"os"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// EnvKafka chooses the Kafka the kit starts when $KAFKA_BROKERS is unset:
// KafkaApache4 (the default), KafkaApache42, KafkaApache40, KafkaApache39
// or KafkaFake.
const EnvKafka = "EXACTLYONCE_KAFKA"

// EnvKafkaTransactionVersion set to 1 or 2 formats the Apache Kafka 4.x
// clusters the kit starts with that transaction.version feature level (1:
// transactions v1, as a cluster upgraded from 3.x keeps them; 2: v2,
// KIP-890). Unset: the release's default, 2 on 4.x. With KafkaApache39
// or KafkaFake it fails the test: they have no level to choose.
const EnvKafkaTransactionVersion = "EXACTLYONCE_KAFKA_TRANSACTION_VERSION"

// The values of $EXACTLYONCE_KAFKA.
const (
	// KafkaApache4 is Apache Kafka 4.4.0 (transactions v2), in KRaft mode,
	// one JVM process per test binary.
	KafkaApache4 = "apache-4"
	// KafkaApache42 is Apache Kafka 4.2.2, the newest 4.2.
	KafkaApache42 = "apache-4.2"
	// KafkaApache40 is Apache Kafka 4.0.2, the newest of the first 4.x
	// line.
	KafkaApache40 = "apache-4.0"
	// KafkaApache39 is Apache Kafka 3.9.2 (transactions v1), the last 3.x
	// line.
	KafkaApache39 = "apache-3.9"
	// KafkaFake is franz-go's kfake, in process, a fresh cluster per test.
	KafkaFake = "kfake"
)

// EnvKafkaCluster set to 1 runs the tests of a three-broker Apache Kafka
// cluster under faults (make test-cluster). make test leaves them out:
// each starts three or four JVMs and restarts brokers, minutes on a loaded
// machine.
const EnvKafkaCluster = "EXACTLYONCE_KAFKA_CLUSTER"

// SkipUnlessKafkaCluster skips the test unless $EXACTLYONCE_KAFKA_CLUSTER
// is 1 (see EnvKafkaCluster), or under -short.
func SkipUnlessKafkaCluster(t testing.TB) {
	t.Helper()
	if testing.Short() || os.Getenv(EnvKafkaCluster) != "1" {
		t.Skipf("a three-broker cluster under faults: %s=1 (make test-cluster) runs it", EnvKafkaCluster)
	}
}

// KafkaImplementation returns the Kafka the kit starts: $EXACTLYONCE_KAFKA,
// or KafkaApache4 when it is unset. It fails the test on an unknown value.
func KafkaImplementation(t testing.TB) string {
	t.Helper()
	v := os.Getenv(EnvKafka)
	switch v {
	case "":
		return KafkaApache4
	case KafkaApache4, KafkaApache42, KafkaApache40, KafkaApache39, KafkaFake:
		return v
	}
	t.Fatalf("testkit: %s=%q: want %s, %s, %s, %s or %s", EnvKafka, v, KafkaApache4, KafkaApache42, KafkaApache40, KafkaApache39, KafkaFake)
	return ""
}

// apacheVersion maps an implementation to its Apache Kafka release.
func apacheVersion(impl string) string {
	switch impl {
	case KafkaApache39:
		return embedded.ApacheKafka39
	case KafkaApache40:
		return embedded.ApacheKafka40
	case KafkaApache42:
		return embedded.ApacheKafka42
	}
	return embedded.ApacheKafka4
}

// KafkaTransactionVersion returns the transaction.version feature level
// the kit formats its Apache Kafka clusters with ($EXACTLYONCE_KAFKA_TRANSACTION_VERSION,
// see EnvKafkaTransactionVersion), 0 for the release's default. It fails
// the test on a value other than 1 or 2, and on a level asked of a 3.x
// broker, which has no transactions v2 to choose from.
func KafkaTransactionVersion(t testing.TB) int {
	t.Helper()
	switch v := os.Getenv(EnvKafkaTransactionVersion); v {
	case "":
		return 0
	case "1", "2":
		if impl := KafkaImplementation(t); impl == KafkaApache39 || impl == KafkaFake {
			t.Fatalf("testkit: %s=%s: only Apache Kafka 4.x (%s is %s) has a transaction.version to choose", EnvKafkaTransactionVersion, v, EnvKafka, impl)
		}
		return int(v[0] - '0')
	default:
		t.Fatalf("testkit: %s=%q: want 1 or 2", EnvKafkaTransactionVersion, v)
		return 0
	}
}

// EnvGroupProtocol runs the Kafka packages' suites with every consumer
// group they build joined under another protocol than the one each test
// names: "consumer" for Kafka's consumer group protocol (KIP-848, make
// test-consumer-protocol), "classic" for the classic one, "auto" or unset
// for kafkasource.ProtocolAuto, the library's default. A switch of the
// tests only, which the library never reads.
const EnvGroupProtocol = "EXACTLYONCE_GROUP_PROTOCOL"

// GroupProtocol returns $EXACTLYONCE_GROUP_PROTOCOL (see EnvGroupProtocol):
// "auto" (also when unset), "classic" or "consumer". It fails the test on
// another value, so that a typo does not silently run the default
// protocol, and under "consumer" skips it on Apache Kafka 3.9, which lacks
// the protocol (Apache Kafka 4 and kfake offer it).
func GroupProtocol(t testing.TB) string {
	t.Helper()
	switch v := os.Getenv(EnvGroupProtocol); v {
	case "", "auto":
		return "auto"
	case "classic":
		return v
	case "consumer":
	default:
		t.Fatalf("testkit: %s=%q: want auto, classic or consumer", EnvGroupProtocol, v)
	}
	if impl := KafkaImplementation(t); impl == KafkaApache39 {
		t.Skipf("testkit: %s=consumer needs Apache Kafka 4 or kfake (%s=%s)", EnvGroupProtocol, EnvKafka, impl)
	}
	return "consumer"
}

// ConsumerGroupProtocol reports whether GroupProtocol is "consumer".
func ConsumerGroupProtocol(t testing.TB) bool {
	t.Helper()
	return GroupProtocol(t) == "consumer"
}
