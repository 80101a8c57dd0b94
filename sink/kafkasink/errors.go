package kafkasink

import (
	"errors"
	"fmt"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink"
)

var (
	// ErrInvalidOptions is wrapped by New's error for a missing argument
	// or an invalid option.
	ErrInvalidOptions = errors.New("kafkasink: invalid options")
	// ErrInvalidArgument is wrapped by Add's error for a record without
	// a topic or with a negative partition: nothing was buffered.
	ErrInvalidArgument = errors.New("kafkasink: invalid argument")
	// ErrClosed is sink.ErrClosed.
	//
	// Deprecated: use sink.ErrClosed, which every sink's error after Close
	// wraps (chsink's too).
	ErrClosed = sink.ErrClosed
	// ErrUnconfirmed is wrapped by a Snapshot *Error when the transaction
	// prepared at an earlier barrier was never confirmed by
	// CheckpointCompleted (that checkpoint failed after this sink's
	// snapshot, or its notification was lost). The sink cannot tell
	// whether that checkpoint is durable, so it can neither commit the
	// transaction nor add records to it: the chain must restart from its
	// newest checkpoint, whose restore resolves the transaction (the
	// error is Retryable, so kafkasource does that by itself).
	ErrUnconfirmed = errors.New("kafkasink: an earlier prepared transaction was not confirmed")
	// ErrCorrupt is wrapped by Restore's error for a state it cannot
	// decode.
	ErrCorrupt = errors.New("kafkasink: corrupt state")
	// ErrCorruptState is ErrCorrupt.
	//
	// Deprecated: use ErrCorrupt, as every other package names it.
	ErrCorruptState = ErrCorrupt
	// ErrUnsupportedVersion is wrapped by Restore's error for a state
	// written by a later version of the sink.
	ErrUnsupportedVersion = errors.New("kafkasink: unsupported state version")
	// ErrExpired is wrapped (with checkpoint.ErrExpired) by the error of
	// Expired when the prepared transaction is too close to its
	// TransactionTimeout for its checkpoint to be saved and committed in
	// time: the checkpoint is not saved, the sink aborts the transaction,
	// and the chain restarts from its last checkpoint (the error is
	// Retryable), whose replay writes the records again. Unlike fencing,
	// no other instance of the chain is involved.
	ErrExpired = errors.New("kafkasink: prepared transaction too close to its timeout")
)

// errClosed is the error of every method after Close: it wraps
// sink.ErrClosed, as chsink's does, and says which sink.
var errClosed = fmt.Errorf("kafkasink: %w", sink.ErrClosed)

// Error is a failed send, commit, barrier or restore of the sink. The sink
// stays failed; the chain must restart from its last checkpoint, whose
// Restore resolves the transaction the checkpoint recorded and aborts any
// other.
type Error struct {
	Op  string // "send", "commit", "snapshot" or "restore"
	Err error
}

func (e *Error) Error() string { return "kafkasink: " + e.Op + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether a restart of the chain from its last
// checkpoint can get past the error (kafkasource restarts a chain whose
// error says so): always, except when the producer was fenced, which means
// another incarnation of the chain is running, and when a restore found
// its checkpoint's transaction aborted (checkpoint.ErrOutputLost: the same
// checkpoint would be restored again). A restore that ran out of time
// (a broker restarting, a coordinator still loading its transactions) is
// retryable.
func (e *Error) Retryable() bool {
	return !kafkatxn.IsFenced(e.Err) && !(e.Op == "restore" && errors.Is(e.Err, kafkatxn.ErrAborted))
}
