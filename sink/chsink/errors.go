package chsink

import (
	"errors"
	"fmt"

	"github.com/exactlyonce/exactlyonce/sink"
)

// Sentinel errors of the sink's construction and its checkpoint state.
// Match them with errors.Is. The errors of the data path (ErrFenced,
// ErrOutOfOrder, ErrNondeterministic...) are the sink package's.
var (
	// ErrInvalidOptions is wrapped by the error New returns for a nil or
	// inconsistent schema or an invalid option. Nothing was connected.
	ErrInvalidOptions = errors.New("chsink: invalid options")

	// ErrCorrupt is wrapped by the error Restore returns for state that
	// does not decode (truncated, damaged, not a sink's). Nothing was loaded.
	ErrCorrupt = errors.New("chsink: corrupt state")

	// ErrUnsupportedVersion is wrapped by the error Restore returns for
	// state of a format version this sink does not read. Nothing was loaded.
	ErrUnsupportedVersion = errors.New("chsink: unsupported state version")

	// ErrIncompatible is wrapped by the error Restore returns for the state
	// of another sink (another table, topic or partition). Nothing was loaded.
	ErrIncompatible = errors.New("chsink: state of another sink")
)

// InsertError reports a batch that could not be inserted. Whether ClickHouse
// holds the batch is unknown unless Permanent is true (the server rejected
// it); either way the batch's intent stays in the journal, so a replay
// re-inserts it with the same token and ClickHouse keeps exactly one copy.
type InsertError struct {
	Intent    sink.Intent
	Attempts  int
	Permanent bool // the last error is not retryable
	Err       error
}

func (e *InsertError) Error() string {
	kind := "retries exhausted"
	if e.Permanent {
		kind = "permanent error"
	}
	return fmt.Sprintf("chsink: insert %s..%s (%d rows, token %s) into %s: %s after %d attempts: %v",
		e.Intent.First, e.Intent.Last, e.Intent.Rows, e.Intent.Token, e.Intent.Table, kind, e.Attempts, e.Err)
}

func (e *InsertError) Unwrap() error { return e.Err }

// Retryable reports whether inserting the batch again later can succeed:
// the retries ran out on a passing condition (IsRetryable), not on a
// rejection. kafkasource's restart strategy reads it.
func (e *InsertError) Retryable() bool { return !e.Permanent }

// ServerError reports a query the sink makes on its own account (reading
// the table's definition and its materialized views when New connects)
// that failed. Nothing was written. Retryable says whether the server's
// condition passes (a dropped connection, a server shutting down or
// overloaded), so that kafkasource builds the chain again later instead of
// stopping on a server that restarts.
type ServerError struct {
	Op  string // what the sink was doing, e.g. "inspect demo.events"
	Err error
}

func (e *ServerError) Error() string { return "chsink: " + e.Op + ": " + e.Err.Error() }

func (e *ServerError) Unwrap() error { return e.Err }

// Retryable reports whether the same call can succeed later (IsRetryable).
func (e *ServerError) Retryable() bool { return IsRetryable(e.Err) }
