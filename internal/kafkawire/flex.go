package kafkawire

// Primitives of Kafka's flexible versions (KIP-482), which the group
// requests of the new consumer protocol use: compact strings and arrays
// (lengths as unsigned varints plus one, zero for null) and a tagged-field
// section after every structure. kafka-go's protocol package registers its
// request types by API key in a fixed table that ends at key 51, so the
// messages it lacks (ConsumerGroupHeartbeat is key 68) are written here by
// hand, as the Fetch request is.

import (
	"encoding/binary"
	"fmt"
	"math"
)

// UUID is a Kafka topic id.
type UUID [16]byte

func (u UUID) String() string { return fmt.Sprintf("%x", u[:]) }

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendCompactString(b []byte, s string) []byte {
	b = appendUvarint(b, uint64(len(s))+1)
	return append(b, s...)
}

func appendCompactNullableString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, 0)
	}
	return appendCompactString(b, *s)
}

func appendInt32s(b []byte, vs []int32) []byte {
	b = appendUvarint(b, uint64(len(vs))+1)
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, uint32(v))
	}
	return b
}

func appendNoTags(b []byte) []byte { return append(b, 0) }

// appendFlexibleHeader appends a size placeholder and request header v2:
// api key, version, correlation id, client id (a classic nullable string)
// and an empty tagged-field section. finishRequest sets the size.
func appendFlexibleHeader(b []byte, key, version int16, corr int32, clientID string) []byte {
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = appendString(b, clientID)
	return appendNoTags(b)
}

func finishRequest(b []byte) []byte {
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// flexReader reads a flexible-version response. The first error sticks:
// later reads return zero values, and err says what went wrong first.
type flexReader struct {
	b   []byte
	err error
}

func (r *flexReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at %d bytes from the end", ErrMalformed, what, len(r.b))
	}
	r.b = nil
}

func (r *flexReader) take(n int, what string) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.fail(what)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *flexReader) int8() int8 {
	if v := r.take(1, "int8"); v != nil {
		return int8(v[0])
	}
	return 0
}

func (r *flexReader) int16() int16 {
	if v := r.take(2, "int16"); v != nil {
		return int16(binary.BigEndian.Uint16(v))
	}
	return 0
}

func (r *flexReader) int32() int32 {
	if v := r.take(4, "int32"); v != nil {
		return int32(binary.BigEndian.Uint32(v))
	}
	return 0
}

func (r *flexReader) uuid() (u UUID) {
	if v := r.take(16, "uuid"); v != nil {
		copy(u[:], v)
	}
	return u
}

func (r *flexReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// length reads a compact length: -1 for null. A length longer than what is
// left (each element takes at least elem bytes) is malformed.
func (r *flexReader) length(elem int) int {
	v := r.uvarint()
	if r.err != nil {
		return 0
	}
	if v == 0 {
		return -1
	}
	n := v - 1
	if n > math.MaxInt32 || int(n)*max(elem, 1) > len(r.b) {
		r.fail("length")
		return 0
	}
	return int(n)
}

func (r *flexReader) compactString() string {
	n := r.length(1)
	if n < 0 {
		return ""
	}
	return string(r.take(n, "string"))
}

func (r *flexReader) int32s() []int32 {
	n := r.length(4)
	if n <= 0 {
		return nil
	}
	vs := make([]int32, n)
	for i := range vs {
		vs[i] = r.int32()
	}
	return vs
}

// tags skips a tagged-field section.
func (r *flexReader) tags() {
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		r.uvarint() // tag
		size := r.uvarint()
		if size > uint64(len(r.b)) {
			r.fail("tagged field")
			return
		}
		r.take(int(size), "tagged field")
	}
}

// responseBody checks a response's header v1 (correlation id, tags) and
// returns a reader of its body.
func responseBody(b []byte) *flexReader {
	r := &flexReader{b: b}
	r.tags()
	return r
}
