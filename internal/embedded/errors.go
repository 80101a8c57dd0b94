package embedded

import (
	"errors"
	"log/slog"
)

// ErrNotInstalled is wrapped by errors that say a program or library a
// service needs (redis-server, the go tool, npm, libchdb.so) is missing and
// could not be fetched.
var ErrNotInstalled = errors.New("embedded: not installed")

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// ErrStopped is wrapped by errors of calls that need a running server (a
// fault injected into a killed broker).
var ErrStopped = errors.New("embedded: server is not running")
