package kafkatxn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
)

// Produce writes recs as one batch to topic's partition inside the open
// transaction (beginning one if none is open) and returns the offset of the
// first record. read_committed readers see the records once Commit
// returns, and never if the transaction aborts.
//
// An error wrapping ErrFenced is final. After an error wrapping
// ErrAbortable (including ErrOutcomeUnknown) the transaction cannot
// commit: call Abort. Any other error wrote nothing, and the transaction
// can go on.
func (p *TxProducer) Produce(ctx context.Context, topic string, partition int, recs ...Record) (int64, error) {
	if topic == "" || partition < 0 || len(recs) == 0 {
		return 0, fmt.Errorf("%w: topic, partition and at least one record are required", ErrInvalidArgument)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.usable(); err != nil {
		return 0, err
	}
	if err := p.begin(ctx); err != nil {
		return 0, err
	}
	tp := topicPartition{topic, partition}
	ps := p.parts[tp]
	if ps == nil {
		if p.v2 {
			// Transactions v2: the leader adds the partition to the
			// transaction when the first batch arrives (Produce v12).
			p.starting()
		} else if err := p.addPartition(ctx, tp); err != nil {
			return 0, err
		}
		ps = &txPart{firstOffset: -1, next: -1}
		if end, err := logEndOf(ctx, p.c.cl, tp, p.c.opts.RequestTimeout); err == nil {
			ps.next = end
		}
		p.parts[tp] = ps
		p.order = append(p.order, tp)
	}
	return p.send(ctx, tp, ps, recs)
}

func (p *TxProducer) addPartition(ctx context.Context, tp topicPartition) error {
	p.starting()
	err := p.c.retry(ctx, "add partition to transaction", func(ctx context.Context) error {
		res, err := p.c.cl.AddPartitionsToTxn(ctx, &kafka.AddPartitionsToTxnRequest{
			TransactionalID: p.txid, ProducerID: int(p.pid), ProducerEpoch: int(p.epoch),
			Topics: map[string][]kafka.AddPartitionToTxn{tp.topic: {{Partition: tp.partition}}},
		})
		if err != nil {
			return err
		}
		for _, r := range res.Topics[tp.topic] {
			if r.Partition == tp.partition {
				return r.Error
			}
		}
		return fmt.Errorf("kafkatxn: no result for %s/%d", tp.topic, tp.partition)
	})
	return p.refused(err)
}

// send writes one transactional batch with retries, with the same sequence
// number, so a broker that wrote an attempt whose answer was lost drops the
// copy; p.mu is held.
func (p *TxProducer) send(ctx context.Context, tp topicPartition, ps *txPart, recs []Record) (int64, error) {
	dctx, cancel := context.WithTimeout(context.Background(), p.c.opts.DeliveryTimeout)
	defer cancel()
	h := batchHeader{producerID: p.pid, producerEpoch: p.epoch, baseSequence: ps.seq, transactional: true}
	batch := encode(nil, h, recs, p.c.opts.Now())
	unknown := false
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt == 0 && ctx.Err() != nil {
			return 0, ctx.Err() // nothing sent: a definite failure
		}
		if unknown && ps.next >= 0 {
			// As Producer does: a restarted broker may have lost its
			// sequence window, so look for the batch before resending.
			if off, found, err := findBatch(dctx, p.c.transport, p.c.cl.Addr, tp, ps.next, h, p.c.opts.RequestTimeout); err == nil && found {
				return p.acked(ps, h, recs, off), nil
			}
		}
		off, err := p.produceRaw(dctx, tp, batch)
		switch {
		case err == nil, isKafkaErr(err, kafka.DuplicateSequenceNumber):
			return p.acked(ps, h, recs, off), nil
		case fencedErr(err):
			return 0, p.refused(fmt.Errorf("kafkatxn: produce %s/%d: %w (%v)", tp.topic, tp.partition, ErrFenced, err))
		case abortableErr(err):
			// The broker has no state matching this transaction's, or
			// refused to add the partition to it (v2): it did not write
			// the batch, and the transaction cannot go on. A broker may
			// say so to a fenced producer too (kfake does): the
			// coordinator tells which it is (v1; with v2, the Abort that
			// must follow does).
			if !p.v2 && !isKafkaErr(err, kafkawire.TransactionAbortable) {
				if aerr := p.addPartition(dctx, tp); IsFenced(aerr) || errors.Is(aerr, ErrTimedOut) {
					return 0, p.broken
				}
			}
			p.broken = fmt.Errorf("kafkatxn: produce %s/%d: %w: %w", tp.topic, tp.partition, ErrAbortable, err)
			return 0, p.broken
		case retriable(err):
			lastErr = err
			if !definite(err) {
				unknown = true
			}
		default:
			if unknown {
				p.broken = fmt.Errorf("kafkatxn: produce %s/%d: %w: %w: %w", tp.topic, tp.partition, ErrAbortable, ErrOutcomeUnknown, err)
				return 0, p.broken
			}
			return 0, fmt.Errorf("kafkatxn: produce %s/%d: %w", tp.topic, tp.partition, err)
		}
		select {
		case <-dctx.Done():
			if unknown {
				p.broken = fmt.Errorf("kafkatxn: produce %s/%d: %w: %w: delivery timeout: %w",
					tp.topic, tp.partition, ErrAbortable, ErrOutcomeUnknown, lastErr)
				return 0, p.broken
			}
			return 0, fmt.Errorf("kafkatxn: produce %s/%d: delivery timeout: %w", tp.topic, tp.partition, lastErr)
		case <-time.After(p.produceWait(attempt+1, lastErr)):
		}
	}
}

// produceWait is the pause before attempt+1 of a batch: a short fixed one
// after CONCURRENT_TRANSACTIONS (with transactions v2 the leader's
// implicit add of the partition meets the previous transaction's markers
// still being written, as the coordinator does in v1), else the backoff.
func (p *TxProducer) produceWait(attempt int, err error) time.Duration {
	if isKafkaErr(err, kafka.ConcurrentTransactions) {
		return min(p.c.opts.InitialBackoff, concurrentTxBackoff)
	}
	return p.c.opts.wait(attempt)
}

func (p *TxProducer) acked(ps *txPart, h batchHeader, recs []Record, off int64) int64 {
	ps.seq = h.baseSequence + int32(len(recs))
	ps.next = off + int64(len(recs))
	if ps.firstOffset < 0 {
		ps.firstOffset = off
	}
	return off
}

func (p *TxProducer) produceRaw(ctx context.Context, tp topicPartition, batch []byte) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, p.c.opts.RequestTimeout)
	defer cancel()
	if p.v2 {
		res, err := p.c.roundTrip(rctx, kafkawire.ProduceRequest(p.c.clientID(), p.txid, tp.topic, int32(tp.partition),
			int32(p.c.opts.RequestTimeout.Milliseconds()), batch[4:])) // encode's size prefix is kafka-go's
		if err != nil {
			return 0, err
		}
		return kafkawire.ParseProduce(res, tp.topic, int32(tp.partition))
	}
	res, err := p.c.cl.RawProduce(rctx, &kafka.RawProduceRequest{
		Topic: tp.topic, Partition: tp.partition, RequiredAcks: kafka.RequireAll, TransactionalID: p.txid,
		RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(batch)},
	})
	if err != nil {
		return 0, err
	}
	if res.Error != nil {
		return res.BaseOffset, res.Error
	}
	return res.BaseOffset, nil
}

// SendOffsets adds consumer-group offsets to the open transaction
// (AddOffsetsToTxn, TxnOffsetCommit): they are committed to group
// together with the transaction's records, or not at all. generation and
// member are the consumer's group generation and member id, or -1 and ""
// to commit without a membership check. offsets maps topic to partition to
// the next offset to read.
func (p *TxProducer) SendOffsets(ctx context.Context, group string, generation int, member string, offsets map[string]map[int]int64) error {
	if group == "" || len(offsets) == 0 {
		return fmt.Errorf("%w: group and offsets are required", ErrInvalidArgument)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.usable(); err != nil {
		return err
	}
	if err := p.begin(ctx); err != nil {
		return err
	}
	p.starting()
	if p.v2 {
		// Transactions v2: TxnOffsetCommit v5 adds the group to the
		// transaction itself (the Java client 4.x sends no
		// AddOffsetsToTxn either).
		p.groups = true
		var offs []kafkawire.TxnOffset
		for topic, parts := range offsets {
			for part, off := range parts {
				offs = append(offs, kafkawire.TxnOffset{Topic: topic, Partition: int32(part), Offset: off})
			}
		}
		req := kafkawire.TxnOffsetCommitRequest(p.c.clientID(), p.txid, group, p.pid, p.epoch, int32(generation), member, offs)
		err := p.c.retry(ctx, "commit offsets in transaction", func(ctx context.Context) error {
			res, err := p.c.roundTrip(ctx, req)
			if err != nil {
				return err
			}
			return kafkawire.ParseTxnOffsetCommit(res)
		})
		switch {
		case err == nil:
			p.offsets = true
		case isKafkaErr(err, kafkawire.TransactionAbortable):
			p.broken = fmt.Errorf("kafkatxn: send offsets: %w: %w", ErrAbortable, err)
			return p.broken
		}
		return p.refused(err)
	}
	err := p.c.retry(ctx, "add offsets to transaction", func(ctx context.Context) error {
		res, err := p.c.cl.AddOffsetsToTxn(ctx, &kafka.AddOffsetsToTxnRequest{
			TransactionalID: p.txid, ProducerID: int(p.pid), ProducerEpoch: int(p.epoch), GroupID: group,
		})
		if err != nil {
			return err
		}
		return res.Error
	})
	if err == nil {
		p.groups = true
		req := &kafka.TxnOffsetCommitRequest{
			TransactionalID: p.txid, GroupID: group, ProducerID: int(p.pid), ProducerEpoch: int(p.epoch),
			GenerationID: generation, MemberID: member, Topics: map[string][]kafka.TxnOffsetCommit{},
		}
		for topic, parts := range offsets {
			for part, off := range parts {
				req.Topics[topic] = append(req.Topics[topic], kafka.TxnOffsetCommit{Partition: part, Offset: off})
			}
		}
		err = p.c.retry(ctx, "commit offsets in transaction", func(ctx context.Context) error {
			res, err := p.c.cl.TxnOffsetCommit(ctx, req)
			if err != nil {
				return err
			}
			var errs []error
			for _, parts := range res.Topics {
				for _, r := range parts {
					if r.Error != nil {
						errs = append(errs, r.Error)
					}
				}
			}
			if len(errs) > 0 {
				return errs[0]
			}
			return nil
		})
	}
	return p.refused(err)
}
