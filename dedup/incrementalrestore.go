package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// chainInput is one validated object of a chain: its entries and clock.
type chainInput struct {
	name    string
	entries []byte
	count   uint64
	clock   int64
	hasKeys bool
}

// readChain reads and validates the objects of a chain: size and CRC as the
// manifest records them, then each as a version 1 snapshot whose flags are
// the manifest's and whose clock is not later than the next object's nor the
// manifest's.
func readChain(ctx context.Context, objs *checkpoint.Objects, base objRef, deltas []objRef, exact bool, clock int64) ([]chainInput, error) {
	refs := append([]objRef{base}, deltas...)
	inputs := make([]chainInput, 0, len(refs))
	for _, r := range refs {
		b, err := objs.Read(ctx, r.name)
		if err != nil {
			return nil, fmt.Errorf("dedup: reading object %s: %w", r.name, err)
		}
		if int64(len(b)) != r.size {
			return nil, corrupt("object %s: %d bytes, the manifest says %d", r.name, len(b), r.size)
		}
		in, err := parseObject(r.name, b) // checks the object's own CRC
		if err != nil {
			return nil, err
		}
		if sum := binary.LittleEndian.Uint32(b[len(b)-trailerSize:]); sum != r.crc {
			return nil, corrupt("object %s has CRC %08x, the manifest says %08x", r.name, sum, r.crc)
		}
		if in.hasKeys != exact || in.count != r.count {
			return nil, corrupt("object %s does not match the manifest", r.name)
		}
		if in.clock > clock || (len(inputs) > 0 && in.clock < inputs[len(inputs)-1].clock) {
			return nil, corrupt("object %s: clock %d out of order", r.name, in.clock)
		}
		inputs = append(inputs, in)
	}
	return inputs, nil
}

// parseObject validates a version 1 snapshot's header and checksum; the
// entries are checked as they are merged.
func parseObject(name string, b []byte) (chainInput, error) {
	in := chainInput{name: name}
	if len(b) < minSnapshotLength || string(b[:8]) != snapshotMagic {
		return in, corrupt("object %s is not a snapshot", name)
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != snapshotVersion {
		return in, fmt.Errorf("%w: object %s has version %d, want %d", ErrUnsupportedVersion, name, v, snapshotVersion)
	}
	body := b[:len(b)-trailerSize]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(body):]) {
		return in, corrupt("object %s: checksum", name)
	}
	flags := binary.LittleEndian.Uint16(b[10:])
	if flags&^flagExactKeys != 0 {
		return in, corrupt("object %s: unknown flags %#x", name, flags)
	}
	in.hasKeys = flags&flagExactKeys != 0
	in.clock = int64(binary.LittleEndian.Uint64(b[12:]))
	if in.clock < 0 || in.clock > maxClockNanos {
		return in, corrupt("object %s: clock %d out of range", name, in.clock)
	}
	in.count = binary.LittleEndian.Uint64(b[20:])
	in.entries = body[headerSize:]
	if in.count > uint64(len(in.entries)/entrySize) {
		return in, corrupt("object %s: %d entries do not fit", name, in.count)
	}
	return in, nil
}

// cursor walks the entries of one chain input, checking each.
type cursor struct {
	in     *chainInput
	rest   []byte
	left   uint64
	s      slot
	key    []byte
	ok     bool
	minExp uint32 // entries must expire after the input's clock
}

func (c *cursor) next() error {
	if c.left == 0 {
		c.ok = false
		if len(c.rest) != 0 {
			return corrupt("object %s: %d bytes after the last entry", c.in.name, len(c.rest))
		}
		return nil
	}
	c.left--
	if len(c.rest) < entrySize {
		return corrupt("object %s: entry truncated", c.in.name)
	}
	var s slot
	copy(s[:], c.rest[:entrySize])
	c.rest = c.rest[entrySize:]
	var key []byte
	if c.in.hasKeys {
		n, w := binary.Uvarint(c.rest)
		if w <= 0 || n > maxExactKeyLen || n > uint64(len(c.rest)-w) {
			return corrupt("object %s: bad key length", c.in.name)
		}
		key = c.rest[w : w+int(n)]
		c.rest = c.rest[w+int(n):]
		if hashKey(key) != s.hash() {
			return corrupt("object %s: key does not match its hash", c.in.name)
		}
	}
	if s.exp() <= c.minExp {
		return corrupt("object %s: entry expired at %d, clock %d", c.in.name, s.exp(), c.minExp)
	}
	if c.ok && cmpEntries(&c.s, c.key, &s, key) >= 0 {
		return corrupt("object %s: entries out of order", c.in.name)
	}
	c.s, c.key, c.ok = s, key, true
	return nil
}

// mergeEntries calls fn for every entry of the union of the inputs live at
// nowSec, in increasing (hash, key) order, each with its largest expiry.
// The inputs are sorted, so a heap of their cursors merges them in one pass
// without copying: O(n log k) for n entries in k inputs.
func mergeEntries(inputs []chainInput, nowSec uint32, fn func(s *slot, key []byte) error) error {
	cs := make([]cursor, len(inputs))
	h := make([]int, 0, len(inputs)) // a min-heap of the indices of live cursors
	for i := range inputs {
		cs[i] = cursor{in: &inputs[i], rest: inputs[i].entries, left: inputs[i].count,
			minExp: uint32(inputs[i].clock / int64(time.Second))}
		if err := cs[i].next(); err != nil {
			return err
		}
		if cs[i].ok {
			h = append(h, i)
		}
	}
	less := func(a, b int) bool {
		ca, cb := &cs[h[a]], &cs[h[b]]
		return cmpEntries(&ca.s, ca.key, &cb.s, cb.key) < 0
	}
	down := func(i int) {
		for {
			l, m := 2*i+1, i
			if l < len(h) && less(l, m) {
				m = l
			}
			if r := l + 1; r < len(h) && less(r, m) {
				m = r
			}
			if m == i {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	// advanceTop moves the smallest cursor on and restores the heap.
	advanceTop := func() error {
		c := &cs[h[0]]
		if err := c.next(); err != nil {
			return err
		}
		if !c.ok {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		if len(h) > 0 {
			down(0)
		}
		return nil
	}
	s := new(slot) // one allocation, not one per entry
	for len(h) > 0 {
		top := &cs[h[0]]
		*s = top.s
		key := top.key // aliases the input, which does not move
		if err := advanceTop(); err != nil {
			return err
		}
		for len(h) > 0 {
			c := &cs[h[0]]
			if cmpEntries(&c.s, c.key, s, key) != 0 {
				break
			}
			s.setExp(max(s.exp(), c.s.exp()))
			if err := advanceTop(); err != nil {
				return err
			}
		}
		if s.exp() > nowSec {
			if err := fn(s, key); err != nil {
				return err
			}
		}
	}
	return nil
}

// restoreIncremental loads the state a manifest describes, or nothing.
func (d *Deduplicator) restoreIncremental(ctx context.Context, state []byte) error {
	m, err := decodeManifest(state)
	if err != nil {
		return err
	}
	if d.inc.objs == nil {
		return fmt.Errorf("%w: an incremental snapshot needs the checkpoint's objects (attach the deduplicator to a checkpoint.Coordinator)", ErrIncompatible)
	}
	if d.opts.ExactKeys && !m.exact {
		return ErrIncompatible
	}
	inputs, err := readChain(ctx, d.inc.objs, m.base, m.deltas, m.exact, m.clock)
	if err != nil {
		return err
	}
	var total uint64
	for _, in := range inputs {
		total += in.count
	}
	exact := d.opts.ExactKeys
	t := newTable(restoreHomes(total, d.opts.ExpectedKeys), overflowSlots, exact)
	last := -1
	err = mergeEntries(inputs, uint32(m.clock/int64(time.Second)), func(s *slot, key []byte) error {
		h := s.hash()
		if !exact && last >= 0 && t.slots[last].hash() == h {
			// Exact objects into a fingerprint table: equal fingerprints
			// merge into one entry that lives as long as the longest.
			t.slots[last].setExp(max(t.slots[last].exp(), s.exp()))
			return nil
		}
		p := max(t.home(h.hi), last+1)
		if p >= len(t.slots) {
			t = growForRestore(t)
		}
		t.slots[p] = *s
		if exact {
			t.refs[p] = uint64(len(t.arena))<<24 | uint64(len(key))
			t.arena = append(t.arena, key...)
		}
		t.count++
		last = p
		return nil
	})
	if err != nil {
		return err
	}
	if d.opts.MaxKeys > 0 && t.count > d.opts.MaxKeys {
		return fmt.Errorf("%w: snapshot holds %d keys, MaxKeys is %d", ErrFull, t.count, d.opts.MaxKeys)
	}
	d.t, d.clock = t, m.clock
	// The chain goes on from the restored objects if this deduplicator
	// writes incremental snapshots of the same kind (exact keys or
	// fingerprints only); otherwise its next snapshot starts anew. A
	// compaction of the chain before is not adopted (gen).
	d.inc.valid, d.inc.fresh = d.opts.Incremental && m.exact == exact, false
	d.inc.base, d.inc.deltas, d.inc.log, d.inc.unwritten = m.base, m.deltas, nil, nil
	d.inc.gen++
	return nil
}
