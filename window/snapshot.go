package window

import (
	"context"
	"encoding/binary"

	"fmt"
	"hash/crc32"
	"slices"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Snapshot format, version 1. Integers are varints (signed) or uvarints
// (unsigned, lengths) as in encoding/binary; times are Unix nanoseconds.
//
//	magic "EOWN" | version byte = 1
//	size | slide | offset                     the Spec, checked on Restore
//	watermark                                 math.MinInt64: none yet
//	uvarint #inputs, ascending by id:         id | hasTs byte | maxTs
//	uvarint #windows, ascending by (start, key):
//	    uvarint len | key | start | uvarint events | uvarint len | accumulator
//	CRC-32C (Castagnoli) of everything before, big endian
//
// Version 2, written by session operators (Spec.Gap > 0) only, adds the
// gap after the offset, and a session's end and flags after its start:
//
//	magic "EOWN" | version byte = 2
//	size | slide | offset | gap
//	watermark | inputs as in version 1
//	uvarint #sessions, ascending by (key, start):
//	    uvarint len | key | start | end | flags byte (1: the table may hold a row)
//	    | uvarint events | uvarint len | accumulator
//	CRC-32C
//
// Version 3, written by session operators since touching sessions merge,
// is version 2 (in which no two sessions of a key touch) followed by the
// floors, before the CRC:
//
//	floor0                                    the floor of keys not listed
//	uvarint #keys, ascending:                 every key held, tombstones too
//	    uvarint len | key | floor             math.MinInt64: none
//
// A key's floor is at or after the end of every session of it that closed
// (see keySessions); a version 2 snapshot is read with floor0 = watermark -
// lateness. Window operators still write version 1, byte for byte as before.
//
// Processing-time state (when an input last spoke, whether it is idle) is
// not saved: a restored operator treats every input as having just spoken,
// so the same state always gives the same bytes.
const (
	snapshotMagic   = "EOWN"
	snapshotVersion = 3 // the newest this build reads
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot returns the operator's state: every open window with its
// accumulator, the watermark and each input's newest event time. Equal
// states give identical bytes (windows and inputs are sorted). It never
// blocks and ignores ctx and id.
func (o *Operator[In, Acc, Out]) Snapshot(_ context.Context, _ checkpoint.ID) ([]byte, error) {
	b := make([]byte, 0, 64+o.open*48)
	b = append(b, snapshotMagic...)
	session := o.spec.Gap > 0
	if session {
		b = append(b, 3)
	} else {
		b = append(b, 1)
	}
	b = binary.AppendVarint(b, int64(o.spec.Size))
	b = binary.AppendVarint(b, int64(o.spec.Slide))
	b = binary.AppendVarint(b, int64(o.spec.Offset))
	if session {
		b = binary.AppendVarint(b, int64(o.spec.Gap))
	}
	b = binary.AppendVarint(b, o.wm)

	b = binary.AppendUvarint(b, uint64(len(o.inputs)))
	for _, in := range o.inputs { // sorted by id
		b = binary.AppendVarint(b, int64(in.id))
		if in.hasTs {
			b = append(b, 1)
			b = binary.AppendVarint(b, in.maxTs)
		} else {
			b = append(b, 0)
		}
	}

	b = binary.AppendUvarint(b, uint64(o.open))
	var acc []byte
	if session {
		keys := o.keys[:0]
		for k := range o.sessions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			for _, s := range o.sessions[k].ss {
				b = binary.AppendUvarint(b, uint64(len(k)))
				b = append(b, k...)
				b = binary.AppendVarint(b, s.start)
				b = binary.AppendVarint(b, s.end)
				b = append(b, boolByte(s.emitted))
				b = binary.AppendUvarint(b, s.n)
				acc = o.agg.AppendState(acc[:0], s.acc)
				b = binary.AppendUvarint(b, uint64(len(acc)))
				b = append(b, acc...)
			}
		}
		b = binary.AppendVarint(b, o.floor0)
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for i, k := range keys {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendVarint(b, o.sessions[k].floor)
			keys[i] = ""
		}
		o.keys = keys[:0]
	}
	for _, s := range o.starts {
		g := o.groups[s]
		keys := o.keys[:0]
		for k := range g.panes {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			p := g.panes[k]
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendVarint(b, s)
			b = binary.AppendUvarint(b, p.n)
			acc = o.agg.AppendState(acc[:0], p.acc)
			b = binary.AppendUvarint(b, uint64(len(acc)))
			b = append(b, acc...)
			keys[i] = ""
		}
		o.keys = keys[:0]
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// Restore replaces the operator's state with a snapshot. Inputs are treated
// as having just spoken (their idle timers restart). Windows past their
// allowed lateness under the current options are dropped without emission:
// they fired before the snapshot.
//
// A truncated or altered snapshot returns an error wrapping ErrCorrupt (a
// *CorruptError), a newer format ErrUnsupportedVersion, one taken with a
// different Spec ErrIncompatible; the state is then unchanged.
func (o *Operator[In, Acc, Out]) Restore(_ context.Context, state []byte) error {
	d := decoder{b: state}
	if len(state) < len(snapshotMagic)+1+4 || string(state[:len(snapshotMagic)]) != snapshotMagic {
		return &CorruptError{Offset: 0, Reason: "not a window snapshot"}
	}
	version := state[len(snapshotMagic)]
	if version < 1 || version > snapshotVersion {
		return fmt.Errorf("%w: version %d, this build reads %d", ErrUnsupportedVersion, version, snapshotVersion)
	}
	body := state[:len(state)-4]
	if binary.BigEndian.Uint32(state[len(body):]) != crc32.Checksum(body, castagnoli) {
		return &CorruptError{Offset: len(body), Reason: "checksum mismatch"}
	}
	d.b, d.off = body, len(snapshotMagic)+1

	spec := Spec{Size: durationOf(d.varint()), Slide: durationOf(d.varint()), Offset: durationOf(d.varint())}
	if version >= 2 {
		spec.Gap = durationOf(d.varint())
	}
	wm := d.varint()
	if wm != noWatermark && (wm > maxAbsTime || wm < -maxAbsTime) {
		d.fail("watermark out of range")
	}
	if d.err == nil && spec != o.spec {
		return fmt.Errorf("%w: snapshot windows %+v, operator windows %+v", ErrIncompatible, spec, o.spec)
	}

	now := o.now().UnixNano()
	nIn := d.count(2)
	inputs := make([]input, 0, nIn)
	for i := 0; i < nIn && d.err == nil; i++ {
		id := d.varint()
		if i > 0 && id <= int64(inputs[i-1].id) {
			d.fail("inputs not ascending")
		}
		in := input{id: int(id), lastArrival: now}
		switch d.byte() {
		case 0:
		case 1:
			in.maxTs, in.hasTs = d.varint(), true
			if in.maxTs > maxAbsTime || in.maxTs < -maxAbsTime {
				d.fail("event time out of range")
			}
		default:
			d.fail("bad input flag")
		}
		inputs = append(inputs, in)
	}

	if o.spec.Gap > 0 {
		if d.err != nil {
			return d.err
		}
		return o.restoreSessions(&d, version, wm, inputs, now)
	}
	nPanes := d.count(4)
	groups := make(map[int64]*group[Acc])
	var starts []int64
	var g *group[Acc]
	prevKey := ""
	for i := 0; i < nPanes && d.err == nil; i++ {
		key, start, n := string(d.bytes()), d.varint(), d.uvarint()
		accOff, raw := d.off, d.bytes()
		if d.err != nil {
			break
		}
		switch {
		case start > maxAbsTime || start < -maxAbsTime:
			d.fail("window start out of range")
		case o.spec.lastStart(start) != start:
			d.fail("window start not aligned to the spec")
		case n == 0:
			d.fail("window without events")
		case g != nil && (start < g.start || start == g.start && key <= prevKey):
			d.fail("windows not ascending")
		}
		acc, err := o.agg.ParseState(raw)
		if err != nil && d.err == nil {
			d.err = &CorruptError{Offset: accOff, Reason: err.Error()}
		}
		if d.err != nil {
			break
		}
		if g == nil || g.start != start {
			g = &group[Acc]{start: start, end: start + int64(o.spec.Size), panes: make(map[string]*pane[Acc])}
			g.fired = wm != noWatermark && g.end <= wm
			groups[start] = g
			starts = append(starts, start)
		}
		p := g.newPane()
		p.n, p.acc = n, acc
		g.panes[key] = p
		prevKey = key
	}
	if d.err == nil && d.off != len(body) {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return d.err
	}

	o.inst.open.Add(context.Background(), int64(nPanes-o.open), o.inst.add...)
	o.inputs = declaredInputs(o.declared, inputs, now)
	o.wm, o.groups, o.starts, o.last, o.open = wm, groups, starts, nil, nPanes
	// What early firings emitted is not in the snapshot: the next one
	// emits every unfired window again (the same rows, if it was shown).
	o.pending, o.nextEarly = nPanes > 0, satAdd(now, o.interval)
	// Drop windows past their lateness (possible when AllowedLateness
	// shrank); they fired before the snapshot, so nothing is emitted.
	var discard Output[In, Out]
	o.fire(&discard)
	return nil
}

// CheckpointCompleted does nothing: the operator keeps no journal.
func (o *Operator[In, Acc, Out]) CheckpointCompleted(context.Context, checkpoint.ID) error {
	return nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func durationOf(n int64) time.Duration { return time.Duration(n) }

// decoder reads a snapshot body, remembering the first error.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(reason string) {
	if d.err == nil {
		d.err = &CorruptError{Offset: d.off, Reason: reason}
	}
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated")
		return 0
	}
	d.off++
	return d.b[d.off-1]
}

// count reads an element count, rejecting one that the remaining bytes
// cannot hold at minSize bytes an element (so a corrupt count cannot make
// Restore allocate without bound).
func (d *decoder) count(minSize int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64((len(d.b)-d.off)/minSize) {
		d.fail("count exceeds the remaining bytes")
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("truncated")
		return nil
	}
	b := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return b
}
