package kafkatxn

import (
	"context"
	"errors"

	"github.com/segmentio/kafka-go"
)

var (
	// ErrInvalidOptions is wrapped by the error of a constructor
	// (NewProducer, NewTxProducer, NewReader, and CommitPrepared's client)
	// whose required arguments are missing or whose options cannot work: a
	// configuration to fix, found at start-up.
	ErrInvalidOptions = errors.New("kafkatxn: invalid options")
	// ErrInvalidArgument is wrapped by the error of a call given an
	// argument it cannot use (Produce without a topic or records,
	// SendOffsets without a group, a Txn without its ids): nothing was
	// sent.
	ErrInvalidArgument = errors.New("kafkatxn: invalid argument")
	// ErrClosed is returned by Produce after Close.
	ErrClosed = errors.New("kafkatxn: producer closed")
	// ErrOutcomeUnknown is wrapped by Produce errors after which the batch
	// may or may not be in the log: the delivery timeout ran out while the
	// broker did not answer. IsOutcomeUnknown matches it.
	ErrOutcomeUnknown = errors.New("kafkatxn: outcome unknown")
)

// IsOutcomeUnknown reports whether err leaves it open whether the records
// were written. Every other Produce error means they were not.
func IsOutcomeUnknown(err error) bool { return errors.Is(err, ErrOutcomeUnknown) }

func isKafkaErr(err error, codes ...kafka.Error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	for _, c := range codes {
		if ke == c {
			return true
		}
	}
	return false
}

// retriable reports whether sending the same request again may succeed: a
// broken connection, a timeout, or a broker error Kafka marks retriable.
func retriable(err error) bool {
	var ke kafka.Error
	if errors.As(err, &ke) {
		return ke.Temporary() || ke == kafka.ConcurrentTransactions
	}
	return !errors.Is(err, context.Canceled)
}

// definite reports whether a retriable error is an answer saying the request
// was not carried out (so the attempt wrote nothing).
func definite(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false // no answer: the request may have been carried out
	}
	return ke != kafka.RequestTimedOut && ke != kafka.NotEnoughReplicasAfterAppend
}
