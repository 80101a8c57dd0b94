package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// errUnconfirmed mirrors kafkasink.ErrUnconfirmed.
var errUnconfirmed = errors.New("kafkasink model: an earlier prepared transaction was not confirmed")

// txSink is a stand-in for kafkasink.Sink, which needs a Kafka broker
// (kafkatxn dials one): the same protocol, line for line, against the
// Broker model. SnapshotAsync takes the records buffered before the
// barrier; its pending part sends them into the open transaction and
// returns the transaction's identity (the pre-commit); CheckpointCompleted
// commits it; Restore commits the restored checkpoint's transaction
// (CommitPrepared) and starts a producer, which aborts any later one. An
// error is sticky, as in the real sink. Keep it in step with
// sink/kafkasink/sink.go.
type txSink struct {
	b     *Broker
	txid  string
	batch int

	started   bool
	pid       int64
	epoch     int16
	open      *txn // the transaction records were sent into, nil when none
	buf       []string
	preparing bool
	prepared  *txn
	prepID    checkpoint.ID
	err       error
}

type txSinkState struct {
	Txn *txnRef `json:"txn,omitempty"`
}

type txnRef struct {
	ID    string `json:"id"`
	PID   int64  `json:"pid"`
	Epoch int16  `json:"epoch"`
	Seq   int    `json:"seq"`
}

var _ checkpoint.AsyncParticipant = (*txSink)(nil)

func (s *txSink) producer() {
	if !s.started {
		s.pid, s.epoch = s.b.InitProducer(s.txid)
		s.started = true
	}
}

func (s *txSink) send(vals []string) error {
	if len(vals) == 0 {
		return nil
	}
	s.producer()
	t, err := s.b.Produce(s.txid, s.pid, s.epoch, vals)
	if err != nil {
		return fmt.Errorf("kafkasink model: send: %w", err)
	}
	s.open = t
	return nil
}

// Add is kafkasink.Sink.Add.
func (s *txSink) Add(v string) error {
	if s.err != nil {
		return s.err
	}
	s.buf = append(s.buf, v)
	if s.prepared == nil && !s.preparing && len(s.buf) >= s.batch {
		if err := s.send(s.buf); err != nil {
			s.err = err
			return err
		}
		s.buf = nil
	}
	return nil
}

func (s *txSink) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	p, err := s.SnapshotAsync(ctx, id)
	if err != nil {
		return nil, err
	}
	return p(ctx)
}

func (s *txSink) SnapshotAsync(_ context.Context, id checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.prepared != nil || s.preparing {
		s.err = fmt.Errorf("%w: transaction of checkpoint %d, now at checkpoint %d", errUnconfirmed, s.prepID, id)
		return nil, s.err
	}
	buf := s.buf
	s.buf = nil
	s.preparing = true
	return func(ctx context.Context) ([]byte, error) {
		if ctx.Err() != nil {
			s.preparing = false
			s.buf = append(buf, s.buf...)
			return nil, ctx.Err()
		}
		err := s.send(buf)
		s.preparing = false
		if err != nil {
			if s.err == nil {
				s.err = err
			}
			return nil, err
		}
		var st txSinkState
		if s.open != nil {
			st.Txn = &txnRef{ID: s.txid, PID: s.open.pid, Epoch: s.open.epoch, Seq: s.open.seq}
			s.prepared, s.prepID = s.open, id
		}
		return json.Marshal(st)
	}, nil
}

func (s *txSink) CheckpointCompleted(_ context.Context, id checkpoint.ID) error {
	if s.err != nil {
		return s.err
	}
	if s.prepared == nil || id < s.prepID {
		return nil
	}
	if err := s.b.Commit(s.txid, s.pid, s.epoch); err != nil {
		s.err = fmt.Errorf("kafkasink model: commit of checkpoint %d: %w", s.prepID, err)
		return s.err
	}
	s.prepared, s.open = nil, nil
	return nil
}

// The fix of breach 1 (branch txexpiry) adds two optional interfaces to
// checkpoint, Expirer and Resolver, which kafkasink.Sink implements; the
// stand-in implements them too, so that a coordinator that knows them
// calls them (today's ignores them). Keep them in step with
// sink/kafkasink/expiry.go and restore.go.

// expiryMargin mirrors kafkasink's default Options.ExpiryMargin:
// TransactionTimeout / DefaultExpiryMarginDivisor.
const expiryMargin = txnTimeout / 4

// Expired is kafkasink.Sink.Expired: the transaction prepared for id, with
// less than expiryMargin left of the broker's timeout (counted from its
// first record, on the broker's clock: kafkasink counts on the monotonic
// clock, which a wall-clock jump does not move), fails the sink and is
// aborted; the checkpoint is not saved.
func (s *txSink) Expired(_ context.Context, id checkpoint.ID) error {
	if s.prepared == nil || s.prepID != id {
		return nil
	}
	left := s.prepared.start.Add(s.b.TxnTimeout).Sub(s.b.clock())
	if left > expiryMargin {
		return nil
	}
	err := fmt.Errorf("kafkasink model: checkpoint %d: transaction expires in %v (margin %v)", id, left, expiryMargin)
	if s.err == nil {
		s.err = err
	}
	_ = s.b.Abort(s.txid, s.pid, s.epoch)
	return err
}

// Resolve is kafkasink.Sink.Resolve: it commits the transaction the state
// recorded; one the broker aborted is output lost for good.
func (s *txSink) Resolve(_ context.Context, data []byte) error {
	if data == nil {
		return nil
	}
	var st txSinkState
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	if st.Txn == nil {
		return nil
	}
	err := s.b.CommitPrepared(st.Txn.ID, st.Txn.PID, st.Txn.Epoch, st.Txn.Seq)
	if errors.Is(err, errAborted) {
		return outputLost(err)
	}
	return err
}

// outputLost marks an error of Resolve as output lost for good, which
// makes Attach fall back to an older checkpoint, as kafkasink's restore.go
// does.
func outputLost(err error) error {
	return fmt.Errorf("kafkasink model: %w: %w", checkpoint.ErrOutputLost, err)
}

// Start is kafkasink.Sink.Start (checkpoint.Starter): Attach calls it,
// restored or fresh, before the chain's first record; it starts the
// producer, whose InitProducerID fences a revoked owner still running.
// Restore started it already after a restore.
func (s *txSink) Start(context.Context) error {
	if s.err != nil {
		return s.err
	}
	s.producer()
	return nil
}

func (s *txSink) Restore(_ context.Context, data []byte) error {
	var st txSinkState
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	if st.Txn != nil {
		if err := s.b.CommitPrepared(st.Txn.ID, st.Txn.PID, st.Txn.Epoch, st.Txn.Seq); err != nil {
			return fmt.Errorf("kafkasink model: restore: %w", err)
		}
	}
	s.buf, s.prepared, s.open, s.err = nil, nil, nil, nil
	s.started = false
	s.producer()
	return nil
}
