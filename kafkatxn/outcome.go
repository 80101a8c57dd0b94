package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
)

// CommitPrepared commits the transaction txn, recorded by a TxProducer
// (Txn) that may be gone, and returns nil once it is committed, whether by
// this call or before. It is the restore step of a two-phase commit: call
// it before a new TxProducer of the same transactional id starts, since
// that aborts any open transaction of the id.
//
// It sends EndTxn with txn's producer id and epoch, as the producer would
// have, in txn's protocol (EndTxn v5 for transactions v2). Kafka answers
// a repeated commit of the transaction with success as long as the epoch
// is current (v2: one below the coordinator's, which the commit bumped);
// once the epoch has moved on (the producer began its next transaction,
// or the id was fenced or the transaction timed out), the outcome is read
// from the log instead: the transaction
// marker that follows txn's first record in its first partition says
// commit or abort. An aborted transaction returns an error wrapping
// ErrAborted: its records are lost, and the caller must not go on as if
// they were written.
func CommitPrepared(ctx context.Context, brokers []string, txn Txn, opts TxOptions) error {
	if txn.TransactionalID == "" || txn.ProducerID < 0 {
		return fmt.Errorf("%w: a transaction needs a transactional id and a producer id", ErrInvalidArgument)
	}
	if len(txn.Partitions) == 0 {
		return nil // nothing was written: nothing to commit
	}
	c, err := newTxClient(brokers, opts)
	if err != nil {
		return err
	}
	defer c.close()
	var settledBy error
	err = c.retry(ctx, "commit prepared transaction", func(ctx context.Context) error {
		_, _, err := c.endTxnOnce(ctx, txn.TransactionalID, txn.ProducerID, txn.Epoch, true, txn.Version == 2)
		if err != nil && (fencedErr(err) || isKafkaErr(err, kafka.InvalidTransactionState, kafka.InvalidProducerIDMapping,
			kafka.TransactionalIDNotFound)) {
			// The epoch moved on, or the transaction ended the other
			// way: the log says how it ended.
			settledBy = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if settledBy == nil {
		return nil
	}
	first := txn.Partitions[0]
	var committed bool
	var seen markerSearch
	err = c.retry(ctx, "look up transaction outcome", func(ctx context.Context) error {
		var found bool
		var err error
		committed, found, seen, err = findMarker(ctx, c, first, txn.ProducerID, txn.Epoch)
		if err != nil {
			return err
		}
		if !found {
			// Kafka writes markers after the coordinator decided: wait.
			return kafka.ConcurrentTransactions
		}
		return nil
	})
	if err != nil {
		// Say what was seen: whoever reads this error (an operator, a
		// test log) needs the coordinator's view beside the log's.
		return fmt.Errorf("kafkatxn: transaction %s (producer %d, epoch %d): %w; EndTxn answered %v; "+
			"no marker of producer %d in %s/%d from offset %d (read to %d, high watermark %d); coordinator: %s",
			txn.TransactionalID, txn.ProducerID, txn.Epoch, err, settledBy, txn.ProducerID, first.Topic, first.Partition,
			first.FirstOffset, seen.readTo, seen.highWatermark, c.describeBriefly(ctx, txn.TransactionalID))
	}
	if !committed {
		return fmt.Errorf("kafkatxn: transaction %s (producer %d, epoch %d): %w", txn.TransactionalID, txn.ProducerID, txn.Epoch, ErrAborted)
	}
	return nil
}

// findMarker reads tp from its FirstOffset for the first transaction marker
// of producer pid with an epoch of at least epoch: the end of the
// transaction that wrote there first (one transaction of a producer is
// open at a time, and its marker follows its records).
func findMarker(ctx context.Context, c *txClient, tp TxnPartition, pid int64, epoch int16) (commit, found bool, seen markerSearch, err error) {
	from := tp.FirstOffset
	for {
		fr, err := fetch(ctx, c.transport, c.cl.Addr, tp.Topic, tp.Partition, from, false, 1<<20, 0)
		if err != nil {
			return false, false, seen, err
		}
		if fr.err != nil {
			return false, false, seen, fr.err
		}
		seen.highWatermark = fr.highWatermark
		next := from
		for _, b := range fr.batches {
			if b.lastOffset < from {
				continue
			}
			if b.control && b.producerID == pid && b.producerEpoch >= epoch {
				return b.commit, true, seen, nil
			}
			next = max(next, b.lastOffset+1)
		}
		seen.readTo = next
		if next == from || next >= fr.highWatermark {
			return false, false, seen, nil
		}
		from = next
	}
}

// markerSearch is how far findMarker read: to readTo, of a log whose
// high watermark was highWatermark.
type markerSearch struct{ readTo, highWatermark int64 }

// describeBriefly returns the coordinator's state of id in a few words, or
// why it could not be read, within a few seconds even when ctx's deadline
// has passed: it goes into an error message. A caller who cancelled is
// not kept waiting for it.
func (c *txClient) describeBriefly(ctx context.Context, id string) string {
	if errors.Is(ctx.Err(), context.Canceled) {
		return "not described (cancelled)"
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(c.opts.RequestTimeout, 5*time.Second))
	defer cancel()
	d, err := c.describeOnce(ctx, id)
	if err != nil {
		return fmt.Sprintf("not described (%v)", err)
	}
	return fmt.Sprintf("%s, producer %d, epoch %d, partitions %v", d.State, d.ProducerID, d.ProducerEpoch, d.Partitions)
}

// logEndOf returns the high watermark of tp.
func logEndOf(ctx context.Context, cl *kafka.Client, tp topicPartition, timeout time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{tp.topic: {kafka.LastOffsetOf(tp.partition)}},
	})
	if err != nil {
		return 0, err
	}
	for _, po := range res.Topics[tp.topic] {
		if po.Partition == tp.partition {
			if po.Error != nil {
				return 0, po.Error
			}
			return po.LastOffset, nil
		}
	}
	return 0, fmt.Errorf("kafkatxn: no offsets for %s/%d", tp.topic, tp.partition)
}

// findBatch searches tp from offset from to its end for the batch h, and
// returns its offset if it is there.
func findBatch(ctx context.Context, rt kafka.RoundTripper, addr net.Addr, tp topicPartition, from int64, h batchHeader, timeout time.Duration) (int64, bool, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		fr, err := fetch(rctx, rt, addr, tp.topic, tp.partition, from, false, 1<<20, 0)
		cancel()
		if err != nil {
			return 0, false, err
		}
		if fr.err != nil {
			return 0, false, fr.err
		}
		next := from
		for _, b := range fr.batches {
			if b.producerID == h.producerID && b.producerEpoch == h.producerEpoch && b.baseSequence == h.baseSequence && !b.control {
				return b.baseOffset, true, nil
			}
			next = max(next, b.lastOffset+1)
		}
		if next == from || next >= fr.highWatermark {
			return 0, false, nil
		}
		from = next
	}
}
