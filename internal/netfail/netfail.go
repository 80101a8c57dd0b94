// Package netfail says whether an error is a failed connection: the one
// list of transport errors that chsink, kafkasource and s3storage retry,
// kept in one place so that a new way for a connection to fail (an errno,
// a closed socket) is learnt by all three at once.
//
//	if netfail.Is(err) { retry() }
//
// Its Proxy makes such failures for the tests and the harness: the one TCP
// proxy of the project (testkit's LatencyProxy and TLSProxy, the chaos
// run's slow link to ClickHouse and the tests that lose an answer or cut a
// connection all run on it).
//
// # Guarantees
//
// Is is true for a wrapped net.Error (every timeout and *net.OpError among
// them), io.EOF, io.ErrUnexpectedEOF, net.ErrClosed and the errnos of a
// refused, reset, broken, timed-out or unreachable connection (as a
// syscall.Errno is a net.Error, any errno), and false for nil and for
// everything else (context.Canceled among them). context.DeadlineExceeded
// is a net.Error and matches: a caller for whom the end of its context is
// final (chsink, s3storage, kafkasource.IsRetryable) says so before
// asking.
package netfail

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// errnos are the connection failures a fresh connection may get past.
// (syscall.Errno implements net.Error, so any errno already matches the
// net.Error case; the list says which ones are meant and keeps them
// matching should that change.)
var errnos = []syscall.Errno{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, syscall.ETIMEDOUT,
	syscall.EHOSTUNREACH, syscall.ENETUNREACH,
}

// Is reports whether err is (or wraps) a failed connection.
func Is(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	for _, e := range errnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
