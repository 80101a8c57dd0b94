package kafkawire

import (
	"encoding/binary"
	"time"
)

// API keys and versions of the group requests written here.
const (
	keyMetadata               = 3
	keyOffsetCommit           = 8
	keyConsumerGroupHeartbeat = 68

	// metadataVersion is the first Metadata version that answers topic ids
	// for topic names (v10 and v11 carry the field but leave it unset).
	metadataVersion = 12
	// offsetCommitVersion is the first version a member of a consumer
	// protocol group may commit with: Kafka's coordinator refuses a lower
	// one (UNSUPPORTED_VERSION) for such a member, and reads the
	// generation field as the member epoch.
	offsetCommitVersion = 9
)

// Member epochs with a meaning of their own in a heartbeat.
const (
	EpochJoin        int32 = 0  // join the group (again)
	EpochLeave       int32 = -1 // leave the group
	EpochStaticLeave int32 = -2 // a static member leaves and will come back
)

// TopicPartitions are partitions of one topic, named by its id.
type TopicPartitions struct {
	TopicID    UUID
	Partitions []int32
}

// Heartbeat is a ConsumerGroupHeartbeat request (API key 68, KIP-848). A
// nil field is sent as null, which the coordinator reads as "unchanged
// since the last heartbeat"; a member joining (MemberEpoch 0) sends them
// all.
type Heartbeat struct {
	GroupID     string
	MemberID    string // chosen by the member (required from v1 on)
	MemberEpoch int32
	InstanceID  *string
	RackID      *string
	// RebalanceTimeout is how long the coordinator waits for the member
	// to give up partitions; 0 sends -1 (unchanged).
	RebalanceTimeout time.Duration
	SubscribedTopics []string // nil: unchanged
	SubscribedRegex  *string  // v1 and later; nil: unchanged
	ServerAssignor   *string
	// Owned are the partitions the member owns; nil: unchanged. Owned
	// sets OwnedSet so that an empty, non-nil list is sent as empty.
	Owned    []TopicPartitions
	OwnedSet bool
}

// HeartbeatResponse is the coordinator's answer to a Heartbeat.
type HeartbeatResponse struct {
	ErrorCode         int16
	ErrorMessage      string
	MemberID          string // set when the member joined with epoch 0
	MemberEpoch       int32
	HeartbeatInterval time.Duration
	// Assignment is the member's target assignment when HasAssignment:
	// the partitions it may use now. Without HasAssignment the target did
	// not change.
	Assignment    []TopicPartitions
	HasAssignment bool
}

// appendHeartbeatRequest appends a size-prefixed ConsumerGroupHeartbeat
// request of version v (0 or 1).
func appendHeartbeatRequest(b []byte, v int16, corr int32, clientID string, h *Heartbeat) []byte {
	b = appendFlexibleHeader(b, keyConsumerGroupHeartbeat, v, corr, clientID)
	b = appendCompactString(b, h.GroupID)
	b = appendCompactString(b, h.MemberID)
	b = binary.BigEndian.AppendUint32(b, uint32(h.MemberEpoch))
	b = appendCompactNullableString(b, h.InstanceID)
	b = appendCompactNullableString(b, h.RackID)
	rt := int32(-1)
	if h.RebalanceTimeout > 0 {
		rt = int32(h.RebalanceTimeout.Milliseconds())
	}
	b = binary.BigEndian.AppendUint32(b, uint32(rt))
	if h.SubscribedTopics == nil {
		b = append(b, 0)
	} else {
		b = appendUvarint(b, uint64(len(h.SubscribedTopics))+1)
		for _, t := range h.SubscribedTopics {
			b = appendCompactString(b, t)
		}
	}
	if v >= 1 {
		b = appendCompactNullableString(b, h.SubscribedRegex)
	}
	b = appendCompactNullableString(b, h.ServerAssignor)
	if !h.OwnedSet && h.Owned == nil {
		b = append(b, 0)
	} else {
		b = appendTopicPartitions(b, h.Owned)
	}
	return finishRequest(appendNoTags(b))
}

func appendTopicPartitions(b []byte, tps []TopicPartitions) []byte {
	b = appendUvarint(b, uint64(len(tps))+1)
	for _, tp := range tps {
		b = append(b, tp.TopicID[:]...)
		b = appendInt32s(b, tp.Partitions)
		b = appendNoTags(b)
	}
	return b
}

// parseHeartbeatResponse decodes a ConsumerGroupHeartbeat response body
// (after the correlation id) of version 0 or 1, which have the same
// fields.
func parseHeartbeatResponse(b []byte) (HeartbeatResponse, error) {
	r := responseBody(b)
	var res HeartbeatResponse
	r.int32() // throttle time
	res.ErrorCode = r.int16()
	res.ErrorMessage = r.compactString()
	res.MemberID = r.compactString()
	res.MemberEpoch = r.int32()
	res.HeartbeatInterval = time.Duration(r.int32()) * time.Millisecond
	if r.int8() >= 0 { // a nullable struct: -1 null, 1 present
		res.HasAssignment = true
		res.Assignment = readTopicPartitions(r)
		r.tags()
	}
	r.tags()
	if r.err != nil {
		return HeartbeatResponse{}, r.err
	}
	return res, nil
}

func readTopicPartitions(r *flexReader) []TopicPartitions {
	n := r.length(18)
	if n <= 0 {
		return []TopicPartitions{}
	}
	tps := make([]TopicPartitions, 0, n)
	for range n {
		tp := TopicPartitions{TopicID: r.uuid(), Partitions: r.int32s()}
		r.tags()
		tps = append(tps, tp)
	}
	return tps
}

// OffsetCommit is an OffsetCommit v9 request of a group member: the
// offsets are accepted only from the member MemberID at its current
// MemberEpoch (the classic protocol's generation in a classic group).
type OffsetCommit struct {
	GroupID     string
	MemberID    string
	MemberEpoch int32
	InstanceID  *string
	// Offsets maps topic to partition to the next offset to read.
	Offsets map[string]map[int32]int64
}

// PartitionError is one partition's error code in a response.
type PartitionError struct {
	Topic     string
	Partition int32
	ErrorCode int16
}

func appendOffsetCommitRequest(b []byte, corr int32, clientID string, c *OffsetCommit) []byte {
	b = appendFlexibleHeader(b, keyOffsetCommit, offsetCommitVersion, corr, clientID)
	b = appendCompactString(b, c.GroupID)
	b = binary.BigEndian.AppendUint32(b, uint32(c.MemberEpoch))
	b = appendCompactString(b, c.MemberID)
	b = appendCompactNullableString(b, c.InstanceID)
	b = appendUvarint(b, uint64(len(c.Offsets))+1)
	for _, topic := range sortedKeys(c.Offsets) {
		parts := c.Offsets[topic]
		b = appendCompactString(b, topic)
		b = appendUvarint(b, uint64(len(parts))+1)
		for _, p := range sortedKeys(parts) {
			b = binary.BigEndian.AppendUint32(b, uint32(p))
			b = binary.BigEndian.AppendUint64(b, uint64(parts[p]))
			b = binary.BigEndian.AppendUint32(b, 0xffffffff) // leader epoch: unknown
			b = append(b, 0)                                 // metadata: null
			b = appendNoTags(b)
		}
		b = appendNoTags(b)
	}
	return finishRequest(appendNoTags(b))
}

// parseOffsetCommitResponse returns the partitions of an OffsetCommit v9
// response whose error code is not 0.
func parseOffsetCommitResponse(b []byte) ([]PartitionError, error) {
	r := responseBody(b)
	r.int32() // throttle time
	var errs []PartitionError
	for range max(r.length(2), 0) {
		topic := r.compactString()
		for range max(r.length(7), 0) {
			pe := PartitionError{Topic: topic, Partition: r.int32(), ErrorCode: r.int16()}
			r.tags()
			if pe.ErrorCode != 0 {
				errs = append(errs, pe)
			}
		}
		r.tags()
	}
	r.tags()
	return errs, r.err
}

// TopicMetadata is what a Metadata v12 response says of one topic.
type TopicMetadata struct {
	Name       string
	ID         UUID
	ErrorCode  int16
	Partitions int
}

// appendMetadataRequest appends a Metadata v12 request for topics (all
// topics when nil), with auto-creation off.
func appendMetadataRequest(b []byte, corr int32, clientID string, topics []string) []byte {
	b = appendFlexibleHeader(b, keyMetadata, metadataVersion, corr, clientID)
	if topics == nil {
		b = append(b, 0)
	} else {
		b = appendUvarint(b, uint64(len(topics))+1)
		for _, t := range topics {
			b = append(b, make([]byte, 16)...) // topic id: zero, named instead
			b = appendCompactString(b, t)
			b = appendNoTags(b)
		}
	}
	b = append(b, 0, 0) // no auto-creation, no authorized operations
	return finishRequest(appendNoTags(b))
}

func parseMetadataResponse(b []byte) ([]TopicMetadata, error) {
	r := responseBody(b)
	r.int32() // throttle time
	for range max(r.length(9), 0) {
		r.int32()         // node id
		r.compactString() // host
		r.int32()         // port
		r.compactString() // rack
		r.tags()
	}
	r.compactString() // cluster id
	r.int32()         // controller id
	var topics []TopicMetadata
	for range max(r.length(24), 0) {
		t := TopicMetadata{ErrorCode: r.int16(), Name: r.compactString(), ID: r.uuid()}
		r.int8() // is internal
		t.Partitions = max(r.length(17), 0)
		for range t.Partitions {
			r.int16() // error code
			r.int32() // index
			r.int32() // leader
			r.int32() // leader epoch
			r.int32s()
			r.int32s()
			r.int32s()
			r.tags()
		}
		r.int32() // authorized operations
		r.tags()
		topics = append(topics, t)
	}
	r.tags()
	if r.err != nil {
		return nil, r.err
	}
	return topics, nil
}
