package kafkasource_test

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// testGroup is g under the protocol the suite runs with: g itself, or g
// with the Protocol testkit.EnvGroupProtocol names.
func testGroup(t testing.TB, g kafkasource.Group) kafkasource.Group {
	t.Helper()
	switch testkit.GroupProtocol(t) {
	case "consumer":
		g.Protocol = kafkasource.ProtocolConsumer
	case "auto":
		g.Protocol = kafkasource.ProtocolAuto
	}
	return g
}

// skipUnderConsumerProtocol skips a test that is about the classic
// protocol only when the suite runs under another (consumer, or auto,
// which is the consumer protocol where the broker offers it).
func skipUnderConsumerProtocol(t testing.TB, why string) {
	t.Helper()
	if p := testkit.GroupProtocol(t); p != "classic" {
		t.Skipf("%s=%s: %s", testkit.EnvGroupProtocol, p, why)
	}
}
