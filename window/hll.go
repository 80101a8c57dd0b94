package window

import (
	"math"
	"math/bits"
)

// HyperLogLog precision bounds and default: a sketch has 2^precision
// one-byte registers and a standard error of about 1.04/sqrt(2^precision).
const (
	MinPrecision     = 4
	MaxPrecision     = 16
	DefaultPrecision = 12 // 4 KiB per sketch, about 1.6% standard error
)

// Sketch is a HyperLogLog sketch of a set of strings. The zero Sketch is
// the empty set at DefaultPrecision and allocates nothing until the first
// Add.
//
// Sketches are deterministic: the hash is fixed (64-bit FNV-1a, finished
// with the MurmurHash3 mixer), so the same inputs give the same registers,
// the same bytes and the same estimate in every process. Merging is the
// register-wise maximum, so it is associative, commutative and idempotent.
type Sketch struct {
	p   uint8   // precision; 0 means DefaultPrecision
	reg []uint8 // nil until the first Add: the empty set
}

// NewSketch returns an empty sketch with the given precision, clamped to
// [MinPrecision, MaxPrecision].
func NewSketch(precision int) Sketch {
	return Sketch{p: uint8(min(max(precision, MinPrecision), MaxPrecision))}
}

func (s Sketch) precision() uint8 {
	if s.p == 0 {
		return DefaultPrecision
	}
	return s.p
}

// Precision returns the sketch's precision.
func (s Sketch) Precision() int { return int(s.precision()) }

func hashString(v string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(v); i++ {
		h ^= uint64(v[i])
		h *= prime
	}
	// MurmurHash3 fmix64: FNV's low bits are weak on short inputs.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Add inserts v, allocating the registers on first use, and returns the
// sketch (which shares its registers with s).
func (s Sketch) Add(v string) Sketch {
	p := s.precision()
	if s.reg == nil {
		s.p, s.reg = p, make([]uint8, 1<<p)
	}
	h := hashString(v)
	idx := h >> (64 - p)
	rank := uint8(bits.LeadingZeros64(h<<p|1<<(p-1)) + 1)
	if rank > s.reg[idx] {
		s.reg[idx] = rank
	}
	return s
}

// Merge returns the union of s and o, reusing s's registers. Sketches of
// different precisions cannot be merged; Merge then returns s unchanged and
// false.
func (s Sketch) Merge(o Sketch) (Sketch, bool) {
	if s.precision() != o.precision() {
		return s, false
	}
	if o.reg == nil {
		return s, true
	}
	if s.reg == nil {
		s.p, s.reg = o.precision(), make([]uint8, len(o.reg))
	}
	for i, r := range o.reg {
		if r > s.reg[i] {
			s.reg[i] = r
		}
	}
	return s, true
}

// Estimate returns the estimated number of distinct strings added.
func (s Sketch) Estimate() uint64 {
	if s.reg == nil {
		return 0
	}
	m := float64(len(s.reg))
	var sum float64
	zeros := 0
	for _, r := range s.reg {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	alpha := 0.7213 / (1 + 1.079/m)
	switch len(s.reg) {
	case 16:
		alpha = 0.673
	case 32:
		alpha = 0.697
	case 64:
		alpha = 0.709
	}
	e := alpha * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros)) // linear counting for small sets
	}
	return uint64(math.Round(e))
}

// AppendBinary appends the sketch's encoding: the precision byte, then a
// zero byte for the empty set or a one byte and the 2^precision registers.
func (s Sketch) AppendBinary(dst []byte) ([]byte, error) {
	dst = append(dst, s.precision())
	if s.reg == nil {
		return append(dst, 0), nil
	}
	dst = append(dst, 1)
	return append(dst, s.reg...), nil
}

// UnmarshalBinary replaces s with the sketch encoded in data, rejecting
// malformed input with an error wrapping ErrCorrupt.
func (s *Sketch) UnmarshalBinary(data []byte) error {
	if len(data) < 2 {
		return errState("hll", "want at least 2 bytes, have %d", len(data))
	}
	p := data[0]
	if p < MinPrecision || p > MaxPrecision {
		return errState("hll", "precision %d out of range", p)
	}
	switch {
	case data[1] == 0 && len(data) == 2:
		*s = Sketch{p: p}
		return nil
	case data[1] == 1 && len(data) == 2+1<<p:
		reg := make([]uint8, 1<<p)
		copy(reg, data[2:])
		for _, r := range reg {
			if r > 64-p+1 {
				return errState("hll", "register value %d out of range", r)
			}
		}
		*s = Sketch{p: p, reg: reg}
		return nil
	}
	return errState("hll", "malformed %d bytes", len(data))
}

// ApproxDistinct estimates the number of distinct strings with a
// HyperLogLog sketch of fixed size: 2^Precision bytes per window once the
// window has a sample, whatever the number of distinct inputs. Precision 0
// means DefaultPrecision. Its neutral element is the empty sketch, and the
// estimate of nothing is 0.
type ApproxDistinct struct {
	Precision int
}

var _ Checkpointable[string, Sketch, uint64] = ApproxDistinct{}

func (a ApproxDistinct) Identity() Sketch {
	if a.Precision == 0 {
		return Sketch{}
	}
	return NewSketch(a.Precision)
}
func (ApproxDistinct) Add(acc Sketch, v string) Sketch { return acc.Add(v) }

// Merge unions the sketches. Sketches from one ApproxDistinct always share
// a precision; on a mismatch (only possible with hand-made sketches) the
// first is returned unchanged.
func (ApproxDistinct) Merge(a, b Sketch) Sketch {
	s, _ := a.Merge(b)
	return s
}
func (ApproxDistinct) Result(acc Sketch) (uint64, bool) { return acc.Estimate(), true }
func (ApproxDistinct) AppendState(dst []byte, acc Sketch) []byte {
	dst, _ = acc.AppendBinary(dst)
	return dst
}
func (a ApproxDistinct) ParseState(src []byte) (Sketch, error) {
	var s Sketch
	if err := s.UnmarshalBinary(src); err != nil {
		return Sketch{}, err
	}
	if s.precision() != a.Identity().precision() {
		return Sketch{}, errState("hll", "precision %d, want %d", s.precision(), a.Identity().precision())
	}
	return s, nil
}
