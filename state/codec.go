package state

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// Codec turns keys or values of type T into bytes for snapshots and back.
// The state calls Append at every Snapshot and Decode at every Restore.
//
// Append appends the encoding of v to dst and returns the extended slice. It
// must be deterministic: equal values (for keys, values equal under ==)
// give equal bytes, whatever the process or the time, since snapshots of
// the same state must be byte-identical and keys are ordered by their bytes.
// It cannot fail: a value the codec cannot encode must be refused before it
// is stored.
//
// Decode returns the value b encodes; b is exactly one encoding (the state
// stores lengths), and Decode must not retain it. It returns an error for
// bytes Append never writes. Restore checks that Append(Decode(b)) gives b
// again, so a codec whose Decode accepts several spellings of one value
// cannot make two snapshots of one state differ.
type Codec[T any] interface {
	Append(dst []byte, v T) []byte
	Decode(b []byte) (T, error)
}

// String encodes a string as its bytes. Decode refuses invalid UTF-8 only
// if Strict is set: Go strings may hold any bytes.
type String struct {
	// Strict makes Decode refuse bytes that are not valid UTF-8.
	Strict bool
}

func (String) Append(dst []byte, v string) []byte { return append(dst, v...) }

func (c String) Decode(b []byte) (string, error) {
	if c.Strict && !utf8.Valid(b) {
		return "", fmt.Errorf("state: invalid UTF-8 %q", b)
	}
	return string(b), nil
}

// Bytes encodes a byte slice as itself. A nil and an empty slice encode
// alike and decode to an empty, non-nil slice.
type Bytes struct{}

func (Bytes) Append(dst []byte, v []byte) []byte { return append(dst, v...) }
func (Bytes) Decode(b []byte) ([]byte, error)    { return append([]byte{}, b...), nil }

// Int64 encodes an int64 as a zigzag varint (1 byte for -64 to 63).
type Int64 struct{}

func (Int64) Append(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }

func (Int64) Decode(b []byte) (int64, error) {
	v, n := binary.Varint(b)
	if n <= 0 || n != len(b) {
		return 0, fmt.Errorf("state: bad varint %x", b)
	}
	return v, nil
}

// Uint64 encodes a uint64 as a varint.
type Uint64 struct{}

func (Uint64) Append(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

func (Uint64) Decode(b []byte) (uint64, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, fmt.Errorf("state: bad uvarint %x", b)
	}
	return v, nil
}

// Float64 encodes a float64 as its 8 IEEE 754 bytes, little endian. As a
// key, NaN is refused by Snapshot: NaN != NaN, so a map holds any number
// of NaN keys, which no snapshot can tell apart.
type Float64 struct{}

func (Float64) Append(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}

func (Float64) Decode(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("state: float64 of %d bytes", len(b))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
}

// Bool encodes a bool as one byte, 0 or 1.
type Bool struct{}

func (Bool) Append(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func (Bool) Decode(b []byte) (bool, error) {
	if len(b) != 1 || b[0] > 1 {
		return false, fmt.Errorf("state: bad bool %x", b)
	}
	return b[0] == 1, nil
}

// Time encodes a time.Time as Unix nanoseconds (a zigzag varint) and
// decodes it in UTC: the location and the monotonic clock reading are not
// kept. Times before 1678 or after 2262, which Unix nanoseconds cannot
// hold, are clamped to those years; the zero time.Time encodes apart and
// decodes to the zero time.Time again. As a key, store times in UTC: two
// time.Time values of one instant in two locations are different keys (==
// compares the location) with the same encoding, which Snapshot refuses.
type Time struct{}

// zeroTimeNanos stands for the zero time.Time, which UnixNano cannot
// represent.
const zeroTimeNanos = math.MinInt64

func (Time) Append(dst []byte, v time.Time) []byte {
	if v.IsZero() {
		return binary.AppendVarint(dst, zeroTimeNanos)
	}
	// The range of Unix nanoseconds, less zeroTimeNanos.
	if lo := time.Unix(0, math.MinInt64+1); v.Before(lo) {
		v = lo
	} else if hi := time.Unix(0, math.MaxInt64); v.After(hi) {
		v = hi
	}
	return binary.AppendVarint(dst, v.UnixNano())
}

func (Time) Decode(b []byte) (time.Time, error) {
	v, n := binary.Varint(b)
	if n <= 0 || n != len(b) {
		return time.Time{}, fmt.Errorf("state: bad time %x", b)
	}
	if v == zeroTimeNanos {
		return time.Time{}, nil
	}
	return time.Unix(0, v).UTC(), nil
}

// Duration encodes a time.Duration as a zigzag varint of nanoseconds.
type Duration struct{}

func (Duration) Append(dst []byte, v time.Duration) []byte {
	return binary.AppendVarint(dst, int64(v))
}

func (Duration) Decode(b []byte) (time.Duration, error) {
	v, err := Int64{}.Decode(b)
	return time.Duration(v), err
}

var (
	_ Codec[string]        = String{}
	_ Codec[[]byte]        = Bytes{}
	_ Codec[int64]         = Int64{}
	_ Codec[uint64]        = Uint64{}
	_ Codec[float64]       = Float64{}
	_ Codec[bool]          = Bool{}
	_ Codec[time.Time]     = Time{}
	_ Codec[time.Duration] = Duration{}
)
