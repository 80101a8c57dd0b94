package kafkawire

import (
	"encoding/binary"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHeartbeatRequestBytes pins the encoding of a joining member's
// ConsumerGroupHeartbeat v1, field by field as Kafka's
// ConsumerGroupHeartbeatRequest.json lays them out.
func TestHeartbeatRequestBytes(t *testing.T) {
	id := UUID{15: 7}
	h := &Heartbeat{GroupID: "g", MemberID: "m", MemberEpoch: 0, RebalanceTimeout: 2 * time.Second,
		SubscribedTopics: []string{"t"}, Owned: []TopicPartitions{{TopicID: id, Partitions: []int32{1, 3}}}}
	got := appendHeartbeatRequest(nil, 1, 9, "c", h)
	want := "" +
		"0000003b" + // size
		"0044" + "0001" + "00000009" + "0001" + "63" + "00" + // key 68, v1, corr 9, client "c", no tags
		"02" + "67" + // group "g"
		"02" + "6d" + // member "m"
		"00000000" + // epoch 0
		"00" + "00" + // instance id, rack id: null
		"000007d0" + // rebalance timeout 2000 ms
		"02" + "02" + "74" + // subscribed topics ["t"]
		"00" + // regex: null (v1)
		"00" + // server assignor: null
		"02" + "00000000000000000000000000000007" + "03" + "00000001" + "00000003" + "00" + // owned
		"00" // tags
	assert.Equal(t, want, hex.EncodeToString(got))

	v0 := appendHeartbeatRequest(nil, 0, 9, "c", &Heartbeat{GroupID: "g", MemberID: "m", MemberEpoch: EpochLeave})
	assert.Equal(t, "0000001e"+"0044"+"0000"+"00000009"+"0001"+"63"+"00"+"0267"+"026d"+"ffffffff"+"00"+"00"+"ffffffff"+"00"+"00"+"00"+"00",
		hex.EncodeToString(v0), "a leave: nulls, no regex field in v0, owned null")

	instance, regex := "i", "r.*"
	static := appendHeartbeatRequest(nil, 1, 9, "c", &Heartbeat{GroupID: "g", MemberID: "m", MemberEpoch: EpochStaticLeave,
		InstanceID: &instance, SubscribedRegex: &regex})
	assert.Equal(t, "00000023"+"0044"+"0001"+"00000009"+"0001"+"63"+"00"+"0267"+"026d"+"fffffffe"+
		"02"+"69"+ // instance id "i"
		"00"+"ffffffff"+"00"+ // rack null, rebalance timeout unchanged, topic names null
		"04"+"722e2a"+ // regex "r.*"
		"00"+"00"+"00", // assignor, owned: null; tags
		hex.EncodeToString(static), "a static member's leave (epoch -2) with its instance id, subscribed by regex")
}

func TestParseHeartbeatResponse(t *testing.T) {
	id := UUID{0: 1, 15: 2}
	b := []byte{0}                           // header tags
	b = binary.BigEndian.AppendUint32(b, 0)  // throttle
	b = binary.BigEndian.AppendUint16(b, 0)  // error code
	b = append(b, 0)                         // error message: null
	b = append(b, 3, 'm', '1')               // member id
	b = binary.BigEndian.AppendUint32(b, 5)  // epoch
	b = binary.BigEndian.AppendUint32(b, 50) // interval ms
	b = append(b, 1)                         // assignment present
	b = append(b, 2)
	b = append(b, id[:]...)
	b = append(b, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0) // partitions [0 4], tags
	b = append(b, 0, 0)                         // assignment tags, response tags
	res, err := parseHeartbeatResponse(b)
	require.NoError(t, err)
	assert.Equal(t, HeartbeatResponse{MemberID: "m1", MemberEpoch: 5, HeartbeatInterval: 50 * time.Millisecond,
		Assignment: []TopicPartitions{{TopicID: id, Partitions: []int32{0, 4}}}, HasAssignment: true}, res)

	// No assignment (-1): unchanged.
	nb := append(append([]byte{}, b[:19]...), 0xff, 0)
	res, err = parseHeartbeatResponse(nb)
	require.NoError(t, err)
	assert.False(t, res.HasAssignment)

	for i := range len(b) - 1 {
		_, err := parseHeartbeatResponse(b[:i])
		require.ErrorIs(t, err, ErrMalformed, "cut at %d", i)
	}
}

func TestOffsetCommitRequestBytes(t *testing.T) {
	got := appendOffsetCommitRequest(nil, 3, "c", &OffsetCommit{GroupID: "g", MemberID: "m", MemberEpoch: 4,
		Offsets: map[string]map[int32]int64{"t": {2: 10}}})
	want := "" +
		"0000002d" + "0008" + "0009" + "00000003" + "0001" + "63" + "00" +
		"0267" + "00000004" + "026d" + "00" + // group, epoch, member, instance null
		"02" + "0274" + "02" + "00000002" + "000000000000000a" + "ffffffff" + "00" + "00" + "00" + // topics
		"00"
	assert.Equal(t, want, hex.EncodeToString(got))

	resp := []byte{0, 0, 0, 0, 0, 2, 2, 't', 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 2, 0, 113, 0, 0, 0}
	errs, err := parseOffsetCommitResponse(resp)
	require.NoError(t, err)
	assert.Equal(t, []PartitionError{{Topic: "t", Partition: 2, ErrorCode: int16(StaleMemberEpoch)}}, errs)
}

// FuzzParseGroupResponses: no input makes a parser panic or read past its
// end; what it cannot read is ErrMalformed.
func FuzzParseGroupResponses(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 50, 1, 1, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 0, 2, 2, 't', 2, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := parseHeartbeatResponse(b); err != nil {
			require.ErrorIs(t, err, ErrMalformed)
		}
		if _, err := parseOffsetCommitResponse(b); err != nil {
			require.ErrorIs(t, err, ErrMalformed)
		}
		if _, err := parseMetadataResponse(b); err != nil {
			require.ErrorIs(t, err, ErrMalformed)
		}
	})
}

// TestDescribeBytes pins ConsumerGroupDescribe v0, as Kafka's
// ConsumerGroupDescribeRequest.json and ...Response.json lay it out.
func TestDescribeBytes(t *testing.T) {
	got := appendDescribeRequest(nil, 9, "c", "g")
	assert.Equal(t, "00000011"+"0045"+"0000"+"00000009"+"0001"+"63"+"00"+"02"+"0267"+"00"+"00",
		hex.EncodeToString(got))

	id := UUID{15: 1}
	assignment := func(ps ...int32) []byte {
		b := []byte{2}
		b = append(b, id[:]...)
		b = append(b, 2, 't') // topic name
		b = append(b, byte(len(ps)+1))
		for _, p := range ps {
			b = binary.BigEndian.AppendUint32(b, uint32(p))
		}
		return append(b, 0, 0) // topic tags, assignment tags
	}
	member := func(name string, epoch uint32, owned, target []byte) []byte {
		b := []byte{byte(len(name) + 1)}
		b = append(b, name...)
		b = append(b, 0, 0) // instance, rack: null
		b = binary.BigEndian.AppendUint32(b, epoch)
		b = append(b, 2, 'c', 2, 'h') // client id, host
		b = append(b, 2, 2, 't')      // subscribed ["t"]
		b = append(b, 0)              // regex: null
		b = append(b, owned...)
		b = append(b, target...)
		return append(b, 0)
	}
	b := []byte{0}                          // header tags
	b = binary.BigEndian.AppendUint32(b, 0) // throttle
	b = append(b, 2)                        // one group
	b = append(b, 0, 0, 0)                  // error code, message: null
	b = append(b, 2, 'g')
	b = append(b, 7, 'S', 't', 'a', 'b', 'l', 'e')
	b = binary.BigEndian.AppendUint32(b, 4)
	b = binary.BigEndian.AppendUint32(b, 4)
	b = append(b, 8, 'u', 'n', 'i', 'f', 'o', 'r', 'm')
	b = append(b, 3)
	b = append(b, member("a", 4, assignment(0, 1), assignment(0, 1))...)
	b = append(b, member("b", 4, []byte{1, 0}, []byte{1, 0})...)
	b = binary.BigEndian.AppendUint32(b, 0x80000000)
	b = append(b, 0, 0) // group tags, response tags
	d, err := parseDescribeResponse(b)
	require.NoError(t, err)
	assert.Equal(t, GroupDescription{State: "Stable", GroupEpoch: 4, AssignmentEpoch: 4, Members: []MemberDescription{
		{MemberID: "a", MemberEpoch: 4, Assigned: 2, Target: 2, AssignedByTopic: map[string]int{"t": 2}},
		{MemberID: "b", MemberEpoch: 4, AssignedByTopic: map[string]int{}}}}, d)

	_, err = parseDescribeResponse(b[:len(b)-3])
	require.ErrorIs(t, err, ErrMalformed, "a truncated response")
}
