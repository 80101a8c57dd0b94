package chsink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/internal/netfail"
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

// tlsMisconfigured reports whether err is a TLS handshake that no new
// connection would pass: the server's certificate does not verify against
// the client's CAs or names another host, or the server does not speak TLS
// at that address.
func tlsMisconfigured(err error) bool {
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	var uae x509.UnknownAuthorityError
	var he x509.HostnameError
	var cie x509.CertificateInvalidError
	return errors.As(err, &cve) || errors.As(err, &rhe) || errors.As(err, &uae) ||
		errors.As(err, &he) || errors.As(err, &cie)
}

// IsRetryable classifies an insert error. Server exceptions are retryable
// only when they describe a passing condition (TOO_MANY_PARTS, timeouts,
// memory limits, Keeper and network trouble); any other exception (unknown
// table, missing column, type mismatch, syntax) is permanent: retrying sends
// the same block and fails the same way. So is a TLS handshake that fails
// on the configuration (a certificate of an unknown authority or another
// host, a server that does not speak TLS there). Transport errors (refused or reset
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
	if tlsMisconfigured(err) {
		return false
	}
	if netfail.Is(err) {
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
