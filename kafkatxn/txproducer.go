package kafkatxn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// DefaultTransactionTimeout is the default TxOptions.TransactionTimeout:
// Kafka's own default (transaction.timeout.ms).
const DefaultTransactionTimeout = 60 * time.Second

var (
	// ErrFenced is wrapped by every error of a TxProducer whose
	// transactional id was taken over by a newer producer (Kafka's
	// PRODUCER_FENCED or INVALID_PRODUCER_EPOCH). It is final: the
	// producer's open transaction is aborted or will be, retrying cannot
	// succeed, and a new producer would fence the one that took over. The
	// broker's error is not in the chain, so no classifier that looks for
	// a retriable kafka.Error mistakes it for one. IsFenced matches it.
	ErrFenced = errors.New("kafkatxn: producer fenced by a newer producer with the same transactional id")
	// ErrAborted is wrapped by CommitPrepared's error when the transaction
	// was aborted (it timed out, or a producer of the same transactional
	// id started before it was committed): its records are gone.
	ErrAborted = errors.New("kafkatxn: transaction aborted")
	// ErrAbortable is wrapped by a TxProducer error after which the open
	// transaction cannot commit (the broker lost the producer's state, or
	// a batch's outcome is unknown): call Abort, then start again.
	ErrAbortable = errors.New("kafkatxn: transaction must be aborted")
)

// IsFenced reports whether err says the producer was fenced.
func IsFenced(err error) bool { return errors.Is(err, ErrFenced) }

// TxOptions configures a TxProducer. The zero value is valid.
type TxOptions struct {
	// ProducerOptions: timeouts, backoff, transport and clock, as for
	// Producer. DeliveryTimeout also bounds the retries of each
	// transaction request (AddPartitionsToTxn, EndTxn, ...).
	ProducerOptions
	// TransactionTimeout: the broker aborts a transaction open longer than
	// this. A transaction that a checkpoint recorded must still be open
	// when the chain that recorded it restarts, so with a two-phase-commit
	// sink this must exceed the checkpoint interval plus the longest
	// restart; the broker caps it at transaction.max.timeout.ms (15 min by
	// default). Default: DefaultTransactionTimeout.
	TransactionTimeout time.Duration
}

func (o *TxOptions) setDefaults() error {
	if o.TransactionTimeout < 0 {
		return fmt.Errorf("%w: negative TransactionTimeout", ErrInvalidOptions)
	}
	if o.TransactionTimeout == 0 {
		o.TransactionTimeout = DefaultTransactionTimeout
	}
	return o.ProducerOptions.setDefaults()
}

// Txn identifies one transaction: what a two-phase-commit sink records at
// its pre-commit so that a restart can commit it (CommitPrepared).
//
// Every transaction of a TxProducer has its own epoch (the producer bumps
// it after each commit or abort, as KIP-890 brokers do by themselves), so
// (ProducerID, Epoch) names one transaction, never a later one.
type Txn struct {
	TransactionalID string
	ProducerID      int64
	Epoch           int16
	// Partitions the transaction wrote to, with the offset of its first
	// record in each, sorted by topic and partition. Empty when the
	// transaction holds no records.
	Partitions []TxnPartition
}

// TxnPartition is a partition a transaction wrote to.
type TxnPartition struct {
	Topic       string
	Partition   int
	FirstOffset int64
}

// TxProducer is a transactional Kafka producer (KIP-98) for one
// transactional id: records written with Produce become visible to
// read_committed readers together, when Commit returns, or never, after
// Abort or a crash.
//
// NewTxProducer fences every earlier producer of the transactional id (its
// open transaction is aborted and its next request fails with ErrFenced).
// A transaction begins with the first Produce after NewTxProducer, Commit
// or Abort. The methods are safe for concurrent use and run one at a time.
type TxProducer struct {
	c    *txClient
	txid string

	mu     sync.Mutex
	pid    int64
	epoch  int16
	bump   bool // the last transaction ended: bump the epoch before the next
	parts  map[topicPartition]*txPart
	order  []topicPartition
	groups bool  // the open transaction holds consumer offsets
	broken error // ErrFenced or ErrAbortable: set until Abort (abortable) or forever (fenced)
	closed bool
}

type txPart struct {
	seq         int32
	firstOffset int64
	next        int64
}

// txClient sends the transaction coordinator's requests with retries.
type txClient struct {
	cl        *kafka.Client
	transport *kafka.Transport
	ownTrans  bool
	opts      TxOptions
}

func newTxClient(brokers []string, opts TxOptions) (*txClient, error) {
	if len(brokers) == 0 {
		return nil, fmt.Errorf("%w: no brokers", ErrInvalidOptions)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	c := &txClient{transport: opts.Transport, opts: opts}
	if c.transport == nil {
		c.transport, c.ownTrans = &kafka.Transport{}, true
	}
	c.cl = &kafka.Client{Addr: kafka.TCP(brokers...), Transport: c.transport, Timeout: opts.RequestTimeout}
	return c, nil
}

func (c *txClient) close() {
	if c.ownTrans {
		c.transport.CloseIdleConnections()
	}
}

// NewTxProducer finds the transaction coordinator of transactionalID,
// registers the id (InitProducerID), which fences earlier producers of it
// and aborts their open transaction, and returns a TxProducer.
func NewTxProducer(ctx context.Context, brokers []string, transactionalID string, opts TxOptions) (*TxProducer, error) {
	if transactionalID == "" {
		return nil, fmt.Errorf("%w: empty transactional id", ErrInvalidOptions)
	}
	c, err := newTxClient(brokers, opts)
	if err != nil {
		return nil, err
	}
	p := &TxProducer{c: c, txid: transactionalID, parts: map[topicPartition]*txPart{}}
	if err := p.initID(ctx, -1, -1); err != nil {
		c.close()
		return nil, err
	}
	return p, nil
}

// coordinatorErr reports whether a transaction request should be sent
// again as is: the coordinator moved or is loading (kafka-go looks the
// coordinator up with FindCoordinator, key type transaction, before every
// transactional request, so the next attempt goes to the new one), a
// previous transaction of the id is still completing, or the connection
// broke.
func coordinatorErr(err error) bool {
	if isKafkaErr(err, kafka.NotCoordinatorForGroup, kafka.GroupCoordinatorNotAvailable,
		kafka.GroupLoadInProgress, kafka.ConcurrentTransactions, kafka.TransactionCoordinatorFenced) {
		return true
	}
	return retriable(err)
}

func fencedErr(err error) bool {
	return isKafkaErr(err, kafka.ProducerFenced, kafka.InvalidProducerEpoch)
}

// concurrentTxBackoff is the wait before a request refused with
// CONCURRENT_TRANSACTIONS is sent again.
const concurrentTxBackoff = 20 * time.Millisecond

// retry calls f until it returns nil, a non-retriable error, or
// DeliveryTimeout runs out. Every call of f must be safe to repeat.
func (c *txClient) retry(ctx context.Context, op string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DeliveryTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		rctx, rcancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		err := f(rctx)
		rcancel()
		if err == nil {
			return nil
		}
		if fencedErr(err) {
			// %v, not %w: the broker's error must not make this look
			// retriable to a classifier.
			return fmt.Errorf("kafkatxn: %s: %w (%v)", op, ErrFenced, err)
		}
		if !coordinatorErr(err) {
			return fmt.Errorf("kafkatxn: %s: %w", op, err)
		}
		wait := c.opts.wait(attempt)
		if isKafkaErr(err, kafka.ConcurrentTransactions) {
			// The id's previous transaction is still writing its markers
			// (Kafka answers this to the first request after every EndTxn
			// for a few milliseconds; kfake never does): a short, fixed
			// wait, as the Java client's 20 ms for this error.
			wait = min(c.opts.InitialBackoff, concurrentTxBackoff)
			attempt-- // not a failure that grows the backoff
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatxn: %s: %w (last error: %w)", op, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// initID registers the transactional id, or with pid >= 0 bumps the epoch
// of (pid, epoch) (KIP-360: the broker refuses it when the epoch is not
// the current one, which fences a producer that was taken over). p.mu is
// held or p is not shared yet.
func (p *TxProducer) initID(ctx context.Context, pid int64, epoch int16) error {
	return p.c.retry(ctx, "init producer id", func(ctx context.Context) error {
		res, err := p.c.cl.InitProducerID(ctx, &kafka.InitProducerIDRequest{
			TransactionalID: p.txid, TransactionTimeoutMs: int(p.c.opts.TransactionTimeout.Milliseconds()),
			ProducerID: int(pid), ProducerEpoch: int(epoch),
		})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			return err
		}
		p.pid, p.epoch = int64(res.Producer.ProducerID), int16(res.Producer.ProducerEpoch)
		return nil
	})
}

// TransactionalID returns the producer's transactional id.
func (p *TxProducer) TransactionalID() string { return p.txid }

// Txn returns the identity of the open transaction: the producer id and
// epoch it will commit with, and the partitions it wrote to so far.
func (p *TxProducer) Txn() Txn {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := Txn{TransactionalID: p.txid, ProducerID: p.pid, Epoch: p.epoch}
	for _, tp := range p.order {
		t.Partitions = append(t.Partitions, TxnPartition{Topic: tp.topic, Partition: tp.partition, FirstOffset: p.parts[tp].firstOffset})
	}
	slices.SortFunc(t.Partitions, func(a, b TxnPartition) int {
		if a.Topic != b.Topic {
			return compareStrings(a.Topic, b.Topic)
		}
		return a.Partition - b.Partition
	})
	return t
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// usable returns why p cannot take part in a transaction, or nil; p.mu is
// held.
func (p *TxProducer) usable() error {
	if p.closed {
		return ErrClosed
	}
	return p.broken
}

// begin bumps the epoch after an ended transaction, so the next one has
// its own; p.mu is held.
func (p *TxProducer) begin(ctx context.Context) error {
	if !p.bump {
		return nil
	}
	if err := p.initID(ctx, p.pid, p.epoch); err != nil {
		if IsFenced(err) {
			p.broken = err
		}
		return err
	}
	p.bump = false
	return nil
}

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
		if err := p.addPartition(ctx, tp); err != nil {
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
	if IsFenced(err) {
		p.broken = err
	}
	return err
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
			p.broken = fmt.Errorf("kafkatxn: produce %s/%d: %w (%v)", tp.topic, tp.partition, ErrFenced, err)
			return 0, p.broken
		case isKafkaErr(err, kafka.OutOfOrderSequenceNumber, kafka.UnknownProducerId, kafka.InvalidTransactionState):
			// The broker has no state matching this transaction's: it
			// did not write the batch, and the transaction cannot go on.
			// A broker may say so to a fenced producer too (kfake does):
			// the coordinator tells which it is.
			if aerr := p.addPartition(dctx, tp); IsFenced(aerr) {
				return 0, p.broken
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
		case <-time.After(p.c.opts.wait(attempt + 1)):
		}
	}
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
	if IsFenced(err) {
		p.broken = err
	}
	return err
}

// Commit commits the open transaction (EndTxn): once it returns nil its
// records are visible to read_committed readers, and the next Produce
// begins a new transaction. A Commit with nothing written does nothing.
//
// Commit retries while the coordinator moves or is busy, until
// DeliveryTimeout; repeating a commit that went through is harmless. An
// error wrapping ErrFenced means the transaction was or will be aborted.
// After any other error the outcome is unknown: call Commit again, or
// resolve it later with CommitPrepared.
func (p *TxProducer) Commit(ctx context.Context) error { return p.end(ctx, true) }

// Abort aborts the open transaction: read_committed readers never see its
// records. It also clears an ErrAbortable state, so that the producer can
// begin a new transaction.
func (p *TxProducer) Abort(ctx context.Context) error { return p.end(ctx, false) }

func (p *TxProducer) end(ctx context.Context, commit bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.broken != nil && (commit || IsFenced(p.broken)) {
		return p.broken
	}
	if len(p.parts) > 0 || p.groups {
		op := "abort transaction"
		if commit {
			op = "commit transaction"
		}
		err := p.c.retry(ctx, op, func(ctx context.Context) error {
			res, err := p.c.cl.EndTxn(ctx, &kafka.EndTxnRequest{
				TransactionalID: p.txid, ProducerID: int(p.pid), ProducerEpoch: int(p.epoch), Committed: commit,
			})
			if err != nil {
				return err
			}
			return res.Error
		})
		if IsFenced(err) {
			p.broken = err
		}
		if err != nil {
			return err
		}
		p.bump = true
	}
	p.parts, p.order, p.groups, p.broken = map[topicPartition]*txPart{}, nil, false, nil
	return nil
}

// Close releases the connections. It does not end the open transaction: a
// transaction a checkpoint recorded must stay committable (CommitPrepared);
// the next producer of the transactional id aborts any other, and the broker
// aborts it after TransactionTimeout. Close is safe to call twice.
func (p *TxProducer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.c.close()
	}
	return nil
}

// CommitPrepared commits the transaction txn, recorded by a TxProducer
// (Txn) that may be gone, and returns nil once it is committed, whether by
// this call or before. It is the restore step of a two-phase commit: call
// it before a new TxProducer of the same transactional id starts, since
// that aborts any open transaction of the id.
//
// It sends EndTxn with txn's producer id and epoch, as the producer would
// have. Kafka answers a repeated commit of the transaction with success as
// long as the epoch is current; once the epoch has moved on (the producer
// began its next transaction, or the id was fenced or the transaction
// timed out), the outcome is read from the log instead: the transaction
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
	var settled bool
	err = c.retry(ctx, "commit prepared transaction", func(ctx context.Context) error {
		res, err := c.cl.EndTxn(ctx, &kafka.EndTxnRequest{
			TransactionalID: txn.TransactionalID, ProducerID: int(txn.ProducerID), ProducerEpoch: int(txn.Epoch), Committed: true,
		})
		if err == nil {
			err = res.Error
		}
		if err != nil && (fencedErr(err) || isKafkaErr(err, kafka.InvalidTransactionState, kafka.InvalidProducerIDMapping,
			kafka.TransactionalIDNotFound)) {
			// The epoch moved on, or the transaction ended the other
			// way: the log says how it ended.
			settled = true
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if !settled {
		return nil
	}
	first := txn.Partitions[0]
	var committed bool
	err = c.retry(ctx, "look up transaction outcome", func(ctx context.Context) error {
		var found bool
		var err error
		committed, found, err = findMarker(ctx, c, first, txn.ProducerID, txn.Epoch)
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
		return fmt.Errorf("kafkatxn: transaction %s (producer %d, epoch %d): %w", txn.TransactionalID, txn.ProducerID, txn.Epoch, err)
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
func findMarker(ctx context.Context, c *txClient, tp TxnPartition, pid int64, epoch int16) (commit, found bool, err error) {
	from := tp.FirstOffset
	for {
		fr, err := fetch(ctx, c.transport, c.cl.Addr, tp.Topic, tp.Partition, from, false, 1<<20, 0)
		if err != nil {
			return false, false, err
		}
		if fr.err != nil {
			return false, false, fr.err
		}
		next := from
		for _, b := range fr.batches {
			if b.lastOffset < from {
				continue
			}
			if b.control && b.producerID == pid && b.producerEpoch >= epoch {
				return b.commit, true, nil
			}
			next = max(next, b.lastOffset+1)
		}
		if next == from || next >= fr.highWatermark {
			return false, false, nil
		}
		from = next
	}
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
