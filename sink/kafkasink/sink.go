package kafkasink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// DefaultBatchSize is the default Options.BatchSize.
const DefaultBatchSize = 500

// Options configures a Sink. The zero value is valid.
type Options struct {
	// BatchSize is how many records of one output partition are buffered
	// before they are sent (inside the open transaction). Larger batches
	// mean fewer produce requests and more memory; nothing is visible
	// downstream before the checkpoint's commit anyway. Default:
	// DefaultBatchSize.
	BatchSize int
	// Tx configures the transactional producer. Its TransactionTimeout
	// (default kafkatxn.DefaultTransactionTimeout) bounds how long a
	// transaction may stay open, from its first record to the commit
	// after its checkpoint: it must exceed CheckpointInterval plus
	// ExpiryMargin (New checks) and must not exceed the broker's
	// transaction.max.timeout.ms (the first start of the producer
	// checks, with DescribeConfigs; a principal not allowed to describe
	// the cluster skips the check, and InitProducerID refuses such a
	// timeout instead). A checkpoint whose transaction comes within ExpiryMargin
	// of it is not saved (see Expired); one whose transaction the broker
	// aborts after the save is passed over at restore (see Resolve).
	Tx kafkatxn.TxOptions
	// ExpiryMargin is the time a prepared transaction must have left
	// before TransactionTimeout for its checkpoint to be saved: it covers
	// the checkpoint file's save and the commit after it. Larger declines
	// more checkpoints of slow chains; smaller risks a checkpoint whose
	// transaction the broker aborts between the save and the commit
	// (which a restore then passes over, replaying from an older one).
	// Default: TransactionTimeout / DefaultExpiryMarginDivisor (15 s of
	// the default 60 s).
	ExpiryMargin time.Duration
	// CheckpointInterval is the coordinator's checkpoint.Options.Interval,
	// which New checks TransactionTimeout against. Default:
	// checkpoint.DefaultInterval; negative: checkpoints are only
	// triggered (not checked).
	CheckpointInterval time.Duration
	// MeterProvider receives the sink's metrics (transactions by outcome,
	// records written, pre-commit and commit durations, fencing), each
	// with the source topic and partition. Default: a no-op provider.
	MeterProvider metric.MeterProvider
}

// Sink writes a processing chain's output records to Kafka in one
// transaction per checkpoint: a checkpoint.Participant for one source
// topic-partition. Records written between two barriers are sent inside
// the open transaction, prepared (flushed, identity recorded) by Snapshot,
// and committed by CheckpointCompleted.
//
// A Sink is a checkpoint.AsyncParticipant: at a barrier SnapshotAsync
// takes the records written before it, and the pending part sends them and
// records the transaction's identity in the coordinator's goroutine, while
// records written after the barrier are buffered for the next transaction.
// Add, SnapshotAsync and Restore are called from the chain's goroutine;
// the pending part and CheckpointCompleted from the coordinator's; the
// sink synchronises them with one mutex, which is not held while the
// pending part sends (Add only buffers meanwhile, so the producer is the
// pending part's alone).
//
// A Sink is also a checkpoint.Expirer (a checkpoint whose transaction is
// too close to its timeout is not saved) and a checkpoint.Resolver (a
// checkpoint whose transaction was aborted after its save is passed over
// at restore).
type Sink struct {
	brokers []string
	txid    string
	opts    Options

	mu        sync.Mutex
	preparing bool // a pending part is sending the records of its barrier
	checked   bool // TransactionTimeout was checked against the brokers'
	// resolved is the state Resolve committed, which Restore need not
	// commit again.
	resolved []byte

	p     *kafkatxn.TxProducer
	bufs  map[outPartition][]kafkatxn.Record
	order []outPartition
	// prepared is the transaction Snapshot recorded and CheckpointCompleted
	// has not committed yet; nil when none holds records.
	prepared   *kafkatxn.Txn
	preparedID checkpoint.ID
	err        error // sticky: a failed send or commit
	closed     bool
	m          metrics
}

type outPartition struct {
	topic     string
	partition int
}

var (
	_ checkpoint.AsyncParticipant = (*Sink)(nil)
	_ checkpoint.Expirer          = (*Sink)(nil)
	_ checkpoint.Resolver         = (*Sink)(nil)
	_ checkpoint.Starter          = (*Sink)(nil)
)

// New returns the Sink of the chain of source partition src. Its
// transactional id is prefix-<topic>-<partition> of src: stable, so the
// chain's next incarnation (after a crash, a restart or a rebalance to
// another instance) fences this one, as Kafka Streams does per task. prefix
// names the pipeline; two pipelines must not share one.
//
// New does not connect: the producer starts when the chain is attached
// (Start, or Restore after a restore has resolved the restored
// transaction), or at the first write or snapshot of a sink used without
// a coordinator.
func New(brokers []string, prefix string, src checkpoint.TopicPartition, opts Options) (*Sink, error) {
	if len(brokers) == 0 || prefix == "" || src.Topic == "" || src.Partition < 0 {
		return nil, fmt.Errorf("%w: brokers, a prefix and a source partition are required", ErrInvalidOptions)
	}
	if opts.BatchSize < 0 {
		return nil, fmt.Errorf("%w: negative BatchSize", ErrInvalidOptions)
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.Tx.TransactionTimeout < 0 || opts.ExpiryMargin < 0 {
		return nil, fmt.Errorf("%w: negative TransactionTimeout or ExpiryMargin", ErrInvalidOptions)
	}
	if opts.Tx.TransactionTimeout == 0 {
		opts.Tx.TransactionTimeout = kafkatxn.DefaultTransactionTimeout
	}
	if opts.ExpiryMargin == 0 {
		opts.ExpiryMargin = opts.Tx.TransactionTimeout / DefaultExpiryMarginDivisor
	}
	if opts.CheckpointInterval == 0 {
		opts.CheckpointInterval = checkpoint.DefaultInterval
	}
	if opts.CheckpointInterval > 0 && opts.Tx.TransactionTimeout <= opts.CheckpointInterval+opts.ExpiryMargin {
		return nil, &TimeoutError{TransactionTimeout: opts.Tx.TransactionTimeout, Setting: intervalSetting,
			Limit: opts.CheckpointInterval + opts.ExpiryMargin}
	}
	m, err := newMetrics(opts.MeterProvider, src, opts.Tx.TransactionTimeout)
	if err != nil {
		return nil, err
	}
	return &Sink{
		brokers: brokers, opts: opts, bufs: map[outPartition][]kafkatxn.Record{},
		txid: fmt.Sprintf("%s-%s-%d", prefix, src.Topic, src.Partition),
		m:    m,
	}, nil
}

// TransactionalID returns the sink's transactional id.
func (s *Sink) TransactionalID() string { return s.txid }

func (s *Sink) usable() error {
	if s.closed {
		return errClosed
	}
	return s.err
}

// producer starts the transactional producer, which fences every earlier
// producer of the id and aborts its open transaction.
func (s *Sink) producer(ctx context.Context) (*kafkatxn.TxProducer, error) {
	if s.p != nil {
		return s.p, nil
	}
	if err := s.checkTimeout(ctx); err != nil {
		return nil, err
	}
	p, err := kafkatxn.NewTxProducer(ctx, s.brokers, s.txid, s.opts.Tx)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: %w", err)
	}
	s.p = p
	return p, nil
}

// Start is the sink's checkpoint.Starter: Attach calls it once the
// chain's starting point is decided, restored or fresh, before the
// chain's first record. It starts the transactional producer (after a
// restore, Restore did already), whose InitProducerID fences every earlier
// producer of the transactional id and aborts its open transaction. So a
// revoked owner still running (paused past its session timeout, it does
// not know yet) can no longer commit a transaction once this owner is
// attached: before, a fresh start's producer started at its first write,
// and a revoked owner's commit until then went through, its records
// written twice once this owner's replay wrote them again.
func (s *Sink) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	_, err := s.producer(ctx)
	return err
}

// Add adds recs for topic's partition to the open transaction. They are
// buffered and sent in batches of BatchSize, and become visible to
// read_committed consumers when the next checkpoint completes. While a
// prepared transaction waits for its checkpoint to complete, records are
// only buffered. An error (a failed send, a fenced producer) is sticky:
// the chain must restart from its last checkpoint.
func (s *Sink) Add(ctx context.Context, topic string, partition int, recs ...kafkatxn.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if topic == "" || partition < 0 {
		return fmt.Errorf("%w: topic and partition >= 0 are required", ErrInvalidArgument)
	}
	op := outPartition{topic, partition}
	buf, ok := s.bufs[op]
	if !ok {
		s.order = append(s.order, op)
	}
	s.bufs[op] = append(buf, recs...)
	if s.prepared == nil && !s.preparing && len(s.bufs[op]) >= s.opts.BatchSize {
		return s.flush(ctx, op)
	}
	return nil
}

func (s *Sink) flush(ctx context.Context, op outPartition) error {
	if err := s.send(ctx, op, s.bufs[op]); err != nil {
		s.err = err
		return err
	}
	clear(s.bufs[op])
	s.bufs[op] = s.bufs[op][:0]
	return nil
}

// send sends buf to op in the open transaction. Its error must break the
// sink (the caller sets s.err: a pending part calls send without the lock).
func (s *Sink) send(ctx context.Context, op outPartition, buf []kafkatxn.Record) error {
	if len(buf) == 0 {
		return nil
	}
	p, err := s.producer(ctx)
	if err != nil {
		return err
	}
	s.m.age.opened(time.Now())
	for len(buf) > 0 {
		n := min(len(buf), s.opts.BatchSize)
		if _, err := p.Produce(ctx, op.topic, op.partition, buf[:n]...); err != nil {
			s.m.failed(err)
			return &Error{Op: "send", Err: err}
		}
		s.m.records.Add(context.Background(), int64(n), s.m.opt)
		buf = buf[n:]
	}
	return nil
}

// Snapshot sends every buffered record and returns the identity of the
// open transaction (transactional id, producer id, epoch, partitions): the
// pre-commit of a two-phase commit. The transaction is committed by
// CheckpointCompleted, or after a crash by the Restore of this checkpoint.
// It is SnapshotAsync and the wait for its part.
func (s *Sink) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	pend, err := s.SnapshotAsync(ctx, id)
	if err != nil {
		return nil, err
	}
	return pend(ctx)
}

// SnapshotAsync takes the records buffered before the barrier and returns
// the pre-commit as a pending part: it sends them into the open transaction
// and returns the transaction's identity, as Snapshot does. Records written
// meanwhile are buffered for the next transaction. A part called with a
// cancelled context (an aborted checkpoint) sends nothing and puts its
// records back before the ones written after its barrier.
func (s *Sink) SnapshotAsync(ctx context.Context, id checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	if s.prepared != nil || s.preparing {
		s.err = &Error{Op: "snapshot", Err: fmt.Errorf("%w: transaction of checkpoint %d, now at checkpoint %d",
			ErrUnconfirmed, s.preparedID, id)}
		return nil, s.err
	}
	bufs, order := s.bufs, s.order
	s.bufs, s.order = make(map[outPartition][]kafkatxn.Record, len(order)), nil
	s.preparing = true
	return func(ctx context.Context) ([]byte, error) {
		if ctx.Err() != nil {
			s.putBack(bufs, order)
			return nil, ctx.Err()
		}
		start := time.Now()
		defer func() { s.m.precommit.Record(context.Background(), time.Since(start).Seconds(), s.m.opt) }()
		// The producer is this part's alone until preparing ends: Add
		// only buffers meanwhile.
		var err error
		for _, op := range order {
			if err = s.send(ctx, op, bufs[op]); err != nil {
				break
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.preparing = false
		if err != nil {
			if s.err == nil {
				s.err = err
			}
			return nil, err
		}
		st := state{Version: stateVersion}
		if s.p != nil {
			if txn := s.p.Txn(); len(txn.Partitions) > 0 {
				st.Txn = toState(txn)
				s.prepared, s.preparedID = &txn, id
				if !txn.Expires.IsZero() {
					s.m.age.prepare(txn.Expires.Add(-s.opts.Tx.TransactionTimeout))
				}
			}
		}
		return json.Marshal(st)
	}, nil
}

// putBack returns the records of an aborted barrier to the buffers, before
// the records written after it.
func (s *Sink) putBack(bufs map[outPartition][]kafkatxn.Record, order []outPartition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.preparing = false
	for _, op := range s.order {
		if _, ok := bufs[op]; !ok {
			order = append(order, op)
		}
		bufs[op] = append(bufs[op], s.bufs[op]...)
	}
	s.bufs, s.order = bufs, order
}

// CheckpointCompleted commits the transaction prepared at checkpoint id or
// before; records buffered meanwhile go into the next transaction (Add
// sends them once a batch is full, the next barrier at the latest). The
// lock is not held during the commit, so the chain's Add does not wait
// for it: while a transaction is prepared, Add only buffers. A
// repeated notification does nothing. A failed commit is returned (the
// chain restarts, and the restore commits the transaction); one that says
// the producer was fenced (kafkatxn.ErrFenced) means another incarnation of
// the chain took over.
func (s *Sink) CheckpointCompleted(ctx context.Context, id checkpoint.ID) error {
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.prepared == nil || id < s.preparedID {
		s.mu.Unlock()
		return nil
	}
	p, prepared := s.p, s.preparedID
	s.mu.Unlock()
	start := time.Now()
	err := p.Commit(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		outcome := outcomeFailed
		if errors.Is(err, kafkatxn.ErrTimedOut) {
			// Saved, then aborted by the broker before this commit (a
			// pause longer than ExpiryMargin): the restore passes this
			// checkpoint over (Resolve).
			outcome = outcomeExpired
		}
		s.m.failed(err)
		s.m.transaction(outcome, start)
		s.err = &Error{Op: "commit", Err: fmt.Errorf("checkpoint %d: %w", prepared, err)}
		return s.err
	}
	s.m.transaction(outcomeCommitted, start)
	s.prepared = nil
	s.m.age.ended()
	return nil
}

// Close releases the producer. It ends no transaction: a prepared one must
// stay committable by the restore, and an open one is aborted by the
// chain's next incarnation (or the broker's transaction timeout). Buffered
// records are dropped; the chain replays them. Close is safe to call twice.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.m.age.ended()
	s.m.close()
	if s.p != nil {
		return s.p.Close()
	}
	return nil
}
