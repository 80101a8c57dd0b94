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
