package kafkapub

import (
	"errors"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// IsOutcomeUnknown reports whether a Publish error leaves it open whether the
// message was written: the broker may hold it although Publish failed. It
// returns false only for errors the broker answered with, which mean the
// message was not written (except NotEnoughReplicasAfterAppend, which means
// it was written to the leader but not replicated, and RequestTimedOut).
//
// A retriable refusal (NotEnoughReplicas, NotLeaderForPartition, ...) is
// definite only when it answered the one attempt. When Options.MaxAttempts
// allowed retries, kafka-go made several attempts and returns the last
// answer; an earlier attempt may have been written before its answer was
// lost, so Publish reports such an error as unknown. A non-retriable refusal
// (MessageSizeTooLarge, an authorization error) stays definite: the broker
// refuses every attempt of the same message alike.
//
// For IdempotentPublisher it follows kafkatxn's producer, which knows: only
// an error wrapping kafkatxn.ErrOutcomeUnknown is unknown.
//
// Either way the webhook is answered 503 and retried; the distinction tells
// an operator whether duplicates downstream are to be expected.
func IsOutcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	var rej *idempotency.RejectError
	if errors.As(err, &rej) {
		return false // refused before anything was sent
	}
	var re *retriedError
	if errors.As(err, &re) {
		return true
	}
	var de *definiteError
	if errors.As(err, &de) {
		return false
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && IsOutcomeUnknown(e) {
				return true
			}
		}
		return we.Count() == 0
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		return ke == kafka.NotEnoughReplicasAfterAppend || ke == kafka.RequestTimedOut
	}
	return true
}

// retriedError is a broker's refusal that was the last of several attempts.
// It unwraps to the refusal, so errors.Is and errors.As still match it.
type retriedError struct {
	err error
}

func (e *retriedError) Error() string {
	return e.err.Error() + " (after retries; an earlier attempt may have been written)"
}

func (e *retriedError) Unwrap() error { return e.err }

// flatten turns kafka.WriteErrors of one message into its one error, so that
// errors.Is and errors.As see it.
func flatten(err error) error {
	if err == nil {
		return nil // before we, which lives on the heap (errors.As takes its address)
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) && we.Count() == 1 {
		for _, e := range we {
			if e != nil {
				return e
			}
		}
	}
	return err
}
