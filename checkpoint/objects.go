package checkpoint

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
)

// ObjectParticipant is a Participant that keeps part of its state in objects
// of its own beside the checkpoint file, so that a checkpoint writes only
// what changed since the last one: an incremental snapshot's base and
// deltas, as Flink's incremental RocksDB checkpoints share SST files between
// checkpoints. Its Snapshot writes the new objects it needs through Objects
// and returns a small manifest naming them; its Restore reads them back.
//
// The coordinator finds the interface by type assertion. It calls
// UseObjects once, in Attach, before Restore. After each checkpoint it
// deletes the participant's objects that no retained checkpoint (see
// StoreOptions.Keep) references and that are not being written or waiting
// for the checkpoint that will reference them: a participant never deletes
// an object itself, and a crash between writing objects and the checkpoint
// leaves garbage that a later checkpoint removes, never a checkpoint naming
// a missing object.
type ObjectParticipant interface {
	Participant
	// UseObjects gives the participant its directory of objects.
	UseObjects(o *Objects)
	// References returns the names of the objects that state, returned by
	// this participant's Snapshot, needs: the names given to Objects.Write.
	// A state that references none returns nil.
	References(state []byte) ([]string, error)
}

// ObjectInfo describes a written object: its size and its CRC-32C
// (Castagnoli), computed while it was written.
type ObjectInfo struct {
	Size int64
	CRC  uint32
}

// Objects is one participant's directory of objects in the checkpoint
// Storage, for one partition:
//
//	<prefix>/<topic>/<partition>/objects/<participant>/<name>
//
// It is safe for concurrent use, so a participant may write an object from a
// background goroutine (a compaction) while its chain goes on.
type Objects struct {
	storage     Storage
	dir         string // ends in "/"
	participant string

	gen atomic.Int64 // Meta.Generation of the checkpoint being taken

	mu sync.Mutex
	// pending holds the names written (or being written) that no saved
	// checkpoint has referenced yet: collection spares them.
	pending map[string]struct{}
}

func newObjects(storage Storage, partitionDir, participant string) (*Objects, error) {
	if !ValidName(participant) || strings.Contains(participant, "/") {
		return nil, fmt.Errorf("checkpoint: participant name %q cannot name an object directory: %w", participant, ErrInvalidName)
	}
	return &Objects{
		storage: storage, dir: partitionDir + objectsDir + participant + "/",
		participant: participant, pending: map[string]struct{}{},
	}, nil
}

// objectsDir is the subdirectory of a partition's directory that holds its
// participants' objects.
const objectsDir = "objects/"

// Write stores the bytes write writes as the object name (one segment of
// [A-Za-z0-9._-]), streamed to the Storage where it can take a stream, and
// returns their size and CRC-32C. It has Storage.Put's durability and
// atomicity: when Write returns nil the object is durable; a crash or an
// error leaves the previous content of name or nothing. Writing a name again
// replaces it: a participant writes each name once.
func (o *Objects) Write(ctx context.Context, name string, write func(w io.Writer) error) (ObjectInfo, error) {
	if !ValidName(name) || strings.Contains(name, "/") {
		return ObjectInfo{}, fmt.Errorf("checkpoint: object %q: %w", name, ErrInvalidName)
	}
	o.mu.Lock()
	o.pending[name] = struct{}{}
	o.mu.Unlock()
	var info ObjectInfo
	err := PutStream(ctx, o.storage, o.dir+name, func(w io.Writer) error {
		cw := &crcWriter{w: w}
		err := write(cw)
		info = ObjectInfo{Size: cw.n, CRC: cw.crc}
		return err
	})
	if err != nil {
		return ObjectInfo{}, err
	}
	return info, nil
}

// Generation returns the consumer-group generation (Meta.Generation) of the
// checkpoint being taken. A participant puts it in the names of the objects
// it writes, as Store does in checkpoint file names, so that two owners of a
// partition during a rebalance (one of them revoked) never write the same
// name.
func (o *Objects) Generation() int64 { return o.gen.Load() }

// Read returns the content of the object name, or an error wrapping
// ErrNotFound.
func (o *Objects) Read(ctx context.Context, name string) ([]byte, error) {
	if !ValidName(name) || strings.Contains(name, "/") {
		return nil, fmt.Errorf("checkpoint: object %q: %w", name, ErrInvalidName)
	}
	return o.storage.Get(ctx, o.dir+name)
}

// Abandon tells the coordinator that the object name, written through
// Write, will not be referenced by a checkpoint of this process (a
// compaction whose result came too late): it is deleted after a later
// checkpoint unless a retained checkpoint references it.
func (o *Objects) Abandon(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.pending, name)
}

// ref is the name of object in a Checkpoint's Objects.
func (o *Objects) ref(name string) string { return o.participant + "/" + name }

// saved tells o that a saved checkpoint references refs (names within o).
func (o *Objects) saved(refs []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range refs {
		delete(o.pending, r)
	}
}

// isPending reports whether the object name is written or being written and
// awaits the checkpoint that references it.
func (o *Objects) isPending(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.pending[name]
	return ok
}
