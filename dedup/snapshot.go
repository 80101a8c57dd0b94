package dedup

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// Snapshot format, version 1. All integers are little endian.
//
//	offset  size  field
//	0       8     magic "EODEDUP\x00"
//	8       2     version, 1
//	10      2     flags: bit 0 set if entries carry exact keys; others zero
//	12      8     clock, Unix nanoseconds (int64), 0 <= clock <= 2^32 s
//	20      8     entry count (uint64)
//	28      ...   entries, in strictly increasing (hash, key) order:
//	                16  hash: hi uint64, lo uint64 (MurmurHash3 x64 128, seed 0)
//	                 4  expiry, Unix seconds (uint32), greater than clock's seconds
//	              exact keys only:
//	                 v  key length (uvarint, at most 2^24-1)
//	                 n  key bytes, whose hash is the entry's hash
//	end-4   4     CRC-32C (Castagnoli) of every byte before it
//
// Only entries live at the clock are written, and their order is fixed, so
// the encoding of a state is unique: Restore rejects anything else.
const (
	snapshotVersion   = 1
	flagExactKeys     = 1 << 0
	headerSize        = 28
	trailerSize       = 4
	entrySize         = 20
	snapshotMagic     = "EODEDUP\x00"
	minSnapshotLength = headerSize + trailerSize
)

func (d *Deduplicator) encodeSnapshot() []byte {
	t := &d.t
	nowSec := uint32(d.clock / int64(time.Second))
	size := headerSize + t.count*entrySize + trailerSize
	if t.exact {
		size += len(t.arena) - t.dead + t.count*binary.MaxVarintLen32
	}
	dst := make([]byte, 0, size)
	dst = append(dst, snapshotMagic...)
	dst = binary.LittleEndian.AppendUint16(dst, snapshotVersion)
	var flags uint16
	if t.exact {
		flags |= flagExactKeys
	}
	dst = binary.LittleEndian.AppendUint16(dst, flags)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(d.clock))
	countAt := len(dst)
	dst = binary.LittleEndian.AppendUint64(dst, 0)
	var n uint64
	for i := range t.slots {
		s := &t.slots[i]
		if e := s.exp(); e == 0 || e <= nowSec {
			continue
		}
		dst = append(dst, s[:]...)
		if t.exact {
			k := t.key(i)
			dst = binary.AppendUvarint(dst, uint64(len(k)))
			dst = append(dst, k...)
		}
		n++
	}
	binary.LittleEndian.PutUint64(dst[countAt:], n)
	sum := crc32.Checksum(dst, crc32.MakeTable(crc32.Castagnoli))
	return binary.LittleEndian.AppendUint32(dst, sum)
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// decodeSnapshot validates b completely and returns the table it describes,
// sized for at least expected entries, and the clock. Nothing of b is
// retained.
func decodeSnapshot(b []byte, exact bool, expected int) (table, int64, error) {
	if len(b) < minSnapshotLength {
		return table{}, 0, corrupt("%d bytes is shorter than the %d-byte minimum", len(b), minSnapshotLength)
	}
	if string(b[:8]) != snapshotMagic {
		return table{}, 0, corrupt("bad magic %q", b[:8])
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != snapshotVersion {
		return table{}, 0, fmt.Errorf("%w: version %d, want %d", ErrUnsupportedVersion, v, snapshotVersion)
	}
	body := b[:len(b)-trailerSize]
	want := binary.LittleEndian.Uint32(b[len(b)-trailerSize:])
	if got := crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)); got != want {
		return table{}, 0, corrupt("checksum %08x, want %08x (truncated or damaged)", got, want)
	}
	flags := binary.LittleEndian.Uint16(b[10:])
	if flags&^flagExactKeys != 0 {
		return table{}, 0, corrupt("unknown flags %#x", flags)
	}
	hasKeys := flags&flagExactKeys != 0
	if exact && !hasKeys {
		return table{}, 0, ErrIncompatible
	}
	clock := int64(binary.LittleEndian.Uint64(b[12:]))
	if clock < 0 || clock > maxClockNanos {
		return table{}, 0, corrupt("clock %d out of range", clock)
	}
	nowSec := uint32(clock / int64(time.Second))
	count := binary.LittleEndian.Uint64(b[20:])
	rest := body[headerSize:]
	if count > uint64(len(rest)/entrySize) {
		return table{}, 0, corrupt("%d entries do not fit in %d bytes", count, len(rest))
	}

	t := newTable(restoreHomes(count, expected), overflowSlots, exact)
	if exact {
		t.arena = make([]byte, 0, len(rest)-int(count)*entrySize)
	}
	last := -1
	var prev hash128
	var prevKey []byte
	for e := uint64(0); e < count; e++ {
		if len(rest) < entrySize {
			return table{}, 0, corrupt("entry %d truncated", e)
		}
		var s slot
		copy(s[:], rest[:entrySize])
		rest = rest[entrySize:]
		h := s.hash()
		if s.exp() <= nowSec {
			return table{}, 0, corrupt("entry %d expired at %d, clock %d", e, s.exp(), nowSec)
		}
		var key []byte
		if hasKeys {
			n, w := binary.Uvarint(rest)
			if w <= 0 || n > maxExactKeyLen || n > uint64(len(rest)-w) {
				return table{}, 0, corrupt("entry %d: bad key length", e)
			}
			key = rest[w : w+int(n)]
			rest = rest[w+int(n):]
			if hashKey(key) != h {
				return table{}, 0, corrupt("entry %d: key does not match its hash", e)
			}
		}
		if e > 0 {
			c := 0
			if prev.less(h) {
				c = -1
			} else if h.less(prev) {
				c = 1
			} else if hasKeys {
				c = bytes.Compare(prevKey, key)
			}
			if c >= 0 {
				return table{}, 0, corrupt("entry %d out of order", e)
			}
		}
		prev, prevKey = h, key
		if !exact && last >= 0 && t.slots[last].hash() == h {
			// Exact snapshot into a fingerprint table: equal fingerprints
			// merge into one entry that lives as long as the longest.
			if s.exp() > t.slots[last].exp() {
				t.slots[last].setExp(s.exp())
			}
			continue
		}
		p := max(t.home(h.hi), last+1)
		if p >= len(t.slots) {
			t = growForRestore(t)
		}
		t.slots[p] = s
		if exact {
			t.refs[p] = uint64(len(t.arena))<<24 | uint64(len(key))
			t.arena = append(t.arena, key...)
		}
		t.count++
		last = p
	}
	if len(rest) != 0 {
		return table{}, 0, corrupt("%d bytes after the last entry", len(rest))
	}
	return t, clock, nil
}

// growForRestore extends the overflow area of a table being filled in order:
// the entries placed so far keep their positions.
func growForRestore(t table) table {
	extra := max(len(t.slots)-int(t.homes), overflowSlots)
	t.slots = append(t.slots, make([]slot, extra)...)
	adviseHugePages(t.slots)
	if t.exact {
		t.refs = append(t.refs, make([]uint64, extra)...)
	}
	return t
}
