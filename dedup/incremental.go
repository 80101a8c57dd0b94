package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Incremental snapshots (Options.Incremental).
//
// The state of a checkpoint is a base and a chain of deltas, each an object
// in the checkpoint's Storage (checkpoint.Objects), and the participant state
// in the checkpoint file is a small manifest naming them. Base and deltas are
// written in the version 1 snapshot format: a base holds every entry live at
// its checkpoint, a delta the entries written (inserted, written again after
// they expired, or extended) since the previous checkpoint, live at its own.
// An entry's expiry never decreases, so the state at the manifest's clock is
// the union of base and deltas, each entry with its largest expiry, less the
// entries expired at that clock: expiries need no record, and a key that
// expired is never resurrected.
//
// Manifest, version 2 (little endian, magic and version as in version 1):
//
//	0     8  magic "EODEDUP\x00"
//	8     2  version, 2
//	10    2  flags: bit 0 set if the objects carry exact keys
//	12    8  clock, Unix nanoseconds
//	20    4  number of objects n >= 1: the base, then the deltas in order
//	24    ...n objects, each:
//	          v  name length (uvarint, 1..255), then the name
//	          8  size in bytes (uint64)
//	          4  the object's CRC-32C: of its bytes before its own
//	             trailing CRC, which equals it
//	          8  entry count (uint64)
//	end-4 4  CRC-32C of every byte before it
const (
	manifestVersion    = 2
	manifestHeaderSize = 24
	maxObjectName      = 255
	// DefaultMaxDeltas is the default Options.MaxDeltas.
	DefaultMaxDeltas = 64
	// compactFraction: a compaction also starts when the deltas' bytes
	// exceed this fraction of the base's.
	compactFractionNum, compactFractionDen = 1, 2
	// maxDeltasFactor*MaxDeltas deltas make a checkpoint wait for the
	// running compaction: a backstop for a compaction much slower than the
	// checkpoint interval.
	maxDeltasFactor = 4
	// writeChunk is the buffer between the entries and the object writer.
	writeChunk = 64 << 10
)

// objRef is one object of a chain, as the manifest names it.
type objRef struct {
	name  string
	size  int64
	crc   uint32
	count uint64
}

// incremental is the deduplicator's side of incremental snapshots.
type incremental struct {
	objs *checkpoint.Objects
	// valid: base and deltas plus the change log equal the table. False
	// after a restore of a full snapshot until the next base is written;
	// while false nothing is logged. A deduplicator that starts empty (New
	// with Incremental) is valid from the start, with no base yet: its log
	// holds every write, so the first snapshot writes the log as its base,
	// in the pending part, instead of reading the table at the barrier.
	valid bool
	// fresh: valid from New and no snapshot took the log yet. While fresh,
	// a log grown past freshLogLimit (a deduplicator never snapshotted) is
	// dropped, and the first snapshot reads the table after all.
	fresh  bool
	base   objRef
	deltas []objRef
	// log holds every write to the table since the last snapshot: a slot,
	// and in exact mode the key's uvarint length and bytes.
	log []byte
	// spare is the log's second buffer: at an asynchronous barrier the log
	// is handed to the pending part and spare becomes the log. unwritten
	// is a handed-over log whose delta was not written (the checkpoint
	// failed or was aborted): the next snapshot writes it. Both are set by
	// the pending part and read by the next barrier, which the coordinator
	// starts only after the pending part returned.
	spare, unwritten []byte
	// gen counts replacements of the chain, so a compaction of an older
	// chain is not adopted.
	gen uint64

	running bool // a compaction is running
	done    chan compactResult
	ctx     context.Context // of compactions; Close cancels it
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type compactResult struct {
	gen    uint64
	base   objRef
	merged int // deltas folded into base
	err    error
}

// incrementalOn reports whether Snapshot writes incremental snapshots.
func (d *Deduplicator) incrementalOn() bool {
	return d.opts.Incremental && d.inc.objs != nil
}

// logWrite records a write of the table for the next delta.
func (d *Deduplicator) logWrite(h hash128, key []byte, exp uint32) {
	var s slot
	s.set(h, exp)
	d.inc.log = append(d.inc.log, s[:]...)
	if d.t.exact {
		d.inc.log = binary.AppendUvarint(d.inc.log, uint64(len(key)))
		d.inc.log = append(d.inc.log, key...)
	}
	if d.inc.fresh && len(d.inc.log) > freshLogLimit+2*(len(d.t.slots)*slotSize+len(d.t.arena)) {
		// Never snapshotted (no coordinator, or no objects): stop logging
		// rather than grow without bound; the first snapshot, if any,
		// reads the table.
		d.inc.valid, d.inc.fresh, d.inc.log = false, false, nil
	}
}

// freshLogLimit: the log of a deduplicator never snapshotted (see
// incremental.fresh) may grow to this plus twice the table's bytes.
const freshLogLimit = 16 << 20

// UseObjects implements checkpoint.ObjectParticipant: the coordinator gives
// the deduplicator its directory of objects, in which it keeps the base and
// deltas of incremental snapshots (Options.Incremental) and from which it
// restores them.
func (d *Deduplicator) UseObjects(o *checkpoint.Objects) {
	d.inc.objs = o
}

// References implements checkpoint.ObjectParticipant: the objects an
// incremental snapshot's manifest names; none for a full snapshot.
func (d *Deduplicator) References(state []byte) ([]string, error) {
	if len(state) < 10 || binary.LittleEndian.Uint16(state[8:]) != manifestVersion {
		return nil, nil
	}
	m, err := decodeManifest(state)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, 1+len(m.deltas))
	names = append(names, m.base.name)
	for _, r := range m.deltas {
		names = append(names, r.name)
	}
	return names, nil
}

// snapshotIncremental writes a delta (or, the first time, a base) and
// returns the manifest.
func (d *Deduplicator) snapshotIncremental(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	pend, err := d.snapshotIncrementalAsync(ctx, id)
	if err != nil {
		return nil, err
	}
	return pend(ctx)
}

// snapshotIncrementalAsync is the barrier's part of an incremental
// snapshot: the first time (or after a full restore) it writes the base,
// which reads the table, and returns the manifest at once; afterwards it
// hands the change log over and returns a part that writes it as a delta
// while the chain goes on, logging into the other buffer.
func (d *Deduplicator) snapshotIncrementalAsync(ctx context.Context, id checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	inc := &d.inc
	if inc.unwritten != nil {
		// The last pending delta was not written: its writes come first.
		inc.log = append(inc.unwritten, inc.log...)
		inc.unwritten = nil
	}
	if inc.running && len(inc.deltas) >= maxDeltasFactor*d.opts.MaxDeltas {
		// The compaction fell far behind: wait for it rather than let the
		// chain, and what a restore reads, grow without bound.
		d.awaitCompaction(ctx)
	}
	d.adoptCompaction()
	clock, exact := d.clock, d.t.exact
	if inc.valid && inc.base.name == "" {
		// Started empty (see valid): the log is the whole table, and
		// written like a delta it is a base.
		inc.fresh = false
		log := inc.log
		inc.log, inc.spare = inc.spare[:0], nil
		name := objectName("base", id, inc.objs.Generation())
		return func(ctx context.Context) ([]byte, error) {
			ref, err := writeDelta(ctx, inc.objs, name, log, clock, exact)
			if err != nil {
				inc.unwritten = log // the next snapshot writes it, still as the base
				return nil, err
			}
			inc.base, inc.deltas = ref, nil
			inc.spare = log[:0]
			return encodeManifest(clock, exact, inc.base, inc.deltas), nil
		}, nil
	}
	if !inc.valid {
		ref, err := d.writeBase(ctx, objectName("base", id, inc.objs.Generation()))
		if err != nil {
			return nil, err
		}
		inc.base, inc.deltas, inc.log, inc.valid = ref, nil, inc.log[:0], true
		inc.gen++
		d.maybeCompact(clock, exact)
		m := encodeManifest(clock, exact, inc.base, inc.deltas)
		return func(context.Context) ([]byte, error) { return m, nil }, nil
	}
	if len(inc.log) == 0 {
		d.maybeCompact(clock, exact)
		m := encodeManifest(clock, exact, inc.base, inc.deltas)
		return func(context.Context) ([]byte, error) { return m, nil }, nil
	}
	log := inc.log
	inc.log, inc.spare = inc.spare[:0], nil
	name := objectName("delta", id, inc.objs.Generation())
	return func(ctx context.Context) ([]byte, error) {
		ref, err := writeDelta(ctx, inc.objs, name, log, clock, exact)
		if err != nil {
			inc.unwritten = log // the next snapshot writes it
			return nil, err
		}
		inc.deltas = append(inc.deltas, ref)
		if cap(log) > 4*len(log) && cap(log) > 1<<20 {
			log = nil // give back a buffer a burst grew
		}
		inc.spare = log[:0]
		// The compaction reads only objects and what the barrier took.
		d.maybeCompact(clock, exact)
		return encodeManifest(clock, exact, inc.base, inc.deltas), nil
	}, nil
}

// objectName names an object by its kind, the checkpoint it belongs to and
// the generation that wrote it: <kind>-<id, 20 digits>-<generation, 10
// digits>, so names sort by checkpoint and two owners never collide.
func objectName(kind string, id checkpoint.ID, gen int64) string {
	return fmt.Sprintf("%s-%020d-%010d", kind, uint64(id), gen)
}
