package window

// MaxFields is the most values Sums keeps per window.
const MaxFields = 8

// Fields is the accumulator and the result of Sums: Fields[i] is the sum of
// slot i over the window's events.
type Fields[N Number] [MaxFields]N

// Sums sums several numbers per event into one window row: a row with two
// or more counts or sums (events, merged pull requests, lines added)
// without an aggregator of your own. Of sets an event's values in v, one
// slot per number (1 or 0 to count, an amount to sum); v starts zeroed. Its
// neutral element is all zeros, like Count's and Sum's.
//
//	agg := window.Sums[Event, int64]{Of: func(e Event, v *window.Fields[int64]) {
//		v[0] = 1 // events
//		if e.Merged {
//			v[1] = 1 // merged pull requests
//		}
//		v[2] = e.LinesAdded
//	}}
//	// Row.Result[0], Row.Result[1], Row.Result[2] are the columns.
type Sums[In any, N Number] struct {
	Of func(ev In, v *Fields[N])
}

func (Sums[In, N]) Identity() Fields[N] { return Fields[N]{} }

func (s Sums[In, N]) Add(acc Fields[N], ev In) Fields[N] {
	var v Fields[N]
	s.Of(ev, &v)
	for i := range acc {
		acc[i] += v[i]
	}
	return acc
}

func (Sums[In, N]) Merge(a, b Fields[N]) Fields[N] {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

func (Sums[In, N]) Result(acc Fields[N]) (Fields[N], bool) { return acc, true }

// AppendState writes the number of slots up to the last that is not zero,
// then each of them as 8 bytes.
func (Sums[In, N]) AppendState(dst []byte, acc Fields[N]) []byte {
	n := len(acc)
	for n > 0 && acc[n-1] == 0 {
		n--
	}
	dst = append(dst, byte(n))
	for _, v := range acc[:n] {
		dst = appendNumber(dst, v)
	}
	return dst
}

func (Sums[In, N]) ParseState(src []byte) (Fields[N], error) {
	var acc Fields[N]
	if len(src) == 0 || int(src[0]) > MaxFields || len(src) != 1+8*int(src[0]) {
		return acc, errState("sums", "want a slot count up to %d and 8 bytes a slot, have %d bytes", MaxFields, len(src))
	}
	for i := range int(src[0]) {
		acc[i] = parseNumber[N](src[1+8*i:])
	}
	if n := int(src[0]); n > 0 && acc[n-1] == 0 {
		return acc, errState("sums", "slot %d is zero but counted", n-1)
	}
	return acc, nil
}
