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

var (
	// ErrInvalidOptions is wrapped by New's error for a missing argument
	// or an invalid option.
	ErrInvalidOptions = errors.New("kafkasink: invalid options")
	// ErrInvalidArgument is wrapped by Add's error for a record without
	// a topic or with a negative partition: nothing was buffered.
	ErrInvalidArgument = errors.New("kafkasink: invalid argument")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("kafkasink: closed")
	// ErrUnconfirmed is wrapped by a Snapshot *Error when the transaction
	// prepared at an earlier barrier was never confirmed by
	// CheckpointCompleted (that checkpoint failed after this sink's
	// snapshot, or its notification was lost). The sink cannot tell
	// whether that checkpoint is durable, so it can neither commit the
	// transaction nor add records to it: the chain must restart from its
	// newest checkpoint, whose restore resolves the transaction (the
	// error is Retryable, so kafkasource does that by itself).
	ErrUnconfirmed = errors.New("kafkasink: an earlier prepared transaction was not confirmed")
	// ErrCorruptState is wrapped by Restore's error for a state it cannot
	// decode.
	ErrCorruptState = errors.New("kafkasink: corrupt state")
)

// Error is a failed send, commit or barrier of the sink. The sink stays
// failed; the chain must restart from its last checkpoint, whose Restore
// resolves the transaction the checkpoint recorded and aborts any other.
type Error struct {
	Op  string // "send", "commit" or "snapshot"
	Err error
}

func (e *Error) Error() string { return "kafkasink: " + e.Op + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether a restart of the chain from its last
// checkpoint can get past the error (kafkasource restarts a chain whose
// error says so): always, except when the producer was fenced, which means
// another incarnation of the chain is running.
func (e *Error) Retryable() bool { return !kafkatxn.IsFenced(e.Err) }

// Options configures a Sink. The zero value is valid.
type Options struct {
	// BatchSize is how many records of one output partition are buffered
	// before they are sent (inside the open transaction). Larger batches
	// mean fewer produce requests and more memory; nothing is visible
	// downstream before the checkpoint's commit anyway. Default:
	// DefaultBatchSize.
	BatchSize int
	// Tx configures the transactional producer. Its TransactionTimeout
	// must exceed the checkpoint interval plus the longest restart of a
	// chain: a transaction the broker aborts before the restore commits
	// it makes Restore fail with kafkatxn.ErrAborted.
	Tx kafkatxn.TxOptions
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
type Sink struct {
	brokers []string
	txid    string
	opts    Options

	mu        sync.Mutex
	preparing bool // a pending part is sending the records of its barrier

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

var _ checkpoint.AsyncParticipant = (*Sink)(nil)

// New returns the Sink of the chain of source partition src. Its
// transactional id is prefix-<topic>-<partition> of src: stable, so the
// chain's next incarnation (after a crash, a restart or a rebalance to
// another instance) fences this one, as Kafka Streams does per task. prefix
// names the pipeline; two pipelines must not share one.
//
// New does not connect: the producer starts at the first write, snapshot
// or restore, after a restore has resolved the restored transaction.
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
	m, err := newMetrics(opts.MeterProvider, src)
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
		return ErrClosed
	}
	return s.err
}

// producer starts the transactional producer, which fences every earlier
// producer of the id and aborts its open transaction.
func (s *Sink) producer(ctx context.Context) (*kafkatxn.TxProducer, error) {
	if s.p != nil {
		return s.p, nil
	}
	p, err := kafkatxn.NewTxProducer(ctx, s.brokers, s.txid, s.opts.Tx)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: %w", err)
	}
	s.p = p
	return p, nil
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

// state is what a checkpoint holds for the sink: the prepared transaction,
// with field names of its own so that renaming kafkatxn.Txn's fields never
// changes the format.
type state struct {
	Version int       `json:"v"`
	Txn     *txnState `json:"txn,omitempty"`
}

type txnState struct {
	ID         string      `json:"id"`
	ProducerID int64       `json:"pid"`
	Epoch      int16       `json:"epoch"`
	Partitions []partState `json:"parts"`
}

type partState struct {
	Topic     string `json:"t"`
	Partition int    `json:"p"`
	First     int64  `json:"first"`
}

func toState(t kafkatxn.Txn) *txnState {
	st := &txnState{ID: t.TransactionalID, ProducerID: t.ProducerID, Epoch: t.Epoch}
	for _, p := range t.Partitions {
		st.Partitions = append(st.Partitions, partState{Topic: p.Topic, Partition: p.Partition, First: p.FirstOffset})
	}
	return st
}

func (st *txnState) txn() kafkatxn.Txn {
	t := kafkatxn.Txn{TransactionalID: st.ID, ProducerID: st.ProducerID, Epoch: st.Epoch}
	for _, p := range st.Partitions {
		t.Partitions = append(t.Partitions, kafkatxn.TxnPartition{Topic: p.Topic, Partition: p.Partition, FirstOffset: p.First})
	}
	return t
}

const stateVersion = 1

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
		s.m.failed(err)
		s.m.transaction(outcomeFailed, start)
		s.err = &Error{Op: "commit", Err: fmt.Errorf("checkpoint %d: %w", prepared, err)}
		return s.err
	}
	s.m.transaction(outcomeCommitted, start)
	s.prepared = nil
	return nil
}

// Restore resolves the transaction recorded in data: it belongs to a
// completed checkpoint, so it is committed (kafkatxn.CommitPrepared), which
// does nothing if it was committed already. Then the sink's producer
// starts, which aborts any later transaction of the id (records written
// after the checkpoint, which the chain replays). If the transaction was
// aborted instead (it outlived TransactionTimeout), Restore fails with an
// error wrapping kafkatxn.ErrAborted: output of a completed checkpoint is
// lost, and going on would hide it.
func (s *Sink) Restore(ctx context.Context, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptState, err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("%w: version %d", ErrCorruptState, st.Version)
	}
	if st.Txn != nil {
		if st.Txn.ID == "" || st.Txn.ProducerID < 0 {
			return fmt.Errorf("%w: transaction without id", ErrCorruptState)
		}
		start := time.Now()
		if err := kafkatxn.CommitPrepared(ctx, s.brokers, st.Txn.txn(), s.opts.Tx); err != nil {
			outcome := outcomeFailed
			if errors.Is(err, kafkatxn.ErrAborted) {
				outcome = outcomeAborted
			}
			s.m.failed(err)
			s.m.transaction(outcome, start)
			return fmt.Errorf("kafkasink: restore: %w", err)
		}
		s.m.transaction(outcomeRestored, start)
	}
	s.bufs, s.order, s.prepared, s.err = map[outPartition][]kafkatxn.Record{}, nil, nil, nil
	_, err := s.producer(ctx)
	return err
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
	if s.p != nil {
		return s.p.Close()
	}
	return nil
}
