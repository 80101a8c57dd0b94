package checkpoint

import (
	"context"
	"errors"
)

// ErrNotFound is returned by Storage.Get for a name that holds no data.
var ErrNotFound = errors.New("checkpoint: not found")

// Storage keeps named blobs durably: checkpoints, and small journals that
// other packages (the sink's write-ahead journal) keep beside them.
//
// Implementations are safe for concurrent use. Names are slash-separated
// paths of [A-Za-z0-9._-] segments.
//
// To let a partition move between instances of one consumer group, every
// instance must see the same Storage: a shared filesystem, or an object store
// with read-after-write consistency for Put followed by Get and List.
type Storage interface {
	// Put stores data under name atomically: after Put returns nil, Get
	// returns data, even after a crash of the process or the machine; a crash
	// during Put leaves the previous content or nothing, never a mix.
	Put(ctx context.Context, name string, data []byte) error

	// Get returns the data stored under name, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, name string) ([]byte, error)

	// List returns the names that start with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)

	// Delete removes name. Deleting a name that does not exist is not an
	// error.
	Delete(ctx context.Context, name string) error
}
