package kafkasource

import (
	"fmt"
	"regexp"
	"slices"
)

// Group names the consumer group and what it reads: exactly one of
// Topics and TopicRegex.
type Group struct {
	Brokers []string
	ID      string
	Topics  []string
	// TopicRegex subscribes the group to every topic whose whole name
	// matches it, those created later included: the group coordinator
	// evaluates it (RE2J syntax, Kafka's SubscribedTopicRegex) and
	// assigns a new matching topic's partitions a few seconds after it is
	// created, without a restart. ProtocolConsumer only, on Kafka 4.0 and
	// later (ConsumerGroupHeartbeat v1), or ProtocolAuto where that
	// protocol is offered; New refuses it under ProtocolClassic, whose kafka-go group takes a fixed topic list. Keep
	// the dead-letter topic out of its matches: a chain of the dead-letter
	// topic with a DeadLetter of its own fails with ErrInvalidOptions,
	// rather than read its own dead letters. Default: none.
	TopicRegex string
	// InstanceID makes the Source a static member of the group (Kafka's
	// group.instance.id): one that leaves on a clean stop (Run's context
	// ending) with member epoch -2, and whose partitions the coordinator
	// keeps for it until its session times out (the broker's
	// group.consumer.session.timeout.ms, 45 s by default), so a Source
	// started again with the same InstanceID within that time gets the
	// same partitions back, and no other member's chain stops. Meanwhile
	// those partitions are not read. Every instance of a group needs its
	// own, kept across restarts (a pod name of a StatefulSet). A second
	// Source with an InstanceID that a running one holds is refused; see
	// ErrUnreleasedInstanceID. ProtocolConsumer (or ProtocolAuto where
	// that protocol is offered) only: kafka-go's classic
	// group API cannot send an instance id, so New refuses it under
	// ProtocolClassic. Default: none, a dynamic member, whose partitions
	// move to the other members as soon as it stops.
	InstanceID string
	// Protocol the group is joined with: ProtocolAuto (the default), the
	// consumer protocol where the coordinator takes it and the classic one
	// elsewhere; ProtocolConsumer; or ProtocolClassic.
	Protocol GroupProtocol
}

// validate refuses a Group that names no group or no subscription, or
// one the protocol cannot run.
func (g Group) validate() error {
	switch {
	case len(g.Brokers) == 0:
		return fmt.Errorf("%w: no brokers", ErrInvalidOptions)
	case g.ID == "":
		return fmt.Errorf("%w: empty group ID", ErrInvalidOptions)
	case len(g.Topics) == 0 && g.TopicRegex == "":
		return fmt.Errorf("%w: no topics", ErrInvalidOptions)
	case len(g.Topics) > 0 && g.TopicRegex != "":
		return fmt.Errorf("%w: both Topics and TopicRegex: set one", ErrInvalidOptions)
	case g.Protocol < ProtocolAuto || g.Protocol > ProtocolConsumer:
		return fmt.Errorf("%w: unknown Protocol %d", ErrInvalidOptions, g.Protocol)
	case g.TopicRegex != "" && g.Protocol == ProtocolClassic:
		return fmt.Errorf("%w: TopicRegex needs ProtocolConsumer (the broker evaluates it); kafka-go's classic group takes a topic list",
			ErrInvalidOptions)
	case g.InstanceID != "" && g.Protocol == ProtocolClassic:
		return fmt.Errorf("%w: InstanceID needs ProtocolConsumer: kafka-go's classic ConsumerGroup cannot send a group instance id",
			ErrInvalidOptions)
	case g.InstanceID != "" && !validInstanceID(g.InstanceID):
		return fmt.Errorf("%w: InstanceID %q: Kafka takes at most 249 of the characters a-z, A-Z, 0-9, '.', '_' and '-'",
			ErrInvalidOptions, g.InstanceID)
	case g.TopicRegex != "" && topicRegex(g.TopicRegex) == nil:
		return fmt.Errorf("%w: TopicRegex %q is not a valid regular expression", ErrInvalidOptions, g.TopicRegex)
	}
	return nil
}

// topicRegex compiles a Group.TopicRegex the way the group coordinator
// applies it, to a topic's whole name, or returns nil when it does not
// compile. Go's RE2 and the broker's RE2J take the same syntax but for
// rare corners; a regex only the broker refuses fails Run with its
// INVALID_REGULAR_EXPRESSION.
func topicRegex(expr string) *regexp.Regexp {
	re, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		return nil
	}
	return re
}

// subscribed reports whether topic is one the group reads: one of
// Group.Topics, or a name TopicRegex matches.
func (s *Source) subscribed(topic string) bool {
	if s.topicRegex != nil {
		return s.topicRegex.MatchString(topic)
	}
	return slices.Contains(s.group.Topics, topic)
}

// validInstanceID reports whether Kafka takes id as a group instance id
// (the rule of its JoinGroupRequest.validateGroupInstanceId).
func validInstanceID(id string) bool {
	if id == "" || len(id) > 249 || id == "." || id == ".." {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
