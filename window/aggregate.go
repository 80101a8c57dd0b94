package window

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Aggregator folds the inputs of one window into an accumulator and turns
// the accumulator into a result. It is the only thing the operator knows
// about an aggregate function.
//
// The four methods form a commutative monoid with a result map:
//
//   - Identity returns the neutral element: Merge(Identity(), a) and
//     Merge(a, Identity()) equal a. It is "no samples", which is not always
//     zero: the neutral element of an average is an empty (sum, count), not
//     an average of 0.
//   - Add folds one input into acc. Add(acc, v) equals
//     Merge(acc, Add(Identity(), v)).
//   - Merge combines two accumulators. It is associative and commutative
//     (floating-point sums up to rounding; the operator always adds in input
//     order, so a replay is bit-identical all the same).
//   - Result maps an accumulator to the result, with ok false when the
//     accumulator holds no samples and the result is absent (a minimum or an
//     average of nothing), which a table stores as NULL, never as 0.
//
// Identity returns a fresh value on every call. Add and Merge may reuse the
// storage of their first argument and return it; they never modify or retain
// their second argument. An Aggregator holds no per-window state and is used
// by one goroutine at a time.
type Aggregator[In, Acc, Out any] interface {
	Identity() Acc
	Add(acc Acc, v In) Acc
	Merge(a, b Acc) Acc
	Result(acc Acc) (out Out, ok bool)
}

// Codec serialises accumulators for checkpoints. AppendState appends a
// deterministic encoding of acc to dst: equal accumulators encode to equal
// bytes. ParseState decodes one, returning an error (never panicking) for
// input AppendState could not have produced.
type Codec[Acc any] interface {
	AppendState(dst []byte, acc Acc) []byte
	ParseState(src []byte) (Acc, error)
}

// Checkpointable is an Aggregator whose accumulators can be checkpointed:
// what the Operator needs. Every aggregator in this package is one; a
// user-defined aggregator implements both interfaces on one type.
type Checkpointable[In, Acc, Out any] interface {
	Aggregator[In, Acc, Out]
	Codec[Acc]
}

// Number is the set of input types the numeric aggregators accept.
type Number interface {
	int64 | float64
}

// errState builds the error a ParseState returns.
func errState(name string, format string, args ...any) error {
	return fmt.Errorf("%w: %s state: %s", ErrCorrupt, name, fmt.Sprintf(format, args...))
}

func appendNumber[N Number](dst []byte, n N) []byte {
	switch v := any(n).(type) {
	case int64:
		return binary.BigEndian.AppendUint64(dst, uint64(v))
	case float64:
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(v))
	}
	return dst
}

func parseNumber[N Number](src []byte) N {
	var n N
	u := binary.BigEndian.Uint64(src)
	switch p := any(&n).(type) {
	case *int64:
		*p = int64(u)
	case *float64:
		*p = math.Float64frombits(u)
	}
	return n
}

func parseUint64(name string, src []byte) (uint64, error) {
	if len(src) != 8 {
		return 0, errState(name, "want 8 bytes, have %d", len(src))
	}
	return binary.BigEndian.Uint64(src), nil
}

// Count counts inputs. Its neutral element is 0, and the count of nothing is
// 0, a result like any other.
type Count[In any] struct{}

var _ Checkpointable[string, uint64, uint64] = Count[string]{}

func (Count[In]) Identity() uint64                 { return 0 }
func (Count[In]) Add(acc uint64, _ In) uint64      { return acc + 1 }
func (Count[In]) Merge(a, b uint64) uint64         { return a + b }
func (Count[In]) Result(acc uint64) (uint64, bool) { return acc, true }
func (Count[In]) AppendState(dst []byte, acc uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, acc)
}
func (Count[In]) ParseState(src []byte) (uint64, error) { return parseUint64("count", src) }

// Sum adds its inputs. Its neutral element is 0 and the sum of nothing is 0.
// Integer sums wrap on overflow like Go's int64.
type Sum[N Number] struct{}

var _ Checkpointable[int64, int64, int64] = Sum[int64]{}

func (Sum[N]) Identity() N                          { return 0 }
func (Sum[N]) Add(acc N, v N) N                     { return acc + v }
func (Sum[N]) Merge(a, b N) N                       { return a + b }
func (Sum[N]) Result(acc N) (N, bool)               { return acc, true }
func (Sum[N]) AppendState(dst []byte, acc N) []byte { return appendNumber(dst, acc) }
func (Sum[N]) ParseState(src []byte) (N, error) {
	if len(src) != 8 {
		return 0, errState("sum", "want 8 bytes, have %d", len(src))
	}
	return parseNumber[N](src), nil
}

// Extremum is the accumulator of Min and Max: Valid is false until the
// first sample.
type Extremum[N Number] struct {
	V     N
	Valid bool
}

func appendExtremum[N Number](dst []byte, acc Extremum[N]) []byte {
	if !acc.Valid {
		return append(dst, 0)
	}
	return appendNumber(append(dst, 1), acc.V)
}

func parseExtremum[N Number](name string, src []byte) (Extremum[N], error) {
	switch {
	case len(src) == 1 && src[0] == 0:
		return Extremum[N]{}, nil
	case len(src) == 9 && src[0] == 1:
		return Extremum[N]{V: parseNumber[N](src[1:]), Valid: true}, nil
	}
	return Extremum[N]{}, errState(name, "malformed %d bytes", len(src))
}

// Min keeps the smallest input. Its neutral element is "no samples"
// (Extremum.Valid false), and the minimum of nothing is absent. NaN orders
// before every other value, as in cmp.Compare, so a NaN input is the
// minimum.
type Min[N Number] struct{}

var _ Checkpointable[float64, Extremum[float64], float64] = Min[float64]{}

func (Min[N]) Identity() Extremum[N] { return Extremum[N]{} }
func (m Min[N]) Add(acc Extremum[N], v N) Extremum[N] {
	return m.Merge(acc, Extremum[N]{V: v, Valid: true})
}
func (Min[N]) Merge(a, b Extremum[N]) Extremum[N] {
	if !a.Valid || (b.Valid && cmp.Less(b.V, a.V)) {
		return b
	}
	return a
}
func (Min[N]) Result(acc Extremum[N]) (N, bool) { return acc.V, acc.Valid }
func (Min[N]) AppendState(dst []byte, acc Extremum[N]) []byte {
	return appendExtremum(dst, acc)
}
func (Min[N]) ParseState(src []byte) (Extremum[N], error) { return parseExtremum[N]("min", src) }

// Max keeps the largest input. Its neutral element is "no samples", and the
// maximum of nothing is absent. NaN orders before every other value, so it
// is the maximum only of inputs that are all NaN.
type Max[N Number] struct{}

var _ Checkpointable[float64, Extremum[float64], float64] = Max[float64]{}

func (Max[N]) Identity() Extremum[N] { return Extremum[N]{} }
func (m Max[N]) Add(acc Extremum[N], v N) Extremum[N] {
	return m.Merge(acc, Extremum[N]{V: v, Valid: true})
}
func (Max[N]) Merge(a, b Extremum[N]) Extremum[N] {
	if !a.Valid || (b.Valid && cmp.Less(a.V, b.V)) {
		return b
	}
	return a
}
func (Max[N]) Result(acc Extremum[N]) (N, bool) { return acc.V, acc.Valid }
func (Max[N]) AppendState(dst []byte, acc Extremum[N]) []byte {
	return appendExtremum(dst, acc)
}
func (Max[N]) ParseState(src []byte) (Extremum[N], error) { return parseExtremum[N]("max", src) }

// Mean is the accumulator of Avg: the average is kept as a sum and a count,
// because averages cannot be added together.
type Mean struct {
	Sum   float64
	Count uint64
}

func appendMean(dst []byte, acc Mean) []byte {
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(acc.Sum))
	return binary.BigEndian.AppendUint64(dst, acc.Count)
}

func parseMean(src []byte) (Mean, error) {
	if len(src) != 16 {
		return Mean{}, errState("avg", "want 16 bytes, have %d", len(src))
	}
	return Mean{
		Sum:   math.Float64frombits(binary.BigEndian.Uint64(src)),
		Count: binary.BigEndian.Uint64(src[8:]),
	}, nil
}

// Avg is the arithmetic mean. Its neutral element is the empty Mean (no
// samples), not a sample of 0: that is the mistake the article's
// avgState(toFloat64(0)) placeholder makes. The average of nothing is
// absent.
type Avg[N Number] struct{}

var _ Checkpointable[int64, Mean, float64] = Avg[int64]{}

func (Avg[N]) Identity() Mean { return Mean{} }
func (Avg[N]) Add(acc Mean, v N) Mean {
	return Mean{Sum: acc.Sum + float64(v), Count: acc.Count + 1}
}
func (Avg[N]) Merge(a, b Mean) Mean { return Mean{Sum: a.Sum + b.Sum, Count: a.Count + b.Count} }
func (Avg[N]) Result(acc Mean) (float64, bool) {
	if acc.Count == 0 {
		return 0, false
	}
	return acc.Sum / float64(acc.Count), true
}
func (Avg[N]) AppendState(dst []byte, acc Mean) []byte { return appendMean(dst, acc) }
func (Avg[N]) ParseState(src []byte) (Mean, error)     { return parseMean(src) }

// StatsAcc is the accumulator of Stats.
type StatsAcc struct {
	Count         uint64
	Sum, Min, Max float64
}

// Summary is the result of Stats: count, sum, mean, minimum and maximum of
// the window's samples. Stats reports no result for a window without
// samples, so every field of a Summary is meaningful.
type Summary struct {
	Count    uint64
	Sum      float64
	Avg      float64
	Min, Max float64
}

// Stats computes count, sum, average, minimum and maximum of float64 inputs
// in one accumulator, the usual set of a metrics rollup. Its neutral element
// is "no samples" (Count 0), whose result is absent: Result reports ok false
// rather than a Summary of zeros.
type Stats struct{}

var _ Checkpointable[float64, StatsAcc, Summary] = Stats{}

func (Stats) Identity() StatsAcc { return StatsAcc{} }
func (Stats) Add(acc StatsAcc, v float64) StatsAcc {
	if acc.Count == 0 {
		return StatsAcc{Count: 1, Sum: v, Min: v, Max: v}
	}
	acc.Count++
	acc.Sum += v
	if cmp.Less(v, acc.Min) {
		acc.Min = v
	}
	if cmp.Less(acc.Max, v) {
		acc.Max = v
	}
	return acc
}
func (Stats) Merge(a, b StatsAcc) StatsAcc {
	switch {
	case b.Count == 0:
		return a
	case a.Count == 0:
		return b
	}
	a.Count += b.Count
	a.Sum += b.Sum
	if cmp.Less(b.Min, a.Min) {
		a.Min = b.Min
	}
	if cmp.Less(a.Max, b.Max) {
		a.Max = b.Max
	}
	return a
}
func (Stats) Result(acc StatsAcc) (Summary, bool) {
	if acc.Count == 0 {
		return Summary{}, false
	}
	return Summary{
		Count: acc.Count,
		Sum:   acc.Sum,
		Avg:   acc.Sum / float64(acc.Count),
		Min:   acc.Min,
		Max:   acc.Max,
	}, true
}
func (Stats) AppendState(dst []byte, acc StatsAcc) []byte {
	dst = binary.BigEndian.AppendUint64(dst, acc.Count)
	if acc.Count == 0 {
		return dst
	}
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(acc.Sum))
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(acc.Min))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(acc.Max))
}
func (Stats) ParseState(src []byte) (StatsAcc, error) {
	switch {
	case len(src) == 8 && binary.BigEndian.Uint64(src) == 0:
		return StatsAcc{}, nil
	case len(src) == 32 && binary.BigEndian.Uint64(src) != 0:
		return StatsAcc{
			Count: binary.BigEndian.Uint64(src),
			Sum:   math.Float64frombits(binary.BigEndian.Uint64(src[8:])),
			Min:   math.Float64frombits(binary.BigEndian.Uint64(src[16:])),
			Max:   math.Float64frombits(binary.BigEndian.Uint64(src[24:])),
		}, nil
	}
	return StatsAcc{}, errState("stats", "malformed %d bytes", len(src))
}

// Distinct counts distinct strings exactly, keeping every one of them: its
// memory grows with the number of distinct inputs per window. Use
// ApproxDistinct when that is too much. Its neutral element is the empty
// set (a nil map), and the count of nothing is 0.
type Distinct struct{}

var _ Checkpointable[string, map[string]struct{}, uint64] = Distinct{}

func (Distinct) Identity() map[string]struct{} { return nil }
func (Distinct) Add(acc map[string]struct{}, v string) map[string]struct{} {
	if acc == nil {
		acc = make(map[string]struct{})
	}
	acc[v] = struct{}{}
	return acc
}
func (d Distinct) Merge(a, b map[string]struct{}) map[string]struct{} {
	for v := range b {
		a = d.Add(a, v)
	}
	return a
}
func (Distinct) Result(acc map[string]struct{}) (uint64, bool) { return uint64(len(acc)), true }

// AppendState writes the set's members sorted, each as a uvarint length and
// its bytes, after a uvarint count.
func (Distinct) AppendState(dst []byte, acc map[string]struct{}) []byte {
	keys := make([]string, 0, len(acc))
	for k := range acc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, k := range keys {
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
	}
	return dst
}

func (Distinct) ParseState(src []byte) (map[string]struct{}, error) {
	n, w := binary.Uvarint(src)
	if w <= 0 || n > uint64(len(src)) {
		return nil, errState("distinct", "bad member count")
	}
	src = src[w:]
	if n == 0 {
		if len(src) != 0 {
			return nil, errState("distinct", "%d trailing bytes", len(src))
		}
		return nil, nil
	}
	acc := make(map[string]struct{}, n)
	prev := ""
	for i := range n {
		l, w := binary.Uvarint(src)
		if w <= 0 || l > uint64(len(src)-w) {
			return nil, errState("distinct", "member %d truncated", i)
		}
		k := string(src[w : w+int(l)])
		if i > 0 && k <= prev {
			return nil, errState("distinct", "members not sorted and unique")
		}
		acc[k], prev = struct{}{}, k
		src = src[w+int(l):]
	}
	if len(src) != 0 {
		return nil, errState("distinct", "%d trailing bytes", len(src))
	}
	return acc, nil
}
