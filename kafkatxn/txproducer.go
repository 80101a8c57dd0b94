package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
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
	// ErrTimedOut is wrapped, instead of ErrFenced, by the error of a
	// TxProducer whose open transaction the broker refused after it had
	// been open for TransactionTimeout or longer: the broker aborted it by
	// its timeout and bumped the producer's epoch, so it answers as to a
	// fenced producer, although no other producer of the id need exist.
	// It is final for the producer, as ErrFenced is (its epoch is gone),
	// but a new producer of the id fences nobody who should run: IsFenced
	// does not match it. The transaction's age is measured from just
	// before its first partition was added, so it is never shorter than
	// the broker's.
	ErrTimedOut = errors.New("kafkatxn: transaction aborted by the broker's transaction timeout")
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
	// this (Txn.Expires says when, at the earliest). A two-phase-commit
	// sink must commit its transaction within it, so it must exceed the
	// checkpoint interval plus the time a checkpoint takes; a transaction
	// a checkpoint recorded that the broker aborted before the commit is
	// reported by CommitPrepared (ErrAborted). The broker caps it at
	// transaction.max.timeout.ms (15 min by default; see
	// MaxTransactionTimeout). Default: DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// TransactionsV1 keeps transactions v1 where the broker offers v2
	// (KIP-890 part 2): for measuring one against the other, or for a
	// cluster whose transaction.version is to be downgraded. Default
	// false: v2 wherever the broker's finalized transaction.version is 2
	// or more (see TxProducer.TransactionVersion).
	TransactionsV1 bool
	// Logger, if set, gets one line per TxProducer saying which
	// transaction protocol it runs. Default: no logging.
	Logger *slog.Logger
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
// Every transaction of a TxProducer has its own epoch (with transactions
// v2 the broker bumps it at each commit or abort; with v1 the producer
// bumps it itself), so (ProducerID, Epoch) names one transaction, never a
// later one.
type Txn struct {
	TransactionalID string
	ProducerID      int64
	Epoch           int16
	// Version is the transaction protocol the transaction runs (2:
	// transactions v2, KIP-890 part 2; 1 or 0: v1), which CommitPrepared
	// must speak to commit it. A Txn recorded before the field existed
	// reads as 0: v1, as it ran.
	Version int
	// Partitions the transaction wrote to, with the offset of its first
	// record in each, sorted by topic and partition. Empty when the
	// transaction holds no records.
	Partitions []TxnPartition
	// Expires is the earliest time at which the broker may abort the
	// transaction by its timeout: TransactionTimeout after the moment
	// just before the producer added the transaction's first partition
	// (the broker starts its clock when it gets that request, later).
	// Zero when the transaction holds nothing. It carries a monotonic
	// clock reading: compare it with time.Now, in this process only.
	Expires time.Time
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
	// v2: the transactions are v2 (KIP-890 part 2): partitions join the
	// transaction with their first Produce, the group with its
	// TxnOffsetCommit, and EndTxn returns the next epoch. It changes
	// only between transactions (followVersion), with p.mu held.
	v2 bool
	// versionRead is when transaction.version was last read;
	// versionEvery, how often it is read again (versionRecheck).
	versionRead  time.Time
	versionEvery time.Duration

	mu     sync.Mutex
	pid    int64
	epoch  int16
	bump   bool // the last transaction ended: bump the epoch before the next
	parts  map[topicPartition]*txPart
	order  []topicPartition
	groups bool // the open transaction holds consumer offsets
	// offsets: a TxnOffsetCommit of the open transaction was answered
	// with success (v2, where it adds the group to the transaction).
	offsets bool
	// started is when the open transaction began, taken just before its
	// first AddPartitionsToTxn or AddOffsetsToTxn; zero when none is
	// open.
	started time.Time
	broken  error // ErrFenced or ErrAbortable: set until Abort (abortable) or forever (fenced)
	closed  bool
}

type txPart struct {
	seq         int32
	firstOffset int64
	next        int64
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
	p := &TxProducer{c: c, txid: transactionalID, parts: map[topicPartition]*txPart{}, versionEvery: versionRecheck}
	p.versionRead = time.Now()
	v, err := c.transactionVersion(ctx)
	if err != nil {
		c.close()
		return nil, err
	}
	p.v2 = v == 2
	if err := p.initID(ctx, -1, -1); err != nil {
		c.close()
		return nil, err
	}
	if l := c.opts.Logger; l != nil {
		l.Info("kafkatxn: transactional producer started", "transactional_id", transactionalID,
			"transaction_version", v, "producer_id", p.pid, "epoch", p.epoch)
	}
	return p, nil
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

// TransactionVersion returns the transaction protocol the producer runs: 2
// (KIP-890 part 2: the broker adds partitions with their first Produce and
// bumps the epoch at every EndTxn) where the broker's finalized
// transaction.version is 2 or more and TxOptions.TransactionsV1 is not
// set, else 1 (the producer adds partitions with AddPartitionsToTxn and
// bumps the epoch itself with InitProducerId after every transaction).
// A running producer follows a change of the broker's level at the start
// of a transaction (read again at most every 30 seconds), so the result
// may change between transactions; Txn().Version is the open one's.
func (p *TxProducer) TransactionVersion() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version()
}

// TransactionalID returns the producer's transactional id.
func (p *TxProducer) TransactionalID() string { return p.txid }

// Txn returns the identity of the open transaction: the producer id and
// epoch it will commit with, and the partitions it wrote to so far.
func (p *TxProducer) Txn() Txn {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := Txn{TransactionalID: p.txid, ProducerID: p.pid, Epoch: p.epoch, Version: p.version()}
	if !p.started.IsZero() {
		t.Expires = p.started.Add(p.c.opts.TransactionTimeout)
	}
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

// starting marks the open transaction as begun, before its first request
// to the coordinator; p.mu is held.
func (p *TxProducer) starting() {
	if p.started.IsZero() {
		p.started = time.Now()
	}
}

// refused returns err, with ErrTimedOut in place of ErrFenced when the
// open transaction is as old as TransactionTimeout or older, and marks
// the producer broken by it if it is either; p.mu is held.
func (p *TxProducer) refused(err error) error {
	if !IsFenced(err) {
		return err
	}
	if !p.started.IsZero() && time.Since(p.started) >= p.c.opts.TransactionTimeout {
		err = fmt.Errorf("kafkatxn: transaction open for %v, TransactionTimeout %v: %w (%v)",
			time.Since(p.started).Round(time.Millisecond), p.c.opts.TransactionTimeout, ErrTimedOut, err)
	}
	p.broken = err
	return err
}

// begin, before a transaction's first request, follows a change of the
// broker's transaction.version and bumps the epoch after an ended v1
// transaction, so the next one has its own; p.mu is held.
func (p *TxProducer) begin(ctx context.Context) error {
	p.followVersion(ctx)
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

// Commit commits the open transaction (EndTxn): once it returns nil its
// records are visible to read_committed readers, and the next Produce
// begins a new transaction. A Commit with nothing written does nothing.
//
// Commit retries while the coordinator moves or is busy, until
// DeliveryTimeout; repeating a commit that went through is harmless. An
// error wrapping ErrFenced means the transaction was or will be aborted;
// one wrapping ErrTimedOut, that the broker aborted it by its timeout.
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
	if p.broken != nil && (commit || IsFenced(p.broken) || errors.Is(p.broken, ErrTimedOut)) {
		return p.broken
	}
	if len(p.parts) > 0 || p.groups {
		if p.v2 && commit && !p.offsets && !p.wrote() {
			// Transactions v2: no batch or offsets were confirmed
			// written, so the broker may never have added a partition
			// or group, and it refuses to commit a transaction it does
			// not have (INVALID_TXN_STATE) but accepts any abort.
			// Aborting commits nothing, as committing would.
			commit = false
		}
		op := "abort transaction"
		if commit {
			op = "commit transaction"
		}
		err := p.c.endTxn(ctx, op, p.txid, p.pid, p.epoch, commit, p.v2, func(pid int64, epoch int16) {
			p.pid, p.epoch = pid, epoch
		})
		if err != nil && p.v2 && commit && isKafkaErr(err, kafka.InvalidTransactionState) {
			// Transactions v2: the coordinator holds the transaction as
			// ended otherwise, with the epoch bumped past ours (an abort
			// by its timeout answers so, where v1 says PRODUCER_FENCED):
			// as final as fencing, or ErrTimedOut when it is that old.
			err = fmt.Errorf("kafkatxn: commit transaction: %w (%v)", ErrFenced, err)
		}
		if err != nil {
			return p.refused(err)
		}
		p.bump = !p.v2 // v2: the broker bumped the epoch
	}
	p.parts, p.order, p.groups, p.offsets, p.broken = map[topicPartition]*txPart{}, nil, false, false, nil
	p.started = time.Time{}
	return nil
}

// wrote reports whether a batch of the open transaction was written; p.mu
// is held.
func (p *TxProducer) wrote() bool {
	for _, ps := range p.parts {
		if ps.firstOffset >= 0 {
			return true
		}
	}
	return false
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
