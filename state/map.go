package state

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

var _ checkpoint.AsyncParticipant = (*Map[string, string, int64])(nil)

// pair is a Map's entry key.
type pair[K, UK comparable] struct {
	k  K
	uk UK
}

// Map holds a map from user keys to values per key, each entry with its
// own TTL: Flink's MapState for every key of a partition at once. It is a
// checkpoint.Participant; see the package documentation.
//
// A Map is owned by one partition's processing chain and is not safe for
// concurrent use. Its metrics may be collected concurrently.
type Map[K, UK comparable, V any] struct {
	t      table[pair[K, UK], V]
	keys   keyCodec[pair[K, UK]]
	values Codec[V]
	// index lists each key's user keys, for All and Clear.
	index map[K]map[UK]struct{}
}

// NewMap returns an empty Map whose keys, user keys and values the codecs
// encode in snapshots.
func NewMap[K, UK comparable, V any](keys Codec[K], userKeys Codec[UK], values Codec[V], opts Options) (*Map[K, UK, V], error) {
	if keys == nil || userKeys == nil || values == nil {
		return nil, fmt.Errorf("%w: a key, a user key and a value codec are required", ErrInvalidOptions)
	}
	s := &Map[K, UK, V]{values: values, index: make(map[K]map[UK]struct{})}
	s.keys = keyCodec[pair[K, UK]]{
		// The key's length first, so that the bytes of (key, user key)
		// split one way only.
		append: func(dst []byte, p pair[K, UK]) []byte {
			at := len(dst)
			dst = keys.Append(dst, p.k)
			n := len(dst) - at
			var l [binary.MaxVarintLen64]byte
			w := binary.PutUvarint(l[:], uint64(n))
			dst = append(dst, l[:w]...)
			copy(dst[at+w:], dst[at:at+n])
			copy(dst[at:], l[:w])
			return userKeys.Append(dst, p.uk)
		},
		decode: func(b []byte) (pair[K, UK], error) {
			var p pair[K, UK]
			n, w := binary.Uvarint(b)
			if w <= 0 || n > uint64(len(b)-w) {
				return p, fmt.Errorf("bad key length")
			}
			k, err := keys.Decode(b[w : w+int(n)])
			if err != nil {
				return p, err
			}
			uk, err := userKeys.Decode(b[w+int(n):])
			if err != nil {
				return p, fmt.Errorf("user key: %w", err)
			}
			return pair[K, UK]{k: k, uk: uk}, nil
		},
	}
	if err := s.t.init(opts); err != nil {
		return nil, err
	}
	s.t.onRemove = s.unindex
	return s, nil
}

func (s *Map[K, UK, V]) unindex(p pair[K, UK]) {
	if ks := s.index[p.k]; ks != nil {
		delete(ks, p.uk)
		if len(ks) == 0 {
			delete(s.index, p.k)
		}
	}
}

// Get returns the value of userKey under key, as Value.Get does.
func (s *Map[K, UK, V]) Get(key K, userKey UK, at time.Time) (V, bool) {
	if s.t.closed {
		var zero V
		return zero, false
	}
	return s.t.get(pair[K, UK]{key, userKey}, at)
}

// Put stores v under key and userKey, as Value.Put does; MaxKeys counts
// pairs.
func (s *Map[K, UK, V]) Put(key K, userKey UK, v V, at time.Time) error {
	if s.t.closed {
		return ErrClosed
	}
	if err := s.t.put(pair[K, UK]{key, userKey}, v, at); err != nil {
		return err
	}
	ks := s.index[key]
	if ks == nil {
		ks = make(map[UK]struct{})
		s.index[key] = ks
	}
	ks[userKey] = struct{}{}
	return nil
}

// Delete removes userKey under key and reports whether it held a live
// value.
func (s *Map[K, UK, V]) Delete(key K, userKey UK, at time.Time) bool {
	if s.t.closed {
		return false
	}
	return s.t.remove(pair[K, UK]{key, userKey}, at)
}

// Clear removes every user key under key and returns how many were live.
func (s *Map[K, UK, V]) Clear(key K, at time.Time) int {
	if s.t.closed {
		return 0
	}
	n := 0
	for uk := range s.index[key] {
		if s.t.remove(pair[K, UK]{key, uk}, at) {
			n++
		}
	}
	return n
}

// All returns the live user keys and values under key at time at, in no
// particular order (as a Go map's). It reads like Get (it advances the
// clock, and with OnReadAndWrite extends what it returns). Do not change
// the Map while iterating.
func (s *Map[K, UK, V]) All(key K, at time.Time) iter.Seq2[UK, V] {
	return func(yield func(UK, V) bool) {
		if s.t.closed {
			return
		}
		s.t.clock = s.t.advance(at)
		for uk := range s.index[key] {
			p := pair[K, UK]{key, uk}
			e := s.t.m[p]
			if !live(e.exp, s.t.clock) {
				continue
			}
			if s.t.opts.UpdateType == OnReadAndWrite && s.t.ttl != 0 {
				if exp := s.t.expiry(s.t.clock); exp > e.exp {
					e.exp = exp
					s.t.m[p] = e
					s.t.enqueue(p, exp)
				}
			}
			s.t.counts.reads++
			if !yield(uk, e.v) {
				return
			}
		}
	}
}

// Len returns the number of stored pairs of key and user key, including
// expired ones that cleanup has not removed yet.
func (s *Map[K, UK, V]) Len() int { return len(s.t.m) }

// Clock returns the state's clock, as Value.Clock does.
func (s *Map[K, UK, V]) Clock() time.Time { return time.Unix(0, s.t.clock).UTC() }

// Cleanup removes up to n expired entries, as Value.Cleanup does.
func (s *Map[K, UK, V]) Cleanup(n int) int { return s.t.cleanupAll(n) }

// Snapshot implements checkpoint.Participant, as Value.Snapshot does.
func (s *Map[K, UK, V]) Snapshot(ctx context.Context, _ checkpoint.ID) ([]byte, error) {
	return s.t.snapshot(ctx, kindMap, s.keys, s.values)
}

// SnapshotAsync implements checkpoint.AsyncParticipant, as
// Value.SnapshotAsync does.
func (s *Map[K, UK, V]) SnapshotAsync(ctx context.Context, _ checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	return s.t.snapshotAsync(ctx, kindMap, s.keys, s.values)
}

// Restore implements checkpoint.Participant, as Value.Restore does.
func (s *Map[K, UK, V]) Restore(ctx context.Context, state []byte) error {
	d, err := s.t.restore(ctx, state, kindMap, s.keys, s.values)
	if err != nil {
		return err
	}
	s.index = make(map[K]map[UK]struct{})
	for p := range d.m {
		ks := s.index[p.k]
		if ks == nil {
			ks = make(map[UK]struct{})
			s.index[p.k] = ks
		}
		ks[p.uk] = struct{}{}
	}
	return nil
}

// CheckpointCompleted implements checkpoint.Participant; there is nothing
// to do.
func (s *Map[K, UK, V]) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// Close releases the state, as Value.Close does.
func (s *Map[K, UK, V]) Close() error {
	s.index = nil
	return s.t.close()
}
