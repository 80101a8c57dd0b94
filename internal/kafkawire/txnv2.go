package kafkawire

// The requests of Kafka's transactions v2 (KIP-890 part 2) that kafka-go
// lacks, written here in their flexible versions and sent through
// kafka-go's Transport: each is a protocol.Message that implements
// protocol.RawExchanger, so the Transport routes it (to the transaction
// coordinator, a partition's leader, a group's coordinator or any broker,
// by the interface it implements), lends it one of its pooled connections
// (TLS and SASL done, the deadline set from the context) and lets it
// write its own bytes and read its own answer. kafka-go's own table of
// request types (protocol.Register, by API key) stays untouched.
//
//   - ApiVersions v3: the broker's API versions and its finalized
//     features (transaction.version, a tagged field kafka-go does not read).
//   - EndTxn v5: ends a transaction; the coordinator bumps the epoch and
//     answers with the producer id and epoch of the next transaction.
//   - Produce v12: a transactional Produce that also adds its partition to
//     the transaction (the leader asks the coordinator itself).
//   - TxnOffsetCommit v5: commits offsets in a transaction, adding the
//     group to it (no AddOffsetsToTxn).

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// API keys and the versions written here.
const (
	keyProduce         = 0
	keyApiVersions     = 18
	keyEndTxn          = 26
	keyTxnOffsetCommit = 28

	EndTxnV2Version          = 5
	ProduceV2Version         = 12
	TxnOffsetCommitV2Version = 5
	apiVersionsVersion       = 3
)

// TransactionAbortable is KIP-890's TRANSACTION_ABORTABLE (code 120), which
// kafka-go's kafka.Error does not name: the open transaction cannot
// commit, and the producer must abort it.
const TransactionAbortable kafka.Error = 120

var corrID atomic.Int32

// rawResponse is the body of a response, after its header.
type rawResponse struct {
	key  protocol.ApiKey
	body []byte
}

func (r *rawResponse) ApiKey() protocol.ApiKey { return r.key }

// rawRequest is a request written here, sent on a connection kafka-go's
// Transport lends it.
type rawRequest struct {
	key      int16
	version  int16
	clientID string
	body     []byte
	// tail is sent after body as it is, without a copy: a Produce's
	// record batch, which can be megabytes.
	tail [][]byte
	// headerV0 says the response header has no tagged fields (ApiVersions
	// answers so in every version, so that any client can read it).
	headerV0 bool
}

func (r *rawRequest) ApiKey() protocol.ApiKey { return protocol.ApiKey(r.key) }

// Required is always true: kafka-go could not encode these versions.
func (r *rawRequest) Required(map[protocol.ApiKey]int16) bool { return true }

// RawExchange writes the request with header v2 and reads its response.
func (r *rawRequest) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	corr := corrID.Add(1)
	req := appendFlexibleHeader(make([]byte, 0, 32+len(r.clientID)+len(r.body)), r.key, r.version, corr, r.clientID)
	req = finishRequest(append(req, r.body...))
	if len(r.tail) == 0 {
		if _, err := rw.Write(req); err != nil {
			return nil, err
		}
	} else {
		size := len(req) - 4
		for _, t := range r.tail {
			size += len(t)
		}
		binary.BigEndian.PutUint32(req, uint32(size))
		bufs := append(net.Buffers{req}, r.tail...)
		if _, err := bufs.WriteTo(rw); err != nil {
			return nil, err
		}
	}
	var head [8]byte
	if _, err := io.ReadFull(rw, head[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(head[:4]))
	if got := int32(binary.BigEndian.Uint32(head[4:])); got != corr || size < 4 || size > 64<<20 {
		return nil, fmt.Errorf("%w: response of %d bytes for request %d (want %d)", ErrMalformed, size, got, corr)
	}
	buf := make([]byte, size-4)
	if _, err := io.ReadFull(rw, buf); err != nil {
		return nil, err
	}
	if !r.headerV0 {
		fr := &flexReader{b: buf}
		fr.tags()
		if fr.err != nil {
			return nil, fr.err
		}
		buf = fr.b
	}
	return &rawResponse{key: protocol.ApiKey(r.key), body: buf}, nil
}

// anyBroker goes to any broker of the cluster.
type anyBroker struct{ rawRequest }

// txnCoordinator goes to the coordinator of a transactional id.
type txnCoordinator struct {
	rawRequest
	txid string
}

func (r *txnCoordinator) Transaction() string { return r.txid }

// groupCoordinator goes to the coordinator of a group.
type groupCoordinator struct {
	rawRequest
	group string
}

func (r *groupCoordinator) Group() string { return r.group }

// partitionLeader goes to the leader of a partition, as the Transport's
// metadata says.
type partitionLeader struct {
	rawRequest
	topic     string
	partition int32
}

func (r *partitionLeader) Broker(c protocol.Cluster) (protocol.Broker, error) {
	t, ok := c.Topics[r.topic]
	if !ok {
		return protocol.Broker{}, kafka.UnknownTopicOrPartition
	}
	p, ok := t.Partitions[r.partition]
	if !ok {
		return protocol.Broker{}, kafka.UnknownTopicOrPartition
	}
	b, ok := c.Brokers[p.Leader]
	if !ok {
		return protocol.Broker{}, kafka.LeaderNotAvailable
	}
	return b, nil
}

var (
	_ protocol.RawExchanger         = (*rawRequest)(nil)
	_ protocol.TransactionalMessage = (*txnCoordinator)(nil)
	_ protocol.GroupMessage         = (*groupCoordinator)(nil)
	_ protocol.BrokerMessage        = (*partitionLeader)(nil)
)

func body(m protocol.Message) ([]byte, error) {
	r, ok := m.(*rawResponse)
	if !ok {
		return nil, fmt.Errorf("%w: unexpected response %T", ErrMalformed, m)
	}
	return r.body, nil
}

func (r *flexReader) int64() int64 {
	if v := r.take(8, "int64"); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

func (r *flexReader) compactNullableString() { r.take(max(r.length(1), 0), "string") }

// Features is what a broker's ApiVersions v3 answer says about the
// transaction protocol.
type Features struct {
	// TransactionVersion is the finalized level of the transaction.version
	// feature, 0 when the broker finalizes none (Kafka 3.x).
	TransactionVersion int16
	// MaxVersions of the requests transactions v2 needs, by API key; a
	// key the broker lacks is absent.
	MaxVersions map[int16]int16
}

// TransactionsV2 reports whether the broker runs transactions v2 for a
// client that sends EndTxn v5 and Produce v12: transaction.version is 2 or
// more and it speaks those versions.
func (f Features) TransactionsV2() bool {
	return f.TransactionVersion >= 2 && f.MaxVersions[keyEndTxn] >= EndTxnV2Version &&
		f.MaxVersions[keyProduce] >= ProduceV2Version && f.MaxVersions[keyTxnOffsetCommit] >= TxnOffsetCommitV2Version
}

// ApiVersionsRequest returns the ApiVersions v3 request, for any broker.
// Every request here is sent with clientID, as kafka-go's own are with
// the Transport's (quotas and logs by client id see them alike).
func ApiVersionsRequest(clientID string) protocol.Message {
	b := appendCompactString(nil, "exactlyonce-go")
	b = appendCompactString(b, "1")
	b = appendNoTags(b)
	return &anyBroker{rawRequest{key: keyApiVersions, version: apiVersionsVersion, clientID: clientID, body: b, headerV0: true}}
}

// ParseApiVersions reads ApiVersionsRequest's answer.
func ParseApiVersions(m protocol.Message) (Features, error) {
	b, err := body(m)
	if err != nil {
		return Features{}, err
	}
	r := &flexReader{b: b}
	f := Features{MaxVersions: map[int16]int16{}}
	code := r.int16()
	n := r.length(7)
	for range max(n, 0) {
		k := r.int16()
		r.int16() // min
		f.MaxVersions[k] = r.int16()
		r.tags()
	}
	r.int32() // throttle
	for tags := r.uvarint(); tags > 0 && r.err == nil; tags-- {
		tag := r.uvarint()
		size := r.uvarint()
		if size > uint64(len(r.b)) {
			r.fail("tagged field")
			break
		}
		v := r.take(int(size), "tagged field")
		if tag != 2 { // FinalizedFeatures
			continue
		}
		fr := &flexReader{b: v}
		for range max(fr.length(5), 0) {
			name := fr.compactString()
			maxLevel := fr.int16()
			fr.int16() // min level
			fr.tags()
			if name == "transaction.version" {
				f.TransactionVersion = maxLevel
			}
		}
		if fr.err != nil {
			return Features{}, fr.err
		}
	}
	if r.err != nil {
		return Features{}, r.err
	}
	if code != 0 {
		return Features{}, fmt.Errorf("kafkawire: api versions: %w", kafka.Error(code))
	}
	return f, nil
}

// EndTxnRequest returns EndTxn v5 for the transaction of txid with the
// producer id and epoch the transaction ran with.
func EndTxnRequest(clientID, txid string, pid int64, epoch int16, commit bool) protocol.Message {
	b := appendCompactString(nil, txid)
	b = binary.BigEndian.AppendUint64(b, uint64(pid))
	b = binary.BigEndian.AppendUint16(b, uint16(epoch))
	c := byte(0)
	if commit {
		c = 1
	}
	b = appendNoTags(append(b, c))
	return &txnCoordinator{rawRequest{key: keyEndTxn, version: EndTxnV2Version, clientID: clientID, body: b}, txid}
}

// ParseEndTxn reads EndTxn v5's answer: the producer id and epoch of the
// next transaction, or the broker's error.
func ParseEndTxn(m protocol.Message) (pid int64, epoch int16, err error) {
	b, err := body(m)
	if err != nil {
		return 0, 0, err
	}
	r := &flexReader{b: b}
	r.int32() // throttle
	code := r.int16()
	pid, epoch = r.int64(), r.int16()
	r.tags()
	if r.err != nil {
		return 0, 0, r.err
	}
	if code != 0 {
		return 0, 0, kafka.Error(code)
	}
	return pid, epoch, nil
}

// ProduceRequest returns a transactional Produce v12 of one record batch to
// topic's partition, with acks=all and the broker's wait bounded by
// timeoutMs. Sent inside a transaction of transactions v2, it adds the
// partition to the transaction. batch is sent from where it is, not
// copied: it must not change until the round trip returns.
func ProduceRequest(clientID, txid, topic string, partition int32, timeoutMs int32, batch []byte) protocol.Message {
	b := appendCompactString(nil, txid)
	b = binary.BigEndian.AppendUint16(b, 0xffff) // acks -1: all in-sync replicas
	b = binary.BigEndian.AppendUint32(b, uint32(timeoutMs))
	b = appendUvarint(b, 2) // one topic
	b = appendCompactString(b, topic)
	b = appendUvarint(b, 2) // one partition
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	b = appendUvarint(b, uint64(len(batch))+1)
	// The batch is sent from the caller's buffer, not copied here: it is
	// most of the request.
	tags := appendNoTags(appendNoTags(appendNoTags(nil))) // partition, topic, request
	return &partitionLeader{rawRequest{key: keyProduce, version: ProduceV2Version, clientID: clientID, body: b,
		tail: [][]byte{batch, tags}}, topic, partition}
}

// ParseProduce reads ProduceRequest's answer: the batch's base offset, or
// the partition's error (a kafka.Error, with the broker's message when it
// sent one).
func ParseProduce(m protocol.Message, topic string, partition int32) (int64, error) {
	b, err := body(m)
	if err != nil {
		return 0, err
	}
	r := &flexReader{b: b}
	found, base := false, int64(0)
	var code int16
	var msg string
	for range max(r.length(2), 0) {
		name := r.compactString()
		for range max(r.length(20), 0) {
			idx, c, off := r.int32(), r.int16(), r.int64()
			r.int64() // log append time
			r.int64() // log start offset
			for range max(r.length(2), 0) {
				r.int32()
				r.compactNullableString()
				r.tags()
			}
			if n := r.length(1); n > 0 {
				msg = string(r.take(n, "string"))
			}
			r.tags()
			if name == topic && idx == partition {
				found, code, base = true, c, off
			}
		}
		r.tags()
	}
	r.int32() // throttle
	r.tags()
	if r.err != nil {
		return 0, r.err
	}
	if !found {
		return 0, fmt.Errorf("%w: no answer for %s/%d", ErrMalformed, topic, partition)
	}
	if code != 0 {
		if msg != "" {
			return base, fmt.Errorf("%w: %s", kafka.Error(code), msg)
		}
		return base, kafka.Error(code)
	}
	return base, nil
}

// TxnOffset is one partition's offset for TxnOffsetCommitRequest.
type TxnOffset struct {
	Topic     string
	Partition int32
	Offset    int64
}

// TxnOffsetCommitRequest returns TxnOffsetCommit v5, which adds group to
// the transaction (transactions v2) and commits offsets in it.
func TxnOffsetCommitRequest(clientID, txid, group string, pid int64, epoch int16, generation int32, member string, offsets []TxnOffset) protocol.Message {
	b := appendCompactString(nil, txid)
	b = appendCompactString(b, group)
	b = binary.BigEndian.AppendUint64(b, uint64(pid))
	b = binary.BigEndian.AppendUint16(b, uint16(epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(generation))
	b = appendCompactString(b, member)
	b = appendCompactNullableString(b, nil) // group instance id
	byTopic := map[string][]TxnOffset{}
	for _, o := range offsets {
		byTopic[o.Topic] = append(byTopic[o.Topic], o)
	}
	topics := sortedKeys(byTopic)
	b = appendUvarint(b, uint64(len(topics))+1)
	for _, t := range topics {
		b = appendCompactString(b, t)
		b = appendUvarint(b, uint64(len(byTopic[t]))+1)
		for _, o := range byTopic[t] {
			b = binary.BigEndian.AppendUint32(b, uint32(o.Partition))
			b = binary.BigEndian.AppendUint64(b, uint64(o.Offset))
			b = binary.BigEndian.AppendUint32(b, 0xffffffff) // leader epoch -1: unknown
			b = appendCompactNullableString(b, nil)          // metadata
			b = appendNoTags(b)
		}
		b = appendNoTags(b)
	}
	b = appendNoTags(b)
	return &groupCoordinator{rawRequest{key: keyTxnOffsetCommit, version: TxnOffsetCommitV2Version, clientID: clientID, body: b}, group}
}

// ParseTxnOffsetCommit reads TxnOffsetCommitRequest's answer: the first
// partition error, if any.
func ParseTxnOffsetCommit(m protocol.Message) error {
	b, err := body(m)
	if err != nil {
		return err
	}
	r := &flexReader{b: b}
	r.int32() // throttle
	var first int16
	for range max(r.length(2), 0) {
		r.compactString()
		for range max(r.length(7), 0) {
			r.int32()
			if c := r.int16(); c != 0 && first == 0 {
				first = c
			}
			r.tags()
		}
		r.tags()
	}
	r.tags()
	if r.err != nil {
		return r.err
	}
	if first != 0 {
		return kafka.Error(first)
	}
	return nil
}
