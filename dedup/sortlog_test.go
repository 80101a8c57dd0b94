package dedup

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSortLog checks the bucket sort against pdqsort on the inputs a log
// can hold, including those that defeat the buckets: every hash alike in
// its top bits, equal hashes told apart by key, and duplicates.
func TestSortLog(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := func(n int) [][]byte {
		ks := make([][]byte, n)
		for i := range ks {
			ks[i] = fmt.Appendf(nil, "k%d", rng.IntN(n))
		}
		return ks
	}
	cases := map[string]func(n int) []logEntry{
		"uniform": func(n int) []logEntry {
			es := make([]logEntry, n)
			for i := range es {
				es[i] = logEntry{h: hash128{hi: rng.Uint64(), lo: rng.Uint64()}, exp: rng.Uint32()}
			}
			return es
		},
		"one bucket": func(n int) []logEntry {
			es := make([]logEntry, n)
			for i := range es {
				es[i] = logEntry{h: hash128{hi: rng.Uint64N(1 << 20), lo: rng.Uint64()}, exp: rng.Uint32()}
			}
			return es
		},
		"equal hashes, keys differ": func(n int) []logEntry {
			es := make([]logEntry, n)
			ks := keys(n)
			for i := range es {
				es[i] = logEntry{h: hash128{hi: uint64(rng.IntN(3)) << 60, lo: 7}, exp: uint32(i), key: ks[i]}
			}
			return es
		},
		"duplicates": func(n int) []logEntry {
			es := make([]logEntry, n)
			for i := range es {
				es[i] = logEntry{h: hash128{hi: rng.Uint64N(16) << 59, lo: rng.Uint64N(4)}, exp: uint32(i)}
			}
			return es
		},
	}
	for name, gen := range cases {
		for _, n := range []int{0, 1, 255, 256, 257, 1000, 40_000} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				es := gen(n)
				got := sortLog(slices.Clone(es))
				require.True(t, slices.IsSortedFunc(got, cmpLogEntriesByValue), "not sorted")
				// The same entries, none lost or doubled.
				full := func(a, b logEntry) int {
					if c := cmpLogEntries(&a, &b); c != 0 {
						return c
					}
					return cmp.Compare(a.exp, b.exp)
				}
				want := slices.Clone(es)
				slices.SortFunc(want, full)
				have := slices.Clone(got)
				slices.SortFunc(have, full)
				require.Equal(t, want, have)
			})
		}
	}
}

// BenchmarkSortLog compares the bucket sort with the pdqsort it replaced on
// a delta of half a million entries (a second of a million events a second).
func BenchmarkSortLog(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	es := make([]logEntry, 500_000)
	for i := range es {
		es[i] = logEntry{h: hash128{hi: rng.Uint64(), lo: rng.Uint64()}, exp: rng.Uint32()}
	}
	work := make([]logEntry, len(es))
	b.Run("bucket", func(b *testing.B) {
		for b.Loop() {
			copy(work, es)
			sortLog(work)
		}
	})
	b.Run("pdqsort", func(b *testing.B) {
		for b.Loop() {
			copy(work, es)
			slices.SortFunc(work, cmpLogEntriesByValue)
		}
	})
}
