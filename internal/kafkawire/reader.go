package kafkawire

import "encoding/binary"

// wireReader reads big-endian fields from a buffer; the first read past its
// end sets bad, and every later read returns zero.
type wireReader struct {
	b   []byte
	bad bool
}

func (r *wireReader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *wireReader) int8() int8 {
	v := r.take(1)
	if v == nil {
		return 0
	}
	return int8(v[0])
}

func (r *wireReader) int16() int16 {
	v := r.take(2)
	if v == nil {
		return 0
	}
	return int16(binary.BigEndian.Uint16(v))
}

func (r *wireReader) int32() int32 {
	v := r.take(4)
	if v == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(v))
}

func (r *wireReader) int64() int64 {
	v := r.take(8)
	if v == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

// skipString reads past a (nullable) string: an int16 length, -1 for null.
func (r *wireReader) skipString() {
	if n := r.int16(); n > 0 {
		r.take(int(n))
	}
}

// int32Bytes reads (nullable) bytes with an int32 length, -1 for null:
// nil for null or empty.
func (r *wireReader) int32Bytes() []byte {
	if n := r.int32(); n > 0 {
		return r.take(int(n))
	}
	return nil
}

func (r *wireReader) varint() int64 {
	if r.bad {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varBytes reads a varint length and that many bytes: nil for a null
// (length -1), an empty non-nil slice for an empty value (length 0), as the
// Java consumer tells them apart (a null value is a tombstone).
func (r *wireReader) varBytes() []byte {
	n := r.varint()
	if n < 0 {
		return nil
	}
	if n == 0 {
		return []byte{} // no allocation: every empty slice shares one address
	}
	if n > int64(len(r.b)) {
		r.bad = true
		return nil
	}
	return r.take(int(n))
}

func (r *wireReader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// compactLen reads the length of a compact array (uvarint of n+1; 0 is
// null, read as empty). A length the rest of the buffer cannot hold sets
// bad.
func (r *wireReader) compactLen() int {
	n := r.uvarint()
	if n == 0 {
		return 0
	}
	if n-1 > uint64(len(r.b)) {
		r.bad = true
		return 0
	}
	return int(n - 1)
}

// compactString reads a compact (nullable) string; null reads as "".
func (r *wireReader) compactString() string {
	n := r.compactLen()
	if n == 0 {
		return ""
	}
	return string(r.take(n))
}

// skipTags reads past a tagged-fields section: a count, then each field's
// tag, size and bytes.
func (r *wireReader) skipTags() {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.bad = true
		return
	}
	for range n {
		r.uvarint() // tag
		size := r.uvarint()
		if size > uint64(len(r.b)) {
			r.bad = true
			return
		}
		r.take(int(size))
	}
}
