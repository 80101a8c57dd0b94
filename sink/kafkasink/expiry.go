package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// DefaultExpiryMarginDivisor: the default Options.ExpiryMargin is
// TransactionTimeout divided by it.
const DefaultExpiryMarginDivisor = 4

// TimeoutError is returned by New, and by the sink's first write, snapshot
// or restore, when Options.Tx.TransactionTimeout cannot work: not above
// the checkpoint interval plus the expiry margin (a checkpoint could never
// be saved in time), or above the broker's transaction.max.timeout.ms
// (InitProducerID would refuse it). It wraps ErrInvalidOptions.
type TimeoutError struct {
	TransactionTimeout time.Duration
	// Setting names what TransactionTimeout was checked against:
	// "Options.CheckpointInterval + Options.ExpiryMargin" or the broker's
	// "transaction.max.timeout.ms".
	Setting string
	Limit   time.Duration
}

func (e *TimeoutError) Error() string {
	if e.Setting == brokerMaxSetting {
		return fmt.Sprintf("kafkasink: Options.Tx.TransactionTimeout %v exceeds the broker's %s %v",
			e.TransactionTimeout, e.Setting, e.Limit)
	}
	return fmt.Sprintf("kafkasink: Options.Tx.TransactionTimeout %v must exceed %s (%v)", e.TransactionTimeout, e.Setting, e.Limit)
}

func (e *TimeoutError) Unwrap() error { return ErrInvalidOptions }

const (
	brokerMaxSetting = "transaction.max.timeout.ms"
	intervalSetting  = "Options.CheckpointInterval + Options.ExpiryMargin"
)

// checkTimeout refuses a TransactionTimeout above the brokers'
// transaction.max.timeout.ms, once per sink, before its producer starts.
func (s *Sink) checkTimeout(ctx context.Context) error {
	if s.checked {
		return nil
	}
	limit, err := kafkatxn.MaxTransactionTimeout(ctx, s.brokers, s.opts.Tx)
	if errors.Is(err, kafka.ClusterAuthorizationFailed) {
		// A principal without DescribeConfigs on the cluster: the check
		// cannot run, and InitProducerID still refuses a timeout above
		// the maximum (INVALID_TRANSACTION_TIMEOUT), only less clearly.
		s.checked = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("kafkasink: %w", err)
	}
	if s.opts.Tx.TransactionTimeout > limit {
		return &TimeoutError{TransactionTimeout: s.opts.Tx.TransactionTimeout, Setting: brokerMaxSetting, Limit: limit}
	}
	s.checked = true
	return nil
}

// Expired is the sink's checkpoint.Expirer, which the coordinator calls
// just before it saves checkpoint id. It returns an error wrapping
// ErrExpired and checkpoint.ErrExpired when the transaction prepared for
// id has less than Options.ExpiryMargin left of TransactionTimeout,
// counted from just before its first partition was added (so never less
// than the broker's count): the broker might abort it before the save and
// the commit finish. Then the checkpoint is not saved; the sink aborts the
// transaction (best effort: the chain's next producer aborts it anyway)
// and stays failed with a Retryable *Error, so the chain restarts from its
// last checkpoint and its replay writes the records again, into a new
// transaction.
func (s *Sink) Expired(ctx context.Context, id checkpoint.ID) error {
	s.mu.Lock()
	if s.closed || s.prepared == nil || s.preparedID != id || s.prepared.Expires.IsZero() {
		s.mu.Unlock()
		return nil
	}
	left := time.Until(s.prepared.Expires)
	if left > s.opts.ExpiryMargin {
		s.mu.Unlock()
		return nil
	}
	err := &Error{Op: "snapshot", Err: fmt.Errorf("checkpoint %d: %w (%w): %v left of TransactionTimeout %v, ExpiryMargin %v",
		id, ErrExpired, checkpoint.ErrExpired, left.Round(time.Millisecond), s.opts.Tx.TransactionTimeout, s.opts.ExpiryMargin)}
	if s.err == nil {
		s.err = err
	}
	p := s.p
	s.mu.Unlock()
	s.m.outcome(outcomeExpired)
	if p != nil {
		if p.Abort(ctx) == nil { // an error changes nothing: the sink is failed
			s.m.age.ended()
		}
	}
	return err
}
