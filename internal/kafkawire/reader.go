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

// varBytes reads a varint length and that many bytes; kafka-go's Reader
// hands out nil for a null (-1) and for an empty value alike, and so does
// this.
func (r *wireReader) varBytes() []byte {
	n := r.varint()
	if n <= 0 {
		return nil
	}
	if n > int64(len(r.b)) {
		r.bad = true
		return nil
	}
	return r.take(int(n))
}
