package kafkasink_test

import (
	"os"
	"testing"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// envGroupProtocol runs the suite's Sources under another group protocol:
// EXACTLYONCE_GROUP_PROTOCOL=consumer joins every group that testGroup
// builds with kafkasource.ProtocolConsumer (docs/testing.md). It is a
// switch of the tests only; the library reads no such variable.
const envGroupProtocol = "EXACTLYONCE_GROUP_PROTOCOL"

// consumerProtocolRun reports whether the suite runs under the consumer
// group protocol. It fails the test on an unknown value, so that a typo
// does not silently run the classic protocol.
func consumerProtocolRun(t testing.TB) bool {
	t.Helper()
	switch v := os.Getenv(envGroupProtocol); v {
	case "", "classic":
		return false
	case "consumer":
		return true
	default:
		t.Fatalf("%s=%q: want classic or consumer", envGroupProtocol, v)
		return false
	}
}

// testGroup is g under the protocol the suite runs with: g itself, or g
// with Protocol = ProtocolConsumer under the switch. Under the switch it
// skips on Apache Kafka 3.9 ($EXACTLYONCE_KAFKA), which lacks the
// protocol; Apache Kafka 4 and kfake offer it.
func testGroup(t testing.TB, g kafkasource.Group) kafkasource.Group {
	t.Helper()
	if !consumerProtocolRun(t) {
		return g
	}
	if impl := testkit.KafkaImplementation(t); impl == testkit.KafkaApache39 {
		t.Skipf("%s=consumer needs Apache Kafka 4 or kfake (%s=%s)", envGroupProtocol, testkit.EnvKafka, impl)
	}
	g.Protocol = kafkasource.ProtocolConsumer
	return g
}
