package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io"
)

// ErrNotFound is returned by Storage.Get for a name that holds no data.
var ErrNotFound = errors.New("checkpoint: not found")

// ErrConflict is wrapped by the error of a conditional write that lost:
// Create over a name that holds data, Replace over a name whose content is no
// longer the given Version (or that is gone). A conflict is definite: the
// write was not applied.
var ErrConflict = errors.New("checkpoint: conditional write conflict")

// Version identifies one stored content of a name: an opaque token (an ETag
// on S3, a content hash on the filesystem). The zero Version never matches
// stored content.
//
// A Version may be derived from the content alone, so storing the same bytes
// again can give the same Version back: a Replace against a Version read
// before the name went from A to B and back to A succeeds. Callers that must
// tell such writes apart make their content differ (an epoch, a writer id).
type Version string

// Storage keeps named blobs durably: checkpoints, and small journals that
// other packages (the sink's write-ahead journal) keep beside them.
//
// Implementations are safe for concurrent use. Names are slash-separated
// paths of [A-Za-z0-9._-] segments.
//
// To let a partition move between instances of one consumer group, every
// instance must see the same Storage: a shared filesystem, or an object store
// with read-after-write consistency for Put followed by Get and List.
//
// # Conditional writes and unknown outcomes
//
// Create and Replace are the fencing primitives: every process sharing the
// storage sees one order of the writes to a name, and a conditional write
// that loses returns an error wrapping ErrConflict without changing anything.
// Any other error from Create or Replace (a timeout, a cut connection, a
// failed fsync after the rename) leaves the outcome unknown: the write may
// have been applied. Implementations resolve that themselves where they can
// (the S3 backend reads back the object after an ambiguous retry); when they
// cannot, the caller resolves it by reading the name back with GetVersion: if
// it holds exactly the data written, the write was applied (data should
// therefore carry something unique to the writer, such as its epoch and id,
// when another writer could store the same bytes).
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

	// Create stores data under name only if name holds nothing, with Put's
	// durability and atomicity. Of any number of concurrent Creates of one
	// name, from any process or machine sharing the storage, exactly one
	// succeeds; the others get an error wrapping ErrConflict. It returns the
	// Version of what it stored.
	Create(ctx context.Context, name string, data []byte) (Version, error)

	// GetVersion is Get that also returns the Version of the content it
	// read. A name that holds nothing gives an error wrapping ErrNotFound.
	GetVersion(ctx context.Context, name string) ([]byte, Version, error)

	// Replace stores data under name only if its current content is version
	// v (compare-and-swap), with Put's durability and atomicity; otherwise,
	// and when name holds nothing, it returns an error wrapping ErrConflict.
	// It returns the new Version.
	Replace(ctx context.Context, name string, data []byte, v Version) (Version, error)
}

// StreamPutter is an optional interface of a Storage that stores a blob
// written piece by piece, so that a large state (ten million dedup keys)
// goes to storage without first being copied into one buffer. FSStorage
// and MemoryStorage have it; PutStream falls back to Put for a Storage that
// has not.
type StreamPutter interface {
	// PutStream is Put of the bytes write writes to w, with Put's
	// durability and atomicity: a crash, or an error from write, leaves the
	// previous content or nothing, never a part. w is valid only during
	// the call to write, which must not retain it.
	PutStream(ctx context.Context, name string, write func(w io.Writer) error) error
}

// PutStream stores under name the bytes write writes, through s's
// StreamPutter if it has one, else through a buffer and Put.
func PutStream(ctx context.Context, s Storage, name string, write func(w io.Writer) error) error {
	if sp, ok := s.(StreamPutter); ok {
		return sp.PutStream(ctx, name, write)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	return s.Put(ctx, name, buf.Bytes())
}
