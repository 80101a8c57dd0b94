package kafkasink_test

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// testGroup is g under the protocol the suite runs with: g itself, or g
// with Protocol = ProtocolConsumer under testkit.EnvGroupProtocol.
func testGroup(t testing.TB, g kafkasource.Group) kafkasource.Group {
	t.Helper()
	if testkit.ConsumerGroupProtocol(t) {
		g.Protocol = kafkasource.ProtocolConsumer
	}
	return g
}
