package kafkasource

import "context"

// Membership is the group membership under which a chain owns its
// partition: what kafkatxn.TxProducer.SendOffsets takes to commit offsets
// in a transaction as that member, which the group coordinator checks.
// Under ProtocolConsumer, Kafka 4.4 refuses such offsets from an unknown
// member id or at an epoch other than the member's current one
// (ILLEGAL_GENERATION), and takes them without any membership (-1 and "").
type Membership struct {
	Group string
	// Generation is the classic protocol's generation id, or under
	// ProtocolConsumer the member's epoch when MembershipOf was called:
	// the epoch moves on with every change of the member's assignment,
	// so ask again before each use.
	Generation int
	Member     string
}

type membershipKey struct{}

// MembershipOf returns the membership of the chain whose context ctx is
// (the context ProcessorFunc and Process receive), and false for any other
// context.
func MembershipOf(ctx context.Context) (Membership, bool) {
	own, ok := ctx.Value(membershipKey{}).(*membership)
	if !ok {
		return Membership{}, false
	}
	gen, member := own.current()
	return Membership{Group: own.group, Generation: gen, Member: member}, true
}

// membership is what MembershipOf reads: the group and a function giving
// the current generation (or epoch) and member id.
type membership struct {
	group   string
	current func() (int, string)
}
