package kafkawire

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"net"

	"github.com/segmentio/kafka-go"
)

// ClassicGroupDialer returns a copy of d for kafka-go's ConsumerGroup whose
// JoinGroup requests carry a ConsumerProtocolSubscription Kafka can parse.
//
// kafka-go (v0.4.51) writes each protocol's subscription as version 1 but
// ends it before version 1's OwnedPartitions. A classic group never reads
// it, but Kafka 3.7 and later parse it to move a group between the classic
// and the consumer protocol online (KIP-848's upgrade and downgrade), and
// refuse the malformed one: a consumer-protocol member joining a group of
// kafka-go members gets GROUP_ID_NOT_FOUND, a kafka-go member joining a
// group of consumer-protocol members INCONSISTENT_GROUP_PROTOCOL. What
// kafka-go writes is exactly version 0 (topics, user data), so the
// connections of the returned Dialer rewrite that version field, and
// nothing else, in the JoinGroup requests they send.
//
// The rewrite needs the plain bytes, so the returned Dialer does TLS
// itself, below the rewrite, with d.TLS (kafka-go would do it above the
// dial function); SASL is kafka-go's, above it, as before.
func ClassicGroupDialer(d *kafka.Dialer) *kafka.Dialer {
	c := *d
	dial := d.DialFunc
	if dial == nil {
		dial = (&net.Dialer{LocalAddr: d.LocalAddr, FallbackDelay: d.FallbackDelay, KeepAlive: d.KeepAlive}).DialContext
	}
	tlsConfig := d.TLS
	c.TLS = nil
	c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tlsConfig != nil {
			cfg := tlsConfig
			if cfg.ServerName == "" {
				// kafka-go's rule: the host dialed.
				cfg = cfg.Clone()
				cfg.ServerName, _, _ = net.SplitHostPort(addr)
			}
			tc := tls.Client(conn, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = tc.Close()
				return nil, err
			}
			conn = tc
		}
		return &joinGroupConn{Conn: conn}, nil
	}
	return &c
}

// joinGroupConn is a client connection that rewrites the subscriptions of
// the JoinGroup requests written through it (see ClassicGroupDialer). It
// holds a request until all of it is written, since kafka-go's buffered
// writer may split one.
type joinGroupConn struct {
	net.Conn
	pending []byte // the start of a request not yet passed on
}

func (c *joinGroupConn) Write(p []byte) (int, error) {
	c.pending = append(c.pending, p...)
	for len(c.pending) >= 4 {
		end := 4 + int(binary.BigEndian.Uint32(c.pending))
		if len(c.pending) < end {
			break
		}
		fixJoinGroup(c.pending[4:end])
		if _, err := c.Conn.Write(c.pending[:end]); err != nil {
			c.pending = c.pending[:0]
			return 0, err
		}
		c.pending = c.pending[:copy(c.pending, c.pending[end:])]
	}
	return len(p), nil
}

// apiJoinGroup is JoinGroup's API key.
const apiJoinGroup = 11

// fixJoinGroup rewrites, in place, each subscription of a JoinGroup request
// (v0-v5: not flexible, which is what kafka-go sends) that says version 1
// and ends before OwnedPartitions, to version 0. Any other request, or one
// it cannot read, is left alone.
func fixJoinGroup(req []byte) {
	r := wireReader{b: req}
	key, version := r.int16(), r.int16()
	if key != apiJoinGroup || version > 5 || r.bad {
		return
	}
	r.int32()      // correlation id
	r.skipString() // client id
	r.skipString() // group id
	r.int32()      // session timeout
	if version >= 1 {
		r.int32() // rebalance timeout
	}
	r.skipString() // member id
	if version >= 5 {
		r.skipString() // group instance id
	}
	r.skipString() // protocol type
	for n := r.int32(); n > 0 && !r.bad; n-- {
		r.skipString() // protocol name
		if meta := r.int32Bytes(); !r.bad && truncatedV1(meta) {
			meta[0], meta[1] = 0, 0
		}
	}
}

// truncatedV1 tells whether a ConsumerProtocolSubscription says version 1
// and ends right after its user data, where version 1's OwnedPartitions
// should begin: what kafka-go writes.
func truncatedV1(meta []byte) bool {
	r := wireReader{b: meta}
	if r.int16() != 1 {
		return false
	}
	for n := r.int32(); n > 0 && !r.bad; n-- {
		r.skipString() // topic
	}
	r.int32Bytes() // user data
	return !r.bad && len(r.b) == 0
}
