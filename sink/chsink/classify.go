package chsink

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// retryableCodes are server exceptions that describe a passing condition.
var retryableCodes = []proto.Error{
	proto.ErrTooManyParts,
	proto.ErrTooManyPartitions,
	proto.ErrTimeoutExceeded,
	proto.ErrMemoryLimitExceeded,
	proto.ErrCannotAllocateMemory,
	proto.ErrTooManySimultaneousQueries,
	proto.ErrNetworkError,
	proto.ErrSocketTimeout,
	proto.ErrCannotReadFromSocket,
	proto.ErrCannotWriteToSocket,
	proto.ErrUnexpectedEndOfFile,
	proto.ErrTableIsReadOnly,
	proto.ErrNoZookeeper,
	proto.ErrKeeperException,
	proto.ErrAllConnectionTriesFailed,
	proto.ErrServerOverloaded,
	proto.ErrAborted,
	proto.ErrQueryWasCancelled,
}

// IsRetryable classifies an insert error. Server exceptions are retryable
// only when they describe a passing condition (TOO_MANY_PARTS, timeouts,
// memory limits, Keeper and network trouble); any other exception (unknown
// table, missing column, type mismatch, syntax) is permanent: retrying sends
// the same block and fails the same way. Transport errors (refused or reset
// connections, EOF, timeouts) are retryable. Context cancellation is not:
// the caller gave up. (The sink itself retries an attempt that ran out of
// Options.InsertTimeout while the caller's context is still live.)
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrLostPart) {
		return false
	}
	if exc, ok := ch.AsException(err); ok {
		return exc.IsCode(retryableCodes...)
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	// ch-go reports a connection it closed after a failure ("client is
	// closed") and handshake problems without a typed error; a fresh
	// connection is the remedy, so treat unknown non-server errors as
	// retryable. The retry budget bounds them.
	return true
}
