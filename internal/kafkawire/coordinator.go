package kafkawire

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	"github.com/segmentio/kafka-go/protocol/findcoordinator"
)

// Error codes of the consumer group protocol (KIP-848) that kafka-go's
// kafka.Error does not name. A kafka.Error of these codes prints as an
// unknown error; compare codes with them.
const (
	FencedMemberEpoch    kafka.Error = 110
	UnreleasedInstanceID kafka.Error = 111
	UnsupportedAssignor  kafka.Error = 112
	StaleMemberEpoch     kafka.Error = 113
	// InvalidRegularExpression: a SubscribedRegex the coordinator cannot
	// compile (RE2J).
	InvalidRegularExpression kafka.Error = 128
)

// ErrNoConsumerProtocol is returned when the group coordinator does not
// offer ConsumerGroupHeartbeat: a broker older than Kafka 3.7, or one whose
// group.coordinator.rebalance.protocols leaves out "consumer".
var ErrNoConsumerProtocol = errors.New("kafkawire: the group coordinator does not speak the consumer group protocol (KIP-848)")

// ErrNoTopicRegex is returned by GroupConn.Heartbeat for a heartbeat
// with a SubscribedRegex when the coordinator speaks ConsumerGroupHeartbeat
// v0 only (Kafka 3.7 to 3.9), which has no field for it.
var ErrNoTopicRegex = errors.New("kafkawire: the group coordinator takes no subscribed topic regex (ConsumerGroupHeartbeat v1, Kafka 4.0 and later)")

// GroupConn is a connection to a group's coordinator for the requests of
// a consumer-protocol member: ConsumerGroupHeartbeat, OffsetCommit v9,
// Metadata v12 (topic ids) and ConsumerGroupDescribe v0. It finds the coordinator through Brokers
// (FindCoordinator v2 over kafka-go's protocol package) and dials it the
// way Dialer says. Its methods are safe for concurrent use: requests take
// turns on the one connection. A failed request closes the connection;
// the next one finds the coordinator again.
type GroupConn struct {
	Dialer   *kafka.Dialer // required
	ClientID string        // default: Dialer.ClientID, else "exactlyonce"
	Brokers  []string
	GroupID  string

	mu        sync.Mutex
	conn      net.Conn
	corr      int32
	hbVersion int16
	req       []byte
}

func (c *GroupConn) clientID() string {
	switch {
	case c.ClientID != "":
		return c.ClientID
	case c.Dialer.ClientID != "":
		return c.Dialer.ClientID
	}
	return "exactlyonce"
}

// Heartbeat sends h and returns the coordinator's answer, whose ErrorCode
// the caller reads. A coordinator that moved (NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS) closes the
// connection too. A SubscribedRegex the coordinator's version cannot carry
// is not sent: Heartbeat returns ErrNoTopicRegex.
func (c *GroupConn) Heartbeat(ctx context.Context, h *Heartbeat) (HeartbeatResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.connect(ctx); err != nil {
		return HeartbeatResponse{}, err
	}
	if h.SubscribedRegex != nil && c.hbVersion < 1 {
		return HeartbeatResponse{}, ErrNoTopicRegex
	}
	c.corr++
	c.req = appendHeartbeatRequest(c.req[:0], c.hbVersion, c.corr, c.clientID(), h)
	b, err := c.exchange(ctx)
	if err != nil {
		return HeartbeatResponse{}, err
	}
	res, err := parseHeartbeatResponse(b)
	if err != nil || coordinatorMoved(res.ErrorCode) {
		c.closeLocked()
	}
	return res, err
}

// CommitOffsets sends o as OffsetCommit v9 and returns the partitions the
// coordinator refused, with their codes.
func (c *GroupConn) CommitOffsets(ctx context.Context, o *OffsetCommit) ([]PartitionError, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	c.corr++
	c.req = appendOffsetCommitRequest(c.req[:0], c.corr, c.clientID(), o)
	b, err := c.exchange(ctx)
	if err != nil {
		return nil, err
	}
	errs, err := parseOffsetCommitResponse(b)
	if err != nil {
		c.closeLocked()
		return nil, err
	}
	for _, pe := range errs {
		if coordinatorMoved(pe.ErrorCode) {
			c.closeLocked()
			break
		}
	}
	return errs, nil
}

// Metadata asks the coordinator (any broker answers) for topics by name,
// with their ids.
func (c *GroupConn) Metadata(ctx context.Context, topics []string) ([]TopicMetadata, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	c.corr++
	c.req = appendMetadataRequest(c.req[:0], c.corr, c.clientID(), topics)
	b, err := c.exchange(ctx)
	if err != nil {
		return nil, err
	}
	ts, err := parseMetadataResponse(b)
	if err != nil {
		c.closeLocked()
	}
	return ts, err
}

// Close closes the connection; a later request opens a new one.
func (c *GroupConn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

func (c *GroupConn) closeLocked() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

func coordinatorMoved(code int16) bool {
	switch kafka.Error(code) {
	case kafka.NotCoordinatorForGroup, kafka.GroupCoordinatorNotAvailable, kafka.GroupLoadInProgress:
		return true
	}
	return false
}

// connect finds the coordinator and dials it, unless connected.
func (c *GroupConn) connect(ctx context.Context) error {
	if c.conn != nil {
		return nil
	}
	var errs []error
	for _, b := range c.Brokers {
		addr, err := c.findCoordinator(ctx, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		conn, err := Dial(ctx, c.Dialer, c.clientID(), addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		v, err := c.heartbeatVersion(ctx, conn)
		if err != nil {
			_ = conn.Close()
			if errors.Is(err, ErrNoConsumerProtocol) {
				return err
			}
			errs = append(errs, err)
			continue
		}
		c.conn, c.hbVersion, c.corr = conn, v, 100
		return nil
	}
	return fmt.Errorf("kafkawire: connect to the coordinator of group %q: %w", c.GroupID, errors.Join(errs...))
}

// findCoordinator asks broker for the group's coordinator.
func (c *GroupConn) findCoordinator(ctx context.Context, broker string) (string, error) {
	conn, err := Dial(ctx, c.Dialer, c.clientID(), broker)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	res, err := roundTripKafkaGo(ctx, conn, 2, c.clientID(), &findcoordinator.Request{Key: c.GroupID, KeyType: 0})
	if err != nil {
		return "", fmt.Errorf("kafkawire: find coordinator: %w", err)
	}
	fr, ok := res.(*findcoordinator.Response)
	if !ok {
		return "", fmt.Errorf("kafkawire: find coordinator: %w: unexpected response", ErrMalformed)
	}
	if fr.ErrorCode != 0 {
		return "", fmt.Errorf("kafkawire: find coordinator: %w", kafka.Error(fr.ErrorCode))
	}
	return net.JoinHostPort(fr.Host, strconv.Itoa(int(fr.Port))), nil
}

// heartbeatVersion asks the coordinator which ConsumerGroupHeartbeat
// versions it speaks, and returns the highest one written here.
func (c *GroupConn) heartbeatVersion(ctx context.Context, conn net.Conn) (int16, error) {
	res, err := roundTripKafkaGo(ctx, conn, 1, c.clientID(), &apiversions.Request{})
	if err != nil {
		return 0, fmt.Errorf("kafkawire: api versions: %w", err)
	}
	ar, ok := res.(*apiversions.Response)
	if !ok {
		return 0, fmt.Errorf("kafkawire: api versions: %w: unexpected response", ErrMalformed)
	}
	if ar.ErrorCode != 0 {
		return 0, fmt.Errorf("kafkawire: api versions: %w", kafka.Error(ar.ErrorCode))
	}
	var hb, oc, md *apiversions.ApiKeyResponse
	for i, k := range ar.ApiKeys {
		switch k.ApiKey {
		case keyConsumerGroupHeartbeat:
			hb = &ar.ApiKeys[i]
		case keyOffsetCommit:
			oc = &ar.ApiKeys[i]
		case keyMetadata:
			md = &ar.ApiKeys[i]
		}
	}
	switch {
	case hb == nil:
		return 0, ErrNoConsumerProtocol
	case oc == nil || oc.MaxVersion < offsetCommitVersion || oc.MinVersion > offsetCommitVersion ||
		md == nil || md.MaxVersion < metadataVersion || md.MinVersion > metadataVersion:
		return 0, fmt.Errorf("%w: OffsetCommit v%d or Metadata v%d missing", ErrNoConsumerProtocol, offsetCommitVersion, metadataVersion)
	}
	return min(hb.MaxVersion, 1), nil
}

// roundTripKafkaGo sends one request of kafka-go's protocol package on
// conn, its deadline following ctx (at most 30 s).
func roundTripKafkaGo(ctx context.Context, conn net.Conn, v int16, clientID string, req protocol.Message) (protocol.Message, error) {
	_ = conn.SetDeadline(deadline(ctx))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	return protocol.RoundTrip(conn, v, 1, clientID, req)
}

func deadline(ctx context.Context) time.Time {
	d := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(d) {
		return dl
	}
	return d
}

// exchange writes c.req and returns the response after its correlation
// id. Any error closes the connection.
func (c *GroupConn) exchange(ctx context.Context) ([]byte, error) {
	b, err := exchange(ctx, c.conn, c.req, c.corr)
	if err != nil {
		c.closeLocked()
	}
	return b, err
}

func exchange(ctx context.Context, conn net.Conn, req []byte, corr int32) ([]byte, error) {
	_ = conn.SetDeadline(deadline(ctx))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(req); err != nil {
		return nil, err
	}
	var head [8]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(head[:4]))
	if got := int32(binary.BigEndian.Uint32(head[4:])); got != corr || size < 4 || size > 64<<20 {
		return nil, fmt.Errorf("%w: response of %d bytes for request %d (want %d)", ErrMalformed, size, got, corr)
	}
	buf := make([]byte, size-4)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
