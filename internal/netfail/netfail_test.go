package netfail_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/exactlyonce/exactlyonce/internal/netfail"
)

// TestIs: every error of the list matches, wrapped as the packages wrap
// them; nil, a context's end and other errors do not.
func TestIs(t *testing.T) {
	op := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, err := range []error{
		op, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, syscall.ETIMEDOUT,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		os.ErrDeadlineExceeded, context.DeadlineExceeded,
	} {
		assert.True(t, netfail.Is(err), "%v", err)
		assert.True(t, netfail.Is(fmt.Errorf("insert: %w", err)), "wrapped %v", err)
	}
	for _, err := range []error{
		nil, context.Canceled,
		errors.New("code 241: memory limit"), fmt.Errorf("reply: %w", errors.New("NoSuchBucket")),
	} {
		assert.False(t, netfail.Is(err), "%v", err)
	}
}

// TestRealConnection: the error of a dial to a closed port matches.
func TestRealConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, err = net.Dial("tcp", addr)
	assert.Error(t, err)
	assert.True(t, netfail.Is(err), "%v", err)
}
