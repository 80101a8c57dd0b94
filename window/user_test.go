package window

import (
	"encoding/binary"
	"fmt"
	"math"
)

// SumOfSquares is a user-defined aggregator: one type implementing
// Aggregator and Codec. Its neutral element is "no samples", so the sum of
// squares of nothing is absent.
type SumOfSquares struct{}

type sumSquares struct {
	N  uint64
	SS float64
}

func (SumOfSquares) Identity() sumSquares { return sumSquares{} }
func (SumOfSquares) Add(acc sumSquares, v float64) sumSquares {
	return sumSquares{N: acc.N + 1, SS: acc.SS + v*v}
}
func (SumOfSquares) Merge(a, b sumSquares) sumSquares {
	return sumSquares{N: a.N + b.N, SS: a.SS + b.SS}
}
func (SumOfSquares) Result(acc sumSquares) (float64, bool) { return acc.SS, acc.N > 0 }
func (SumOfSquares) AppendState(dst []byte, acc sumSquares) []byte {
	dst = binary.BigEndian.AppendUint64(dst, acc.N)
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(acc.SS))
}
func (SumOfSquares) ParseState(src []byte) (sumSquares, error) {
	if len(src) != 16 {
		return sumSquares{}, fmt.Errorf("%w: sum of squares: %d bytes", ErrCorrupt, len(src))
	}
	return sumSquares{N: binary.BigEndian.Uint64(src), SS: math.Float64frombits(binary.BigEndian.Uint64(src[8:]))}, nil
}
