package window

import (
	"slices"
)

// dueEntry says that a session of key fires or closes at watermark at.
type dueEntry struct {
	at  int64
	key string
}

// dueHeap is a min-heap of dueEntry by at.
type dueHeap []dueEntry

func (h *dueHeap) push(e dueEntry) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if q[p].at <= q[i].at {
			break
		}
		q[p], q[i] = q[i], q[p]
		i = p
	}
}

func (h *dueHeap) pop() dueEntry {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = dueEntry{}
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q[l].at < q[m].at {
			m = l
		}
		if l+1 < n && q[l+1].at < q[m].at {
			m = l + 1
		}
		if m == i {
			break
		}
		q[m], q[i] = q[i], q[m]
		i = m
	}
	*h = q
	return top
}

// firstWhere returns the first index of ss for which f is true (f is monotone).
func firstWhere[Acc any](ss []*session[Acc], f func(*session[Acc]) bool) int {
	i, _ := slices.BinarySearchFunc(ss, true, func(s *session[Acc], _ bool) int {
		if f(s) {
			return 1
		}
		return -1
	})
	return i
}
