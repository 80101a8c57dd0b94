package state

import (
	"context"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

var _ checkpoint.AsyncParticipant = (*Value[string, int64])(nil)

// Value holds one value per key, with an optional TTL: Flink's ValueState
// for every key of a partition at once, or a Kafka Streams key-value store.
// It is a checkpoint.Participant, so its entries travel with the
// partition's checkpoints; see the package documentation.
//
// A Value is owned by one partition's processing chain and is not safe for
// concurrent use: call its methods from one goroutine at a time. Its
// metrics may be collected concurrently.
type Value[K comparable, V any] struct {
	t      table[K, V]
	keys   keyCodec[K]
	values Codec[V]
}

// NewValue returns an empty Value whose keys and values the codecs encode
// in snapshots (String, Int64, Time and the other codecs of this package,
// or one of your own).
func NewValue[K comparable, V any](keys Codec[K], values Codec[V], opts Options) (*Value[K, V], error) {
	if keys == nil || values == nil {
		return nil, fmt.Errorf("%w: a key and a value codec are required", ErrInvalidOptions)
	}
	s := &Value[K, V]{keys: keyCodec[K]{append: keys.Append, decode: keys.Decode}, values: values}
	if err := s.t.init(opts); err != nil {
		return nil, err
	}
	return s, nil
}

// Get returns key's value and true, or the zero V and false when key is
// absent or its entry expired. With EventTime, at (the record's time)
// advances the clock first; with ProcessingTime it is ignored. With
// OnReadAndWrite, finding the entry extends it. After Close it finds
// nothing.
func (s *Value[K, V]) Get(key K, at time.Time) (V, bool) {
	if s.t.closed {
		var zero V
		return zero, false
	}
	return s.t.get(key, at)
}

// Put stores v as key's value at time at, replacing any value, and
// (with a TTL) makes the entry live TTL from the clock. It fails only with
// ErrFull (Options.MaxKeys) or ErrClosed, and then stores nothing.
func (s *Value[K, V]) Put(key K, v V, at time.Time) error {
	if s.t.closed {
		return ErrClosed
	}
	return s.t.put(key, v, at)
}

// Delete removes key at time at and reports whether it held a live value.
func (s *Value[K, V]) Delete(key K, at time.Time) bool {
	if s.t.closed {
		return false
	}
	return s.t.remove(key, at)
}

// Len returns the number of stored entries, including expired ones that
// cleanup has not removed yet.
func (s *Value[K, V]) Len() int { return len(s.t.m) }

// Clock returns the state's clock: the latest time passed in (event time)
// or read from Options.Now (processing time), or the Unix epoch before the
// first call.
func (s *Value[K, V]) Clock() time.Time { return time.Unix(0, s.t.clock).UTC() }

// Cleanup removes up to n expired entries and returns how many it removed.
// Get, Put and Delete already remove Options.CleanupBudget each; call
// Cleanup when the partition is idle to free memory sooner. With
// ProcessingTime it reads Options.Now first.
func (s *Value[K, V]) Cleanup(n int) int { return s.t.cleanupAll(n) }

// Snapshot implements checkpoint.Participant: the entries live at the
// clock and the clock, in the format the package documentation describes.
// The same state gives the same bytes. It fails with ErrAmbiguousKey when
// two stored keys have one encoding.
func (s *Value[K, V]) Snapshot(ctx context.Context, _ checkpoint.ID) ([]byte, error) {
	return s.t.snapshot(ctx, kindValue, s.keys, s.values)
}

// SnapshotAsync implements checkpoint.AsyncParticipant: the barrier holds
// the chain only to copy the entries (a copy of the map's memory, about
// the state's size again until the pending part returns); the pending
// part encodes and sorts the copy, returning the bytes Snapshot returns at
// the barrier, while the chain goes on. A stored value must not be
// modified in place after Put (store a new one), since the copy shares
// what a value references.
func (s *Value[K, V]) SnapshotAsync(ctx context.Context, _ checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	return s.t.snapshotAsync(ctx, kindValue, s.keys, s.values)
}

// Restore implements checkpoint.Participant: it replaces the state with one
// Snapshot returned. A truncated, corrupt or foreign snapshot is refused
// with an error wrapping ErrCorrupt, ErrUnsupportedVersion,
// ErrIncompatible or ErrFull, and the state is left unchanged.
func (s *Value[K, V]) Restore(ctx context.Context, state []byte) error {
	_, err := s.t.restore(ctx, state, kindValue, s.keys, s.values)
	return err
}

// CheckpointCompleted implements checkpoint.Participant. There is nothing
// to do: every snapshot holds the whole state.
func (s *Value[K, V]) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// Close releases the state and unregisters the metrics callback. It is safe
// to call more than once; Put returns ErrClosed afterwards.
func (s *Value[K, V]) Close() error { return s.t.close() }
