package kafkasource

import "errors"

// GroupProtocol is the consumer group protocol a Source joins its group
// with.
type GroupProtocol int

const (
	// ProtocolAuto joins under ProtocolConsumer where it can and under
	// ProtocolClassic where it cannot: on Kafka 3.x, on 4.x brokers that
	// leave "consumer" out of group.coordinator.rebalance.protocols, and
	// in a classic group the coordinator will not convert (the brokers'
	// group.consumer.migration.policy forbids it, or a member of a
	// release before v0.1.0 is in it, whose kafka-go subscription Kafka
	// cannot parse). It decides when Run joins and keeps the choice until
	// Run returns, so a rolling restart of a classic group moves it to
	// the consumer protocol online once every member runs this release
	// (see the package doc's "The consumer group protocol"). A Group with
	// an InstanceID or a TopicRegex, which only the consumer protocol
	// carries, never falls back: Run fails with ErrNoConsumerProtocol
	// instead. This is the default.
	ProtocolAuto GroupProtocol = iota
	// ProtocolClassic is the classic protocol (JoinGroup, SyncGroup) with
	// eager rebalancing: every rebalance stops the chain of every
	// partition of every instance, and each restores its checkpoint when
	// the assignment comes back.
	ProtocolClassic
	// ProtocolConsumer is Kafka's consumer group protocol (KIP-848, Kafka
	// 4.0 and later): the coordinator assigns the partitions, and a
	// rebalance stops only the chains of partitions that move to another
	// instance; the others go on untouched. The brokers must offer it
	// (group.coordinator.rebalance.protocols includes "consumer", the
	// default on 4.x); Run fails with an error wrapping
	// ErrNoConsumerProtocol otherwise.
	ProtocolConsumer
)

// errClassicGroup is runMember's answer under ProtocolAuto when the
// coordinator will not take the Source as a consumer-protocol member, so
// Run joins under the classic protocol instead.
var errClassicGroup = errors.New("kafkasource: joining under the classic protocol")

// ErrNoConsumerProtocol is wrapped by the error Run returns under
// ProtocolConsumer when the group coordinator does not offer the consumer
// group protocol.
var ErrNoConsumerProtocol = errors.New("kafkasource: the group coordinator does not offer the consumer group protocol (KIP-848)")
