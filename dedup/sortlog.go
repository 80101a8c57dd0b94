package dedup

import (
	"math/bits"
	"slices"
)

// sortLog returns a change log's entries sorted by hash, then key (cmpLogEntries),
// as writeDelta needs them. A delta holds every key first seen in one
// checkpoint interval (half a million at a million events a second), and
// sorting it is the largest cost of a checkpoint on the processor's cores:
// pdqsort moved the 48-byte entries about log2(n) times each.
//
// Hashes are uniform, so one counting pass on their top bits puts the
// entries into buckets of a few each, already in order between buckets;
// each bucket is then sorted on its own. The bucket sort is only a
// partition: its correctness does not rest on the hash being uniform (a
// bucket holding every entry is sorted by pdqsort, as before), only its
// speed does.
func sortLog(es []logEntry) []logEntry {
	n := len(es)
	if n < 256 {
		slices.SortFunc(es, cmpLogEntriesByValue)
		return es
	}
	// About four entries a bucket, at most 2^16 buckets.
	shift := min(bits.Len(uint(n))-2, 16)
	counts := make([]int, 1<<shift+1)
	top := uint(64 - shift)
	for i := range es {
		counts[es[i].h.hi>>top+1]++
	}
	for b := 1; b < len(counts); b++ {
		counts[b] += counts[b-1]
	}
	// counts[b] is now where bucket b starts; scatter into a copy.
	out := make([]logEntry, n)
	next := slices.Clone(counts[:len(counts)-1])
	for i := range es {
		b := es[i].h.hi >> top
		out[next[b]] = es[i]
		next[b]++
	}
	for b := 0; b < len(counts)-1; b++ {
		sortBucket(out[counts[b]:counts[b+1]])
	}
	return out
}

// sortBucket sorts a bucket in place: insertion sort for the few entries a
// bucket usually holds, pdqsort beyond.
func sortBucket(es []logEntry) {
	if len(es) > 12 {
		slices.SortFunc(es, cmpLogEntriesByValue)
		return
	}
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && cmpLogEntries(&es[j-1], &es[j]) > 0; j-- {
			es[j-1], es[j] = es[j], es[j-1]
		}
	}
}

func cmpLogEntriesByValue(a, b logEntry) int { return cmpLogEntries(&a, &b) }
