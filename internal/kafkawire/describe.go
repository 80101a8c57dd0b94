package kafkawire

import (
	"context"
)

const keyConsumerGroupDescribe = 69

// GroupDescription is what a ConsumerGroupDescribe v0 response (KIP-848)
// says of a group under the consumer group protocol.
type GroupDescription struct {
	ErrorCode       int16
	ErrorMessage    string
	State           string // Empty, Assigning, Reconciling, Stable, Dead
	GroupEpoch      int32
	AssignmentEpoch int32
	Members         []MemberDescription
}

// MemberDescription is one member of a described group.
type MemberDescription struct {
	MemberID    string
	MemberEpoch int32
	// Assigned is how many partitions the member owns now, Target how many
	// its target assignment gives it.
	Assigned, Target int
	// AssignedByTopic is Assigned by topic name.
	AssignedByTopic map[string]int
}

// Describe asks the coordinator for the group (ConsumerGroupDescribe v0).
// A group that is not a consumer-protocol group is answered with an error
// code (GROUP_ID_NOT_FOUND), which the caller reads.
func (c *GroupConn) Describe(ctx context.Context) (GroupDescription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.connect(ctx); err != nil {
		return GroupDescription{}, err
	}
	c.corr++
	c.req = appendDescribeRequest(c.req[:0], c.corr, c.clientID(), c.GroupID)
	b, err := c.exchange(ctx)
	if err != nil {
		return GroupDescription{}, err
	}
	d, err := parseDescribeResponse(b)
	if err != nil || coordinatorMoved(d.ErrorCode) {
		c.closeLocked()
	}
	return d, err
}

func appendDescribeRequest(b []byte, corr int32, clientID, group string) []byte {
	b = appendFlexibleHeader(b, keyConsumerGroupDescribe, 0, corr, clientID)
	b = appendUvarint(b, 2)
	b = appendCompactString(b, group)
	b = append(b, 0) // no authorized operations
	return finishRequest(appendNoTags(b))
}

// parseDescribeResponse decodes a ConsumerGroupDescribe v0 response of one
// group.
func parseDescribeResponse(b []byte) (GroupDescription, error) {
	r := responseBody(b)
	r.int32() // throttle time
	var d GroupDescription
	n := r.length(20)
	if n != 1 && r.err == nil {
		r.fail("groups")
	}
	for range max(n, 0) {
		d = GroupDescription{ErrorCode: r.int16(), ErrorMessage: r.compactString()}
		r.compactString() // group id
		d.State = r.compactString()
		d.GroupEpoch, d.AssignmentEpoch = r.int32(), r.int32()
		r.compactString() // assignor
		for range max(r.length(30), 0) {
			m := MemberDescription{MemberID: r.compactString()}
			r.compactString() // instance id
			r.compactString() // rack id
			m.MemberEpoch = r.int32()
			r.compactString() // client id
			r.compactString() // client host
			for range max(r.length(1), 0) {
				r.compactString() // subscribed topic
			}
			r.compactString() // subscribed regex
			m.AssignedByTopic = map[string]int{}
			m.Assigned = describedPartitions(r, m.AssignedByTopic)
			m.Target = describedPartitions(r, nil)
			r.tags()
			d.Members = append(d.Members, m)
		}
		r.int32() // authorized operations
		r.tags()
	}
	r.tags()
	if r.err != nil {
		return GroupDescription{}, r.err
	}
	return d, nil
}

// describedPartitions reads an Assignment struct and returns how many
// partitions it holds; byTopic, if not nil, gets them by topic name.
func describedPartitions(r *flexReader, byTopic map[string]int) int {
	n := 0
	for range max(r.length(18), 0) {
		r.uuid()
		topic := r.compactString()
		k := len(r.int32s())
		n += k
		if byTopic != nil {
			byTopic[topic] += k
		}
		r.tags()
	}
	r.tags()
	return n
}
