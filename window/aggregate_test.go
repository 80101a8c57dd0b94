package window

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lawChecker checks the monoid laws of one aggregator on random inputs.
type lawChecker interface {
	check(t *testing.T, r *rand.Rand)
}

type laws[In, Acc, Out any] struct {
	agg Checkpointable[In, Acc, Out]
	gen func(r *rand.Rand) In
}

// Floating-point inputs are small integers, so sums are exact and the laws
// hold bit for bit.
func intFloat(r *rand.Rand) float64 { return float64(r.IntN(2001) - 1000) }
func smallInt(r *rand.Rand) int64   { return int64(r.IntN(2001) - 1000) }
func word(r *rand.Rand) string      { return fmt.Sprintf("w%d", r.IntN(300)) }

func (l laws[In, Acc, Out]) enc(a Acc) string { return string(l.agg.AppendState(nil, a)) }

// clone copies an accumulator through its codec, since Merge may reuse its
// first argument.
func (l laws[In, Acc, Out]) clone(t *testing.T, a Acc) Acc {
	c, err := l.agg.ParseState(l.agg.AppendState(nil, a))
	require.NoError(t, err)
	return c
}

func (l laws[In, Acc, Out]) fold(xs []In) Acc {
	acc := l.agg.Identity()
	for _, x := range xs {
		acc = l.agg.Add(acc, x)
	}
	return acc
}

func (l laws[In, Acc, Out]) check(t *testing.T, r *rand.Rand) {
	inputs := func() []In {
		xs := make([]In, r.IntN(4)*r.IntN(40)) // often empty
		for i := range xs {
			xs[i] = l.gen(r)
		}
		return xs
	}
	xs, ys, zs := inputs(), inputs(), inputs()
	a, b, c := l.fold(xs), l.fold(ys), l.fold(zs)
	m := l.agg.Merge
	cl := func(x Acc) Acc { return l.clone(t, x) }

	assert.Equal(t, l.enc(a), l.enc(m(l.agg.Identity(), cl(a))), "left identity")
	assert.Equal(t, l.enc(a), l.enc(m(cl(a), l.agg.Identity())), "right identity")
	assert.Equal(t, l.enc(m(m(cl(a), cl(b)), cl(c))), l.enc(m(cl(a), m(cl(b), cl(c)))), "associativity")
	assert.Equal(t, l.enc(m(cl(a), cl(b))), l.enc(m(cl(b), cl(a))), "commutativity")
	assert.Equal(t, l.enc(l.fold(append(append([]In(nil), xs...), ys...))), l.enc(m(cl(a), cl(b))), "add is merge of singletons")
	before := l.enc(b)
	m(cl(a), b)
	assert.Equal(t, before, l.enc(b), "merge leaves its second argument alone")
	ra, oka := l.agg.Result(a)
	rc, okc := l.agg.Result(cl(a))
	assert.Equal(t, ra, rc, "result survives the codec")
	assert.Equal(t, oka, okc)
}

func allLaws() map[string]lawChecker {
	return map[string]lawChecker{
		"count":           laws[string, uint64, uint64]{agg: Count[string]{}, gen: word},
		"sum int":         laws[int64, int64, int64]{agg: Sum[int64]{}, gen: smallInt},
		"sum float":       laws[float64, float64, float64]{agg: Sum[float64]{}, gen: intFloat},
		"min":             laws[float64, Extremum[float64], float64]{agg: Min[float64]{}, gen: intFloat},
		"max int":         laws[int64, Extremum[int64], int64]{agg: Max[int64]{}, gen: smallInt},
		"avg":             laws[float64, Mean, float64]{agg: Avg[float64]{}, gen: intFloat},
		"stats":           laws[float64, StatsAcc, Summary]{agg: Stats{}, gen: intFloat},
		"distinct":        laws[string, map[string]struct{}, uint64]{agg: Distinct{}, gen: word},
		"hll":             laws[string, Sketch, uint64]{agg: ApproxDistinct{}, gen: word},
		"hll precision 6": laws[string, Sketch, uint64]{agg: ApproxDistinct{Precision: 6}, gen: word},
		"user-defined":    laws[float64, sumSquares, float64]{agg: SumOfSquares{}, gen: intFloat},
	}
}

func TestAggregatorLaws(t *testing.T) {
	for name, l := range allLaws() {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			for range 300 {
				l.check(t, r)
			}
		})
	}
}

// Each aggregator's neutral element gives the documented result: "no
// samples" is absent for min, max, avg and stats, never a 0.
func TestResultOfNoSamples(t *testing.T) {
	tests := []struct {
		name   string
		give   func() (any, bool)
		want   any
		wantOK bool
	}{
		{"count", func() (any, bool) { return Count[int]{}.Result(Count[int]{}.Identity()) }, uint64(0), true},
		{"sum", func() (any, bool) { return Sum[float64]{}.Result(Sum[float64]{}.Identity()) }, 0.0, true},
		{"min", func() (any, bool) { return Min[float64]{}.Result(Min[float64]{}.Identity()) }, 0.0, false},
		{"max", func() (any, bool) { return Max[int64]{}.Result(Max[int64]{}.Identity()) }, int64(0), false},
		{"avg", func() (any, bool) { return Avg[float64]{}.Result(Avg[float64]{}.Identity()) }, 0.0, false},
		{"stats", func() (any, bool) { return Stats{}.Result(Stats{}.Identity()) }, Summary{}, false},
		{"distinct", func() (any, bool) { return Distinct{}.Result(Distinct{}.Identity()) }, uint64(0), true},
		{"hll", func() (any, bool) { return ApproxDistinct{}.Result(ApproxDistinct{}.Identity()) }, uint64(0), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.give()
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestAvgIgnoresNoSamplesButNotZeros(t *testing.T) {
	var a Avg[float64]
	acc := a.Merge(a.Add(a.Add(a.Identity(), 10), 20), a.Identity())
	got, ok := a.Result(acc)
	assert.True(t, ok)
	assert.Equal(t, 15.0, got, "merging the neutral element changes nothing")
	got, _ = a.Result(a.Add(acc, 0))
	assert.Equal(t, 10.0, got, "a real sample of 0 does count")
}

func TestStatsSummary(t *testing.T) {
	var s Stats
	acc := s.Identity()
	for _, v := range []float64{4, -2, 10} {
		acc = s.Add(acc, v)
	}
	got, ok := s.Result(acc)
	require.True(t, ok)
	assert.Equal(t, Summary{Count: 3, Sum: 12, Avg: 4, Min: -2, Max: 10}, got)
}

func TestHyperLogLogAccuracy(t *testing.T) {
	tests := []struct {
		precision int
		n         int
	}{
		{precision: 12, n: 0},
		{precision: 12, n: 1},
		{precision: 12, n: 100},
		{precision: 12, n: 5000},
		{precision: 12, n: 50000},
		{precision: 14, n: 50000},
		{precision: 4, n: 1000},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("p%d n%d", tt.precision, tt.n), func(t *testing.T) {
			agg := ApproxDistinct{Precision: tt.precision}
			acc := agg.Identity()
			for i := range tt.n {
				acc = agg.Add(acc, fmt.Sprintf("user-%d", i))
				acc = agg.Add(acc, fmt.Sprintf("user-%d", i/2)) // duplicates
			}
			got, _ := agg.Result(acc)
			stdErr := 1.04 / math.Sqrt(float64(int(1)<<tt.precision))
			assert.InDelta(t, float64(tt.n), float64(got), 4*stdErr*float64(tt.n)+0.5)
		})
	}
}

// The sketch bytes are part of every snapshot, so the hash and layout must
// never change: this golden digest fails if they do.
func TestHyperLogLogIsDeterministic(t *testing.T) {
	agg := ApproxDistinct{}
	acc := agg.Identity()
	for i := range 10000 {
		acc = agg.Add(acc, fmt.Sprintf("user-%d", i))
	}
	sum := sha256.Sum256(agg.AppendState(nil, acc))
	assert.Equal(t, "efd8800d0e979efd", hex.EncodeToString(sum[:8]))
	est, _ := agg.Result(acc)
	assert.Equal(t, uint64(9892), est)
}

func TestHyperLogLogRefusesMixedPrecision(t *testing.T) {
	a := NewSketch(10).Add("x")
	_, ok := a.Merge(NewSketch(12).Add("y"))
	assert.False(t, ok)
	_, err := ApproxDistinct{Precision: 10}.ParseState(ApproxDistinct{}.AppendState(nil, Sketch{}))
	assert.ErrorIs(t, err, ErrCorrupt)
}

// FuzzParseState feeds every aggregator's decoder arbitrary bytes: no
// panics, only ErrCorrupt errors, and whatever decodes re-encodes to a
// fixed point.
func FuzzParseState(f *testing.F) {
	codecs := allLaws()
	names := slices.Sorted(maps.Keys(codecs))
	for i := range names {
		f.Add(uint8(i), []byte{})
		f.Add(uint8(i), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		l := codecs[names[int(which)%len(names)]]
		l.(interface{ fixedPoint(*testing.T, []byte) }).fixedPoint(t, data)
	})
}

func (l laws[In, Acc, Out]) fixedPoint(t *testing.T, data []byte) {
	acc, err := l.agg.ParseState(data)
	if err != nil {
		assert.ErrorIs(t, err, ErrCorrupt)
		return
	}
	enc := l.agg.AppendState(nil, acc)
	again, err := l.agg.ParseState(enc)
	require.NoError(t, err)
	require.Equal(t, enc, l.agg.AppendState(nil, again))
}
