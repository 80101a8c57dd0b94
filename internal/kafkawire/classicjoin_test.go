package kafkawire

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// be builds big-endian wire bytes.
type be struct{ bytes.Buffer }

func (b *be) i16(v int16) *be { _ = binary.Write(&b.Buffer, binary.BigEndian, v); return b }
func (b *be) i32(v int32) *be { _ = binary.Write(&b.Buffer, binary.BigEndian, v); return b }
func (b *be) str(s string) *be {
	b.i16(int16(len(s)))
	b.WriteString(s)
	return b
}
func (b *be) raw(p []byte) *be {
	b.i32(int32(len(p)))
	b.Write(p)
	return b
}

// subscription is a ConsumerProtocolSubscription as kafka-go writes it
// (version, topics, user data), with owned partitions appended when owned
// is set, as a version 1 written in full would have them.
func subscription(version int16, owned bool, topics ...string) []byte {
	var b be
	b.i16(version).i32(int32(len(topics)))
	for _, t := range topics {
		b.str(t)
	}
	b.i32(-1) // null user data
	if owned {
		b.i32(1).str(topics[0]).i32(1).i32(0)
	}
	return b.Bytes()
}

// joinGroup is a JoinGroup request frame (size first) of the given version
// with one protocol per subscription.
func joinGroup(version int16, subs ...[]byte) []byte {
	var b be
	b.i16(apiJoinGroup).i16(version).i32(7).str("client")
	b.str("group").i32(10_000)
	if version >= 1 {
		b.i32(30_000)
	}
	b.str("") // member id
	if version >= 5 {
		b.i16(-1) // group instance id
	}
	b.str("consumer").i32(int32(len(subs)))
	for i, s := range subs {
		b.str([]string{"range", "roundrobin"}[i%2]).raw(s)
	}
	var f be
	f.raw(b.Bytes())
	return f.Bytes()
}

// recorder is the far end of a joinGroupConn: what reached it.
type recorder struct {
	net.Conn
	got bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) { return r.got.Write(p) }

// TestJoinGroupConn: a JoinGroup with kafka-go's subscriptions (version 1
// ending before OwnedPartitions) leaves as version 0, whole and otherwise
// byte for byte, however the writes split it; a full version 1, another
// request, and bytes it cannot read pass unchanged.
func TestJoinGroupConn(t *testing.T) {
	kafkaGo := subscription(1, false, "orders", "refunds")
	fixed := subscription(0, false, "orders", "refunds")
	full := subscription(1, true, "orders")
	heartbeat := func() []byte {
		var b, f be
		b.i16(12).i16(1).i32(8).str("client").str("group").i32(3).str("member")
		f.raw(b.Bytes())
		return f.Bytes()
	}()
	truncated := joinGroup(1, kafkaGo)
	truncated = truncated[:len(truncated)-3]
	binary.BigEndian.PutUint32(truncated, uint32(len(truncated)-4))

	for _, tc := range []struct {
		name      string
		in, want  []byte
		splitting []int // write sizes; the rest in one write
	}{
		{"kafka-go's v1 rewritten", joinGroup(1, kafkaGo, kafkaGo), joinGroup(1, fixed, fixed), nil},
		{"JoinGroup v2", joinGroup(2, kafkaGo), joinGroup(2, fixed), nil},
		{"JoinGroup v5 with an instance id field", joinGroup(5, kafkaGo), joinGroup(5, fixed), nil},
		{"split across writes", joinGroup(1, kafkaGo), joinGroup(1, fixed), []int{2, 3, 20, 1}},
		{"two requests in one write", append(heartbeat, joinGroup(1, kafkaGo)...), append(heartbeat, joinGroup(1, fixed)...), nil},
		{"a full version 1 kept", joinGroup(1, full), joinGroup(1, full), nil},
		{"version 0 kept", joinGroup(1, fixed), joinGroup(1, fixed), nil},
		{"another request kept", heartbeat, heartbeat, nil},
		{"a request it cannot read kept", truncated, truncated, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			far := &recorder{}
			c := &joinGroupConn{Conn: far}
			in := bytes.Clone(tc.in)
			for _, n := range tc.splitting {
				w, err := c.Write(in[:n])
				require.NoError(t, err)
				require.Equal(t, n, w)
				in = in[n:]
				assert.Zero(t, far.got.Len(), "nothing passed on before the request is whole")
			}
			w, err := c.Write(in)
			require.NoError(t, err)
			require.Equal(t, len(in), w)
			assert.Equal(t, tc.want, far.got.Bytes())
			assert.Empty(t, c.pending)
		})
	}
}
