package kafkasink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// state is what a checkpoint holds for the sink: the prepared transaction,
// with field names of its own so that renaming kafkatxn.Txn's fields never
// changes the format.
type state struct {
	Version int       `json:"v"`
	Txn     *txnState `json:"txn,omitempty"`
}

type txnState struct {
	ID         string `json:"id"`
	ProducerID int64  `json:"pid"`
	Epoch      int16  `json:"epoch"`
	// TV is the transaction protocol (kafkatxn.Txn.Version): 2 for
	// transactions v2, absent (0) for v1, which every checkpoint written
	// before transactions v2 ran.
	TV         int         `json:"tv,omitempty"`
	Partitions []partState `json:"parts"`
}

type partState struct {
	Topic     string `json:"t"`
	Partition int    `json:"p"`
	First     int64  `json:"first"`
}

func toState(t kafkatxn.Txn) *txnState {
	st := &txnState{ID: t.TransactionalID, ProducerID: t.ProducerID, Epoch: t.Epoch}
	if t.Version == 2 {
		st.TV = 2 // v1's state stays as it always was
	}
	for _, p := range t.Partitions {
		st.Partitions = append(st.Partitions, partState{Topic: p.Topic, Partition: p.Partition, First: p.FirstOffset})
	}
	return st
}

func (st *txnState) txn() kafkatxn.Txn {
	t := kafkatxn.Txn{TransactionalID: st.ID, ProducerID: st.ProducerID, Epoch: st.Epoch, Version: st.TV}
	for _, p := range st.Partitions {
		t.Partitions = append(t.Partitions, kafkatxn.TxnPartition{Topic: p.Topic, Partition: p.Partition, FirstOffset: p.First})
	}
	return t
}

const stateVersion = 1

func decodeState(data []byte) (state, error) {
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	switch {
	case st.Version > stateVersion:
		return st, fmt.Errorf("%w: version %d, this sink reads %d", ErrUnsupportedVersion, st.Version, stateVersion)
	case st.Version != stateVersion:
		return st, fmt.Errorf("%w: version %d", ErrCorrupt, st.Version)
	}
	if st.Txn != nil && (st.Txn.ID == "" || st.Txn.ProducerID < 0) {
		return st, fmt.Errorf("%w: transaction without id", ErrCorrupt)
	}
	return st, nil
}

// commitPrepared commits the transaction st recorded, if any; s.mu is
// held. A transaction that was aborted is an error wrapping both
// kafkatxn.ErrAborted and checkpoint.ErrOutputLost.
func (s *Sink) commitPrepared(ctx context.Context, st state) error {
	if st.Txn == nil {
		return nil
	}
	start := time.Now()
	if err := kafkatxn.CommitPrepared(ctx, s.brokers, st.Txn.txn(), s.opts.Tx); err != nil {
		outcome := outcomeFailed
		if errors.Is(err, kafkatxn.ErrAborted) {
			outcome = outcomeAborted
			err = fmt.Errorf("%w: %w", checkpoint.ErrOutputLost, err)
		}
		s.m.failed(err)
		s.m.transaction(outcome, start)
		return &Error{Op: "restore", Err: err}
	}
	s.m.transaction(outcomeRestored, start)
	return nil
}

// Resolve is the sink's checkpoint.Resolver: Attach calls it with the
// sink's state in the checkpoint it is about to restore, before it
// restores any participant. It commits the transaction the state recorded
// (kafkatxn.CommitPrepared: nothing to do if it was committed already).
// If that transaction was aborted instead (it outlived TransactionTimeout
// between the checkpoint's save and its commit, while the process was
// paused or down; or the broker expired its transactional id and the
// transaction with it), the error wraps kafkatxn.ErrAborted and
// checkpoint.ErrOutputLost: Attach falls back to the previous retained
// checkpoint, whose transaction was committed before this one was
// prepared, and the replay from there writes the lost records again.
func (s *Sink) Resolve(ctx context.Context, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if data == nil {
		return nil
	}
	st, err := decodeState(data)
	if err != nil {
		return err
	}
	if err := s.commitPrepared(ctx, st); err != nil {
		return err
	}
	s.resolved = bytes.Clone(data)
	return nil
}

// Restore resolves the transaction recorded in data: it belongs to a
// completed checkpoint, so it is committed (kafkatxn.CommitPrepared), which
// does nothing if it was committed already (or by Resolve). Then the
// sink's producer starts, which aborts any later transaction of the id
// (records written after the checkpoint, which the chain replays). If the
// transaction was aborted instead (it outlived TransactionTimeout),
// Restore fails with an error wrapping kafkatxn.ErrAborted and
// checkpoint.ErrOutputLost: output of a completed checkpoint is lost, and
// going on would hide it (Attach calls Resolve first, and falls back to an
// older checkpoint instead).
func (s *Sink) Restore(ctx context.Context, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	st, err := decodeState(data)
	if err != nil {
		return err
	}
	if s.resolved == nil || !bytes.Equal(s.resolved, data) {
		if err := s.commitPrepared(ctx, st); err != nil {
			return err
		}
	}
	s.resolved = nil
	s.bufs, s.order, s.prepared, s.err = map[outPartition][]kafkatxn.Record{}, nil, nil, nil
	s.m.age.ended() // the restored transaction is resolved; the next starts at the next record
	_, err = s.producer(ctx)
	return err
}
