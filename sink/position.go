package sink

import "strconv"

// Position locates a row in its source partition: the offset of the record
// that produced it and the row's index among that record's rows. A chain hands
// rows to a sink in strictly increasing Position order, and replaying the same
// records after a restore yields the same rows at the same positions.
type Position struct {
	Offset int64  `json:"o"`
	Index  uint32 `json:"i"`
}

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.Offset < q.Offset:
		return -1
	case p.Offset > q.Offset:
		return 1
	case p.Index < q.Index:
		return -1
	case p.Index > q.Index:
		return 1
	}
	return 0
}

// String formats p as "offset.index".
func (p Position) String() string {
	return strconv.FormatInt(p.Offset, 10) + "." + strconv.FormatUint(uint64(p.Index), 10)
}
