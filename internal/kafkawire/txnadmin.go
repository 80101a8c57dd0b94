package kafkawire

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
)

// The transaction admin requests kafka-go lacks (KIP-664), both "flexible"
// (compact strings and arrays, tagged fields): ListTransactions v0 (api key
// 66), answered by every broker for the transactional ids it coordinates,
// and DescribeTransactions v0 (api key 65), answered by an id's
// coordinator.
const (
	apiDescribeTransactions = 65
	apiListTransactions     = 66
)

// TxnListing is one entry of a ListTransactions response.
type TxnListing struct {
	TransactionalID string
	ProducerID      int64
	State           string
}

// TxnDescription is one entry of a DescribeTransactions response.
type TxnDescription struct {
	ErrorCode       int16
	TransactionalID string
	State           string
	TimeoutMs       int32
	StartTimeMs     int64 // -1: no transaction open
	ProducerID      int64
	ProducerEpoch   int16
	Topics          map[string][]int32
}

// ListTransactions sends ListTransactions v0 on conn, filtered by states and
// producer ids (empty: all), and returns the broker's answer: its
// transactions, and the state filters it did not know. A broker error code
// is returned as its kafka.Error.
func ListTransactions(ctx context.Context, conn net.Conn, clientID string, states []string, pids []int64) ([]TxnListing, []string, error) {
	body := binary.AppendUvarint(nil, uint64(len(states)+1))
	for _, s := range states {
		body = appendCompactString(body, s)
	}
	body = binary.AppendUvarint(body, uint64(len(pids)+1))
	for _, p := range pids {
		body = binary.BigEndian.AppendUint64(body, uint64(p))
	}
	body = append(body, 0) // tagged fields
	buf, err := roundTripFlexible(ctx, conn, clientID, apiListTransactions, 0, body)
	if err != nil {
		return nil, nil, err
	}
	r := wireReader{b: buf}
	r.int32() // throttle time
	code := r.int16()
	var unknown []string
	for range r.compactLen() {
		unknown = append(unknown, r.compactString())
	}
	var out []TxnListing
	for range r.compactLen() {
		l := TxnListing{TransactionalID: r.compactString(), ProducerID: r.int64(), State: r.compactString()}
		r.skipTags()
		out = append(out, l)
	}
	r.skipTags()
	if r.bad {
		return nil, nil, fmt.Errorf("%w: ListTransactions response", ErrMalformed)
	}
	if code != 0 {
		return nil, nil, fmt.Errorf("kafkawire: list transactions: %w", kafka.Error(code))
	}
	return out, unknown, nil
}

// DescribeTransactions sends DescribeTransactions v0 for ids on conn (the
// ids' coordinator) and returns its entries, each with its error code.
func DescribeTransactions(ctx context.Context, conn net.Conn, clientID string, ids []string) ([]TxnDescription, error) {
	body := binary.AppendUvarint(nil, uint64(len(ids)+1))
	for _, id := range ids {
		body = appendCompactString(body, id)
	}
	body = append(body, 0) // tagged fields
	buf, err := roundTripFlexible(ctx, conn, clientID, apiDescribeTransactions, 0, body)
	if err != nil {
		return nil, err
	}
	r := wireReader{b: buf}
	r.int32() // throttle time
	var out []TxnDescription
	for range r.compactLen() {
		d := TxnDescription{ErrorCode: r.int16(), TransactionalID: r.compactString(), State: r.compactString(),
			TimeoutMs: r.int32(), StartTimeMs: r.int64(), ProducerID: r.int64(), ProducerEpoch: r.int16()}
		for range r.compactLen() {
			topic := r.compactString()
			if d.Topics == nil {
				d.Topics = map[string][]int32{}
			}
			for range r.compactLen() {
				d.Topics[topic] = append(d.Topics[topic], r.int32())
			}
			r.skipTags()
		}
		r.skipTags()
		out = append(out, d)
	}
	r.skipTags()
	if r.bad {
		return nil, fmt.Errorf("%w: DescribeTransactions response", ErrMalformed)
	}
	return out, nil
}

// roundTripFlexible sends one request with header v2 (flexible versions)
// and returns the response body after its header v1. Requests on conn are
// one at a time, each with correlation id 1.
func roundTripFlexible(ctx context.Context, conn net.Conn, clientID string, apiKey, version int16, body []byte) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	const corr = 1
	req := make([]byte, 4, 4+12+len(clientID)+len(body))
	req = binary.BigEndian.AppendUint16(req, uint16(apiKey))
	req = binary.BigEndian.AppendUint16(req, uint16(version))
	req = binary.BigEndian.AppendUint32(req, corr)
	req = appendString(req, clientID) // header v2: client id is a nullable string, not compact
	req = append(req, 0)              // header tagged fields
	req = append(req, body...)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	if _, err := conn.Write(req); err != nil {
		return nil, ctxErr(ctx, err)
	}
	var head [8]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return nil, ctxErr(ctx, err)
	}
	size := int32(binary.BigEndian.Uint32(head[:4]))
	if got := int32(binary.BigEndian.Uint32(head[4:])); got != corr || size < 5 || size > 64<<20 {
		return nil, fmt.Errorf("%w: response of %d bytes for request %d", ErrMalformed, size, got)
	}
	buf := make([]byte, size-4)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return nil, ctxErr(ctx, err)
	}
	r := wireReader{b: buf}
	r.skipTags() // response header v1
	if r.bad {
		return nil, fmt.Errorf("%w: response header", ErrMalformed)
	}
	return r.b, nil
}
