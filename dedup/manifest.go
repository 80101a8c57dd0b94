package dedup

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// manifest is a decoded version 2 snapshot.
type manifest struct {
	clock  int64
	exact  bool
	base   objRef
	deltas []objRef
}

func encodeManifest(clock int64, exact bool, base objRef, deltas []objRef) []byte {
	b := make([]byte, 0, manifestHeaderSize+(1+len(deltas))*48+4)
	b = append(b, snapshotMagic...)
	b = binary.LittleEndian.AppendUint16(b, manifestVersion)
	var flags uint16
	if exact {
		flags |= flagExactKeys
	}
	b = binary.LittleEndian.AppendUint16(b, flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(clock))
	b = binary.LittleEndian.AppendUint32(b, uint32(1+len(deltas)))
	for _, r := range append([]objRef{base}, deltas...) {
		b = binary.AppendUvarint(b, uint64(len(r.name)))
		b = append(b, r.name...)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.size))
		b = binary.LittleEndian.AppendUint32(b, r.crc)
		b = binary.LittleEndian.AppendUint64(b, r.count)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeManifest validates a version 2 snapshot completely.
func decodeManifest(b []byte) (manifest, error) {
	var m manifest
	if len(b) < manifestHeaderSize+trailerSize {
		return m, corrupt("manifest of %d bytes is too short", len(b))
	}
	if string(b[:8]) != snapshotMagic {
		return m, corrupt("bad magic %q", b[:8])
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != manifestVersion {
		return m, fmt.Errorf("%w: version %d, want %d", ErrUnsupportedVersion, v, manifestVersion)
	}
	body := b[:len(b)-trailerSize]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(body):]); got != want {
		return m, corrupt("manifest checksum %08x, want %08x (truncated or damaged)", got, want)
	}
	flags := binary.LittleEndian.Uint16(b[10:])
	if flags&^flagExactKeys != 0 {
		return m, corrupt("unknown flags %#x", flags)
	}
	m.exact = flags&flagExactKeys != 0
	m.clock = int64(binary.LittleEndian.Uint64(b[12:]))
	if m.clock < 0 || m.clock > maxClockNanos {
		return m, corrupt("clock %d out of range", m.clock)
	}
	n := binary.LittleEndian.Uint32(b[20:])
	rest := body[manifestHeaderSize:]
	if n == 0 || uint64(n) > uint64(len(rest))/21 {
		return m, corrupt("%d objects in %d bytes", n, len(rest))
	}
	seen := map[string]bool{}
	for i := range n {
		l, w := binary.Uvarint(rest)
		if w <= 0 || l == 0 || l > maxObjectName || l+20 > uint64(len(rest)-w) {
			return m, corrupt("object %d: bad name length", i)
		}
		r := objRef{name: string(rest[w : w+int(l)])}
		rest = rest[w+int(l):]
		if !checkpoint.ValidName(r.name) || bytes.IndexByte([]byte(r.name), '/') >= 0 || seen[r.name] {
			return m, corrupt("object %d: bad name %q", i, r.name)
		}
		seen[r.name] = true
		size := binary.LittleEndian.Uint64(rest)
		r.crc = binary.LittleEndian.Uint32(rest[8:])
		r.count = binary.LittleEndian.Uint64(rest[12:])
		rest = rest[20:]
		if size < minSnapshotLength || size > 1<<50 || r.count > (size-minSnapshotLength)/entrySize {
			return m, corrupt("object %q: %d entries in %d bytes", r.name, r.count, size)
		}
		r.size = int64(size)
		if i == 0 {
			m.base = r
		} else {
			m.deltas = append(m.deltas, r)
		}
	}
	if len(rest) != 0 {
		return m, corrupt("%d bytes after the last object", len(rest))
	}
	return m, nil
}
