package state

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Snapshot format, version 1. Integers are little endian.
//
//	offset  size  field
//	0       8     magic "EOSTATE\x00"
//	8       2     version, 1
//	10      2     kind: 1 Value, 2 Map
//	12      8     clock, Unix nanoseconds (int64, >= 0)
//	20      8     entry count (uint64)
//	28      ...   entries, in strictly increasing order of their key bytes:
//	                v  key length (uvarint)
//	                n  key bytes: a Value's key as its codec writes it; a
//	                   Map's key as a uvarint length, the key, and the user
//	                   key, as their codecs write them
//	                8  expiry, Unix nanoseconds (int64): 0 for never, else
//	                   greater than the clock
//	                v  value length (uvarint)
//	                n  value bytes, as the value codec writes them
//	end-4   4     CRC-32C (Castagnoli) of every byte before it
//
// Only entries live at the clock are written, in a fixed order, so a state
// has exactly one encoding; Restore rejects any other.
const (
	snapshotMagic   = "EOSTATE\x00"
	snapshotVersion = 1
	kindValue       = 1
	kindMap         = 2
	headerSize      = 28
	trailerSize     = 4
	// maxLen bounds a key or value length in a snapshot, so that a corrupt
	// length cannot make Restore allocate more than the input.
	maxLen = 1<<31 - 1
)

// keyCodec encodes the table's keys: a Value's key, or a Map's pair.
type keyCodec[C comparable] struct {
	append func(dst []byte, k C) []byte
	decode func(b []byte) (C, error)
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sizeHints size a snapshot's buffers from the last one's keys and values.
// They are atomics because an asynchronous snapshot's pending part sets
// them from the coordinator's goroutine.
type sizeHints struct{ keys, values atomic.Int64 }

// encode writes the snapshot of the entries of m live at clock.
func encode[C comparable, V any](m map[C]entry[V], clock int64, kind uint16, kc keyCodec[C], vc Codec[V], h *sizeHints) ([]byte, error) {
	// Encode every live key into one arena (sized from the last snapshot),
	// then sort 16-byte references to them: the key's first 8 bytes as a
	// big-endian integer, so most comparisons are one integer compare, and
	// the index of its offsets and entry. Small elements keep the sort's
	// swaps cheap.
	type ref struct {
		prefix uint64
		i      uint32
	}
	n := len(m)
	ents := make([]entry[V], 0, n)
	offs := make([]int, 1, n+1)
	arena := make([]byte, 0, h.keys.Load())
	for k, e := range m {
		if !live(e.exp, clock) {
			continue
		}
		arena = kc.append(arena, k)
		offs = append(offs, len(arena))
		ents = append(ents, e)
	}
	h.keys.Store(int64(len(arena) + len(arena)/8))
	key := func(i uint32) []byte { return arena[offs[i]:offs[i+1]] }
	refs := make([]ref, len(ents))
	for i := range refs {
		var p [8]byte
		copy(p[:], key(uint32(i)))
		refs[i] = ref{prefix: binary.BigEndian.Uint64(p[:]), i: uint32(i)}
	}
	slices.SortFunc(refs, func(a, b ref) int {
		if a.prefix != b.prefix {
			return cmp.Compare(a.prefix, b.prefix)
		}
		return bytes.Compare(key(a.i), key(b.i))
	})

	dst := make([]byte, 0, headerSize+len(arena)+len(refs)*(8+2*binary.MaxVarintLen32)+int(h.values.Load())+trailerSize)
	dst = append(dst, snapshotMagic...)
	dst = binary.LittleEndian.AppendUint16(dst, snapshotVersion)
	dst = binary.LittleEndian.AppendUint16(dst, kind)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(clock))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(refs)))
	var val []byte
	values := 0
	for j, r := range refs {
		k := key(r.i)
		if j > 0 && bytes.Equal(key(refs[j-1].i), k) {
			return nil, fmt.Errorf("%w: %x", ErrAmbiguousKey, k)
		}
		e := &ents[r.i]
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.exp))
		val = vc.Append(val[:0], e.v)
		dst = binary.AppendUvarint(dst, uint64(len(val)))
		dst = append(dst, val...)
		values += len(val)
	}
	h.values.Store(int64(values + values/8))
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst, castagnoli)), nil
}

// decoded is a validated snapshot, not yet loaded.
type decoded[C comparable, V any] struct {
	m     map[C]entry[V]
	q     []pending[C]
	clock int64
}

// decode validates b completely and returns the state it holds. Nothing of
// b is retained (the codecs must copy).
func decode[C comparable, V any](b []byte, kind uint16, kc keyCodec[C], vc Codec[V]) (decoded[C, V], error) {
	var d decoded[C, V]
	if len(b) < headerSize+trailerSize {
		return d, corrupt("%d bytes is shorter than the %d-byte minimum", len(b), headerSize+trailerSize)
	}
	if string(b[:8]) != snapshotMagic {
		return d, corrupt("bad magic %q", b[:8])
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != snapshotVersion {
		return d, fmt.Errorf("%w: version %d, want %d", ErrUnsupportedVersion, v, snapshotVersion)
	}
	body := b[:len(b)-trailerSize]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(body):]); got != want {
		return d, corrupt("checksum %08x, want %08x (truncated or damaged)", got, want)
	}
	switch k := binary.LittleEndian.Uint16(b[10:]); {
	case k == kind:
	case k == kindValue || k == kindMap:
		return d, fmt.Errorf("%w: kind %d, want %d", ErrIncompatible, k, kind)
	default:
		return d, corrupt("unknown kind %d", k)
	}
	d.clock = int64(binary.LittleEndian.Uint64(b[12:]))
	if d.clock < 0 {
		return d, corrupt("clock %d before the epoch", d.clock)
	}
	count := binary.LittleEndian.Uint64(b[20:])
	rest := body[headerSize:]
	// An entry takes at least 10 bytes (two lengths and an expiry).
	if count > uint64(len(rest)/10) {
		return d, corrupt("%d entries do not fit in %d bytes", count, len(rest))
	}
	d.m = make(map[C]entry[V], count)
	d.q = make([]pending[C], 0, count)
	var prev, again []byte
	field := func(i uint64, what string) ([]byte, error) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > maxLen || n > uint64(len(rest)-w) {
			return nil, corrupt("entry %d: bad %s length", i, what)
		}
		f := rest[w : w+int(n)]
		rest = rest[w+int(n):]
		return f, nil
	}
	for i := range count {
		kb, err := field(i, "key")
		if err != nil {
			return d, err
		}
		if i > 0 && bytes.Compare(prev, kb) >= 0 {
			return d, corrupt("entry %d out of order", i)
		}
		prev = kb
		if len(rest) < 8 {
			return d, corrupt("entry %d truncated", i)
		}
		exp := int64(binary.LittleEndian.Uint64(rest))
		rest = rest[8:]
		if !live(exp, d.clock) || exp < 0 {
			return d, corrupt("entry %d: expiry %d, clock %d", i, exp, d.clock)
		}
		vb, err := field(i, "value")
		if err != nil {
			return d, err
		}
		k, err := kc.decode(kb)
		if err != nil {
			return d, corrupt("entry %d: key: %v", i, err)
		}
		// A codec that reads several spellings of one key would let two
		// entries of the snapshot become one: accept the canonical one only.
		if again = kc.append(again[:0], k); !bytes.Equal(again, kb) {
			return d, corrupt("entry %d: key %x is not canonical (encodes as %x)", i, kb, again)
		}
		v, err := vc.Decode(vb)
		if err != nil {
			return d, corrupt("entry %d: value: %v", i, err)
		}
		if again = vc.Append(again[:0], v); !bytes.Equal(again, vb) {
			return d, corrupt("entry %d: value %x is not canonical (encodes as %x)", i, vb, again)
		}
		if _, dup := d.m[k]; dup {
			return d, corrupt("entry %d: key decodes like an earlier one", i)
		}
		d.m[k] = entry[V]{v: v, exp: exp}
		if exp != 0 {
			d.q = append(d.q, pending[C]{k: k, exp: exp})
		}
	}
	if len(rest) != 0 {
		return d, corrupt("%d bytes after the last entry", len(rest))
	}
	if len(d.q) == 0 {
		d.q = nil // nothing expires: give the presized queue back
	}
	slices.SortFunc(d.q, func(a, b pending[C]) int { return cmp.Compare(a.exp, b.exp) })
	return d, nil
}

// snapshot implements Snapshot for both kinds.
func (t *table[C, V]) snapshot(ctx context.Context, kind uint16, kc keyCodec[C], vc Codec[V]) ([]byte, error) {
	if t.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.publish()
	return encode(t.m, t.clock, kind, kc, vc, &t.hints)
}

// snapshotAsync implements SnapshotAsync for both kinds: the barrier
// copies the map (maps.Clone copies its memory wholesale, without
// rehashing) and the pending part encodes and sorts the copy while the
// chain goes on. Values are copied as Go copies them: a value holding
// references (a slice, a pointer) shares what they point to, which is why
// a stored value must not be modified in place.
func (t *table[C, V]) snapshotAsync(ctx context.Context, kind uint16, kc keyCodec[C], vc Codec[V]) (checkpoint.PendingSnapshot, error) {
	if t.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.publish()
	m, clock, h := maps.Clone(t.m), t.clock, &t.hints
	return func(ctx context.Context) ([]byte, error) {
		if err := ctx.Err(); err != nil {
			return nil, err // the checkpoint was aborted: let m go
		}
		return encode(m, clock, kind, kc, vc, h)
	}, nil
}

// restore implements Restore for both kinds: it replaces the state only
// once the whole snapshot is known good.
func (t *table[C, V]) restore(ctx context.Context, b []byte, kind uint16, kc keyCodec[C], vc Codec[V]) (decoded[C, V], error) {
	if t.closed {
		return decoded[C, V]{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return decoded[C, V]{}, err
	}
	d, err := decode(b, kind, kc, vc)
	if err != nil {
		return d, err
	}
	if t.opts.MaxKeys > 0 && len(d.m) > t.opts.MaxKeys {
		return d, fmt.Errorf("%w: snapshot holds %d entries, MaxKeys is %d", ErrFull, len(d.m), t.opts.MaxKeys)
	}
	t.m, t.q, t.qHead, t.sorted, t.clock = d.m, d.q, 0, true, d.clock
	t.publish()
	return d, nil
}
