package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// batch is one record batch of a fetch response.
type batch struct {
	baseOffset, lastOffset int64
	producerID             int64
	producerEpoch          int16
	baseSequence           int32
	transactional, control bool
	commit                 bool // of a control batch: commit (true) or abort marker
	records                []kafka.Message
}

type fetchResult struct {
	err                             error // the partition's error code
	highWatermark, lastStableOffset int64
	aborted                         []abortedTxn
	batches                         []batch
}

type abortedTxn struct {
	producerID, firstOffset int64
}

// fetch sends one Fetch request for one partition through kafka-go's
// protocol layer, which (unlike kafka.Client.Fetch) keeps the aborted
// transactions list and the batch headers.
func fetch(ctx context.Context, rt kafka.RoundTripper, addr net.Addr, topic string, partition int, offset int64,
	committed bool, maxBytes int, maxWait time.Duration) (*fetchResult, error) {
	iso := int8(0)
	if committed {
		iso = 1
	}
	// The request's limit is twice the partition's: with one partition per
	// request that changes nothing on Kafka, but kfake skips the aborted
	// transactions of a partition when the response fills up on the
	// request's limit instead of the partition's.
	m, err := rt.RoundTrip(ctx, addr, &fetchapi.Request{
		ReplicaID: -1, MaxWaitTime: int32(maxWait.Milliseconds()), MinBytes: 1, MaxBytes: int32(2 * maxBytes),
		IsolationLevel: iso, SessionID: -1, SessionEpoch: -1,
		Topics: []fetchapi.RequestTopic{{Topic: topic, Partitions: []fetchapi.RequestPartition{{
			Partition: int32(partition), CurrentLeaderEpoch: -1, FetchOffset: offset, LogStartOffset: -1,
			PartitionMaxBytes: int32(maxBytes),
		}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("kafkatxn: fetch %s/%d at %d: %w", topic, partition, offset, err)
	}
	res, ok := m.(*fetchapi.Response)
	if !ok || len(res.Topics) != 1 || len(res.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("kafkatxn: fetch %s/%d: unexpected response", topic, partition)
	}
	if res.ErrorCode != 0 {
		return &fetchResult{err: kafka.Error(res.ErrorCode)}, nil
	}
	p := &res.Topics[0].Partitions[0]
	fr := &fetchResult{highWatermark: p.HighWatermark, lastStableOffset: p.LastStableOffset}
	if p.ErrorCode != 0 {
		fr.err = kafka.Error(p.ErrorCode)
		return fr, nil
	}
	for _, a := range p.AbortedTransactions {
		fr.aborted = append(fr.aborted, abortedTxn{producerID: a.ProducerID, firstOffset: a.FirstOffset})
	}
	stream, _ := p.RecordSet.Records.(*protocol.RecordStream)
	if stream == nil {
		return fr, nil
	}
	for _, rr := range stream.Records {
		var b batch
		var recs protocol.RecordReader
		switch v := rr.(type) {
		case *protocol.RecordBatch:
			b = batch{baseOffset: v.BaseOffset, producerID: v.ProducerID, producerEpoch: v.ProducerEpoch,
				baseSequence: v.BaseSequence, transactional: v.Attributes.Transactional()}
			recs = v.Records
		case *protocol.ControlBatch:
			b = batch{baseOffset: v.BaseOffset, producerID: v.ProducerID, producerEpoch: v.ProducerEpoch,
				baseSequence: v.BaseSequence, transactional: true, control: true}
			recs = v.Records
		default:
			continue // a v0/v1 message set: no producer ids, never transactional
		}
		b.lastOffset = b.baseOffset
		for {
			r, err := recs.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("kafkatxn: fetch %s/%d: decode batch at %d: %w", topic, partition, b.baseOffset, err)
			}
			msg, err := toMessage(topic, partition, r)
			if err != nil {
				return nil, fmt.Errorf("kafkatxn: fetch %s/%d: decode record at %d: %w", topic, partition, r.Offset, err)
			}
			b.lastOffset = max(b.lastOffset, r.Offset)
			if b.control {
				// Control record key: version (int16), type (int16: 0
				// abort, 1 commit).
				if len(msg.Key) >= 4 {
					b.commit = msg.Key[3] == 1 && msg.Key[2] == 0
				}
				continue
			}
			b.records = append(b.records, msg)
		}
		fr.batches = append(fr.batches, b)
	}
	return fr, nil
}

func toMessage(topic string, partition int, r *protocol.Record) (kafka.Message, error) {
	m := kafka.Message{Topic: topic, Partition: partition, Offset: r.Offset, Time: r.Time}
	var err error
	if r.Key != nil {
		m.Key, err = protocol.ReadAll(r.Key)
		r.Key.Close()
		if err != nil {
			return m, err
		}
	}
	if r.Value != nil {
		m.Value, err = protocol.ReadAll(r.Value)
		r.Value.Close()
		if err != nil {
			return m, err
		}
	}
	for _, h := range r.Headers {
		m.Headers = append(m.Headers, kafka.Header(h))
	}
	return m, nil
}
