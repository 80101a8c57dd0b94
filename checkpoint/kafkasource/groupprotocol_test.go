package kafkasource_test

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// testGroup is g under the protocol the suite runs with: g itself (the
// default, ProtocolAuto), or g with the Protocol testkit.EnvGroupProtocol
// names.
func testGroup(t testing.TB, g kafkasource.Group) kafkasource.Group {
	t.Helper()
	switch testkit.GroupProtocol(t) {
	case "consumer":
		g.Protocol = kafkasource.ProtocolConsumer
	case "classic":
		g.Protocol = kafkasource.ProtocolClassic
	}
	return g
}
