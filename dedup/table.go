package dedup

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// slotSize is the size of one table slot: a 128-bit fingerprint and a 32-bit
// expiry, packed without padding.
const slotSize = 20

// slot is one table cell, laid out as
//
//	[0:8)   hash hi, little endian
//	[8:16)  hash lo, little endian
//	[16:20) expiry in Unix seconds, little endian; 0 marks an empty slot
//
// A byte array keeps the slot at 20 bytes (a struct of two uint64 and a
// uint32 would be padded to 24) and holds no pointers, so the garbage
// collector never scans the table.
type slot [slotSize]byte

func (s *slot) hi() uint64    { return binary.LittleEndian.Uint64(s[0:8]) }
func (s *slot) lo() uint64    { return binary.LittleEndian.Uint64(s[8:16]) }
func (s *slot) exp() uint32   { return binary.LittleEndian.Uint32(s[16:20]) }
func (s *slot) hash() hash128 { return hash128{hi: s.hi(), lo: s.lo()} }

func (s *slot) setExp(e uint32) { binary.LittleEndian.PutUint32(s[16:20], e) }

func (s *slot) set(h hash128, e uint32) {
	binary.LittleEndian.PutUint64(s[0:8], h.hi)
	binary.LittleEndian.PutUint64(s[8:16], h.lo)
	binary.LittleEndian.PutUint32(s[16:20], e)
}

const (
	// minHomes is the smallest number of home slots.
	minHomes = 64
	// overflowSlots are allocated past the last home slot so that runs
	// starting near the end need not wrap around; an insert that would
	// run past them grows the table.
	overflowSlots = 64
	// maxLoadNum/maxLoadDen is the load factor (entries per home slot) at
	// which the table grows, by growNum/growDen.
	maxLoadNum, maxLoadDen = 4, 5
	growNum, growDen       = 3, 2
	// maxExactKeyLen is the longest key kept in exact mode.
	maxExactKeyLen = 1<<24 - 1
)

// table is an ordered linear-probing hash table (Amble and Knuth, 1974) over
// 128-bit fingerprints. The home slot of a fingerprint is a monotone function
// of it (hi*homes >> 64), the array does not wrap around, and entries are kept
// in increasing fingerprint order, each at or after its home slot with no
// empty slot in between. Three consequences:
//
//   - the layout depends only on the set of entries, not on the order they
//     were inserted, and a scan from slot 0 yields entries sorted, so a
//     snapshot needs no sort and restore or growth places entries in one pass;
//   - a lookup stops at the first larger fingerprint, so misses are as cheap
//     as hits;
//   - deletion shifts the following displaced entries back by one, leaving no
//     tombstones.
//
// In exact mode, refs (parallel to slots) locate each key in arena, and ties
// between equal fingerprints are ordered by key bytes.
type table struct {
	slots  []slot
	homes  uint64
	count  int
	growAt int

	exact bool
	refs  []uint64 // offset<<24 | length into arena; exact mode only
	arena []byte
	dead  int // bytes of arena no longer referenced
}

func homesFor(keys int) uint64 {
	n := uint64(keys)*maxLoadDen/maxLoadNum + 1
	return max(n, minHomes)
}

// restoreHomes sizes a table restored with keys entries: with the room one
// growth would give (growNum/growDen), since a table sized for exactly its
// entries is at its load limit and the first new key would rebuild it, a
// pause of seconds at ten million keys right after a restart. The room is
// made while the table is filled anyway; expected (Options.ExpectedKeys)
// still sets the least.
func restoreHomes(keys uint64, expected int) uint64 {
	room := min(keys*growNum/growDen, MaxExpectedKeys)
	return homesFor(max(int(room), expected))
}

func newTable(homes uint64, pad int, exact bool) table {
	t := table{
		slots:  make([]slot, homes+uint64(pad)),
		homes:  homes,
		growAt: int(homes * maxLoadNum / maxLoadDen),
		exact:  exact,
	}
	if exact {
		t.refs = make([]uint64, len(t.slots))
	}
	adviseHugePages(t.slots)
	return t
}

func (t *table) home(hi uint64) int {
	h, _ := bits.Mul64(hi, t.homes)
	return int(h)
}

func (t *table) key(i int) []byte {
	r := t.refs[i]
	off, n := r>>24, r&maxExactKeyLen
	return t.arena[off : off+n]
}

// cmpAt compares the entry at slot i with (h, key): -1 if the entry sorts
// first, 0 if it is the same entry, +1 if it sorts after.
func (t *table) cmpAt(i int, h hash128) int {
	s := &t.slots[i]
	sh := s.hi()
	if sh != h.hi {
		if sh < h.hi {
			return -1
		}
		return 1
	}
	sl := s.lo()
	if sl != h.lo {
		if sl < h.lo {
			return -1
		}
		return 1
	}
	return 0
}

// find returns the position of (h, key) and true, or the position where it
// belongs and false. A position equal to len(t.slots) means the entry belongs
// past the end: the table must grow before it can be inserted.
func (t *table) find(h hash128, key []byte) (int, bool) {
	for i := t.home(h.hi); i < len(t.slots); i++ {
		if t.slots[i].exp() == 0 {
			return i, false
		}
		c := t.cmpAt(i, h)
		if c == 0 && t.exact {
			c = bytes.Compare(t.key(i), key)
		}
		switch {
		case c == 0:
			return i, true
		case c > 0:
			return i, false
		}
	}
	return len(t.slots), false
}

// touch reads the home slot of each fingerprint and returns a value that
// depends on every read. Lookups that follow find those slots in the cache:
// the reads are independent of each other, so the processor overlaps their
// misses, where a lookup must wait for its own before the next one starts.
func (t *table) touch(hs []hash128) uint32 {
	var sum uint32
	for _, h := range hs {
		sum += t.slots[t.home(h.hi)].exp()
	}
	return sum
}

// insert puts (h, key, exp) at position i returned by a failed find. It
// reports false, changing nothing, if the run after i reaches the end of the
// array.
func (t *table) insert(i int, h hash128, key []byte, exp uint32) bool {
	if i >= len(t.slots) {
		return false
	}
	e := i
	for e < len(t.slots) && t.slots[e].exp() != 0 {
		e++
	}
	if e == len(t.slots) {
		return false
	}
	copy(t.slots[i+1:e+1], t.slots[i:e])
	t.slots[i].set(h, exp)
	if t.exact {
		copy(t.refs[i+1:e+1], t.refs[i:e])
		t.refs[i] = uint64(len(t.arena))<<24 | uint64(len(key))
		t.arena = append(t.arena, key...)
	}
	t.count++
	return true
}

// remove deletes the entry at position i and shifts the displaced entries
// after it back by one.
func (t *table) remove(i int) {
	if t.exact {
		t.dead += int(t.refs[i] & maxExactKeyLen)
	}
	q := i + 1
	for q < len(t.slots) && t.slots[q].exp() != 0 && t.home(t.slots[q].hi()) < q {
		q++
	}
	copy(t.slots[i:q-1], t.slots[i+1:q])
	t.slots[q-1] = slot{}
	if t.exact {
		copy(t.refs[i:q-1], t.refs[i+1:q])
		t.refs[q-1] = 0
	}
	t.count--
}

// rebuild returns a table with the given number of home slots holding the
// entries of t that are live at nowSec (all entries if nowSec is 0). In exact
// mode the arena is compacted.
func (t *table) rebuild(homes uint64, nowSec uint32) table {
	for pad := overflowSlots; ; pad *= 2 {
		n := newTable(homes, pad, t.exact)
		if t.exact {
			n.arena = make([]byte, 0, len(t.arena)-t.dead)
		}
		if t.copyInto(&n, nowSec) {
			return n
		}
	}
}

func (t *table) copyInto(n *table, nowSec uint32) bool {
	last := -1
	for i := range t.slots {
		s := &t.slots[i]
		e := s.exp()
		if e == 0 || e <= nowSec {
			continue
		}
		p := max(n.home(s.hi()), last+1)
		if p >= len(n.slots) {
			return false
		}
		n.slots[p] = *s
		if t.exact {
			k := t.key(i)
			n.refs[p] = uint64(len(n.arena))<<24 | uint64(len(k))
			n.arena = append(n.arena, k...)
		}
		n.count++
		last = p
	}
	return true
}
