package dedup

import "encoding/binary"

// AppendKey appends an unambiguous encoding of parts to dst and returns the
// extended buffer. Each part is written as its length (unsigned varint)
// followed by its bytes, so no two different part lists encode alike:
// ("a:b", "c") and ("a", "b:c") give different keys, and so do ("ab") and
// ("a", "b").
//
// Reuse dst across calls to build keys without allocating:
//
//	buf = dedup.AppendKey(buf[:0], orgID, source, eventID)
func AppendKey(dst []byte, parts ...string) []byte {
	for _, p := range parts {
		dst = binary.AppendUvarint(dst, uint64(len(p)))
		dst = append(dst, p...)
	}
	return dst
}

// Key returns AppendKey(nil, parts...).
func Key(parts ...string) []byte {
	n := 0
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	return AppendKey(make([]byte, 0, n), parts...)
}
