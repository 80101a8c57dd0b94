package dedup

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

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

// chunkWriter buffers small writes into chunks, computing the snapshot's
// CRC-32C over each chunk.
type chunkWriter struct {
	w   io.Writer
	buf []byte
	crc uint32
	err error
	ctx context.Context // if set, its end stops the writing at the next chunk
}

func (c *chunkWriter) flush() {
	if c.err != nil || len(c.buf) == 0 {
		return
	}
	if c.ctx != nil {
		if c.err = c.ctx.Err(); c.err != nil {
			return
		}
	}
	c.crc = crc32.Update(c.crc, castagnoli, c.buf)
	_, c.err = c.w.Write(c.buf)
	c.buf = c.buf[:0]
}

func (c *chunkWriter) grow() {
	if len(c.buf) > writeChunk-1024 {
		c.flush()
	}
}

// header appends a version 1 snapshot header.
func (c *chunkWriter) header(clock int64, exact bool, count uint64) {
	c.buf = append(c.buf, snapshotMagic...)
	c.buf = binary.LittleEndian.AppendUint16(c.buf, snapshotVersion)
	var flags uint16
	if exact {
		flags |= flagExactKeys
	}
	c.buf = binary.LittleEndian.AppendUint16(c.buf, flags)
	c.buf = binary.LittleEndian.AppendUint64(c.buf, uint64(clock))
	c.buf = binary.LittleEndian.AppendUint64(c.buf, count)
}

func (c *chunkWriter) entry(s *slot, key []byte, exact bool) {
	c.buf = append(c.buf, s[:]...)
	if exact {
		c.buf = binary.AppendUvarint(c.buf, uint64(len(key)))
		if len(key) > writeChunk {
			c.flush()
			if c.err == nil {
				c.crc = crc32.Update(c.crc, castagnoli, key)
				_, c.err = c.w.Write(key)
			}
			return
		}
		c.buf = append(c.buf, key...)
	}
	c.grow()
}

// finish writes the trailing CRC.
func (c *chunkWriter) finish() error {
	c.flush()
	if c.err != nil {
		return c.err
	}
	_, err := c.w.Write(binary.LittleEndian.AppendUint32(nil, c.crc))
	return err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeBase writes the table's live entries as a version 1 snapshot object,
// streamed: the same bytes Snapshot returns without Incremental.
func (d *Deduplicator) writeBase(ctx context.Context, name string) (objRef, error) {
	t := &d.t
	nowSec := uint32(d.clock / int64(time.Second))
	var n uint64
	for i := range t.slots {
		if e := t.slots[i].exp(); e != 0 && e > nowSec {
			n++
		}
	}
	var sum uint32
	info, err := d.inc.objs.Write(ctx, name, func(w io.Writer) error {
		c := &chunkWriter{w: w, buf: make([]byte, 0, writeChunk)}
		defer func() { sum = c.crc }()
		c.header(d.clock, t.exact, n)
		for i := range t.slots {
			s := &t.slots[i]
			if e := s.exp(); e == 0 || e <= nowSec {
				continue
			}
			var key []byte
			if t.exact {
				key = t.key(i)
			}
			c.entry(s, key, t.exact)
			if c.err != nil {
				return c.err
			}
		}
		return c.finish()
	})
	if err != nil {
		return objRef{}, fmt.Errorf("dedup: writing base %s: %w", name, err)
	}
	return objRef{name: name, size: info.Size, crc: sum, count: n}, nil
}

// logEntry is one parsed entry of the change log; key aliases the log.
type logEntry struct {
	h   hash128
	exp uint32
	key []byte
}

func cmpLogEntries(a, b *logEntry) int {
	if a.h.hi != b.h.hi {
		return cmp.Compare(a.h.hi, b.h.hi)
	}
	if a.h.lo != b.h.lo {
		return cmp.Compare(a.h.lo, b.h.lo)
	}
	return bytes.Compare(a.key, b.key)
}

func cmpEntries(as *slot, ak []byte, bs *slot, bk []byte) int {
	if a, b := as.hi(), bs.hi(); a != b {
		return cmp.Compare(a, b)
	}
	if a, b := as.lo(), bs.lo(); a != b {
		return cmp.Compare(a, b)
	}
	return bytes.Compare(ak, bk)
}

// writeDelta writes log, sorted, one entry per key with its largest
// expiry, live at clock, as a version 1 snapshot object. It reads nothing
// of the table, so it may run beside the chain (see SnapshotAsync).
func writeDelta(ctx context.Context, objs *checkpoint.Objects, name string, log []byte, clock int64, exact bool) (objRef, error) {
	nowSec := uint32(clock / int64(time.Second))
	es := make([]logEntry, 0, len(log)/slotSize) // an upper bound
	for b := log; len(b) > 0; {
		var s slot
		copy(s[:], b[:slotSize])
		b = b[slotSize:]
		e := logEntry{h: s.hash(), exp: s.exp()}
		if exact {
			n, w := binary.Uvarint(b)
			e.key = b[w : w+int(n)]
			b = b[w+int(n):]
		}
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b logEntry) int { return cmpLogEntries(&a, &b) })
	live := es[:0]
	for i := range es {
		e := &es[i]
		if k := len(live) - 1; k >= 0 && cmpLogEntries(&live[k], e) == 0 {
			live[k].exp = max(live[k].exp, e.exp)
			continue
		}
		live = append(live, *e)
	}
	// Drop what expired: kept only now, after equal entries merged, so an
	// entry's largest expiry decides.
	n := 0
	for i := range live {
		if live[i].exp > nowSec {
			live[n] = live[i]
			n++
		}
	}
	live = live[:n]
	var sum uint32
	info, err := objs.Write(ctx, name, func(w io.Writer) error {
		c := &chunkWriter{w: w, buf: make([]byte, 0, writeChunk)}
		defer func() { sum = c.crc }()
		c.header(clock, exact, uint64(len(live)))
		var s slot
		for i := range live {
			s.set(live[i].h, live[i].exp)
			c.entry(&s, live[i].key, exact)
		}
		return c.finish()
	})
	if err != nil {
		return objRef{}, fmt.Errorf("dedup: writing delta %s: %w", name, err)
	}
	return objRef{name: name, size: info.Size, crc: sum, count: uint64(len(live))}, nil
}

// awaitCompaction waits for the running compaction to finish, or ctx.
func (d *Deduplicator) awaitCompaction(ctx context.Context) {
	select {
	case r := <-d.inc.done:
		d.inc.done <- r // for adoptCompaction
	case <-ctx.Done():
	}
}

// adoptCompaction takes the result of a finished compaction, if any, without
// waiting for a running one.
func (d *Deduplicator) adoptCompaction() {
	inc := &d.inc
	if !inc.running {
		return
	}
	select {
	case r := <-inc.done:
		inc.running = false
		switch {
		case r.err != nil:
			d.opts.Logger.Warn("dedup: compaction failed; the deltas stay and a later checkpoint tries again",
				slog.Any("err", r.err))
		case r.gen == inc.gen:
			inc.base = r.base
			inc.deltas = slices.Clone(inc.deltas[r.merged:])
		default: // the chain was replaced (a restore) meanwhile
			inc.objs.Abandon(r.base.name)
		}
	default:
	}
}

// maybeCompact starts a background compaction of the chain into a new base
// when it holds MaxDeltas deltas or its deltas outweigh half the base. The
// compaction reads the objects, not the table, so the chain goes on
// processing, and no checkpoint waits for it. clock and exact are the
// barrier's: it may run in a pending part, beside the chain.
func (d *Deduplicator) maybeCompact(clock int64, exact bool) {
	inc := &d.inc
	if inc.running || len(inc.deltas) == 0 {
		return
	}
	var deltaBytes int64
	for _, r := range inc.deltas {
		deltaBytes += r.size
	}
	if len(inc.deltas) < d.opts.MaxDeltas && deltaBytes*compactFractionDen <= inc.base.size*compactFractionNum {
		return
	}
	if inc.done == nil {
		inc.done = make(chan compactResult, 1)
		inc.ctx, inc.cancel = context.WithCancel(context.Background())
	}
	job := compactJob{
		objs: inc.objs, base: inc.base, deltas: slices.Clone(inc.deltas),
		clock: clock, exact: exact, gen: inc.gen,
		// Named after the last delta it folds in: the state it holds.
		name: "base-" + inc.deltas[len(inc.deltas)-1].name[len("delta-"):],
	}
	inc.running = true
	inc.wg.Add(1)
	go func() {
		defer inc.wg.Done()
		inc.done <- job.run(inc.ctx)
	}()
}

// stopCompaction cancels a running compaction and waits for it.
func (d *Deduplicator) stopCompaction() {
	if d.inc.cancel != nil {
		d.inc.cancel()
	}
	d.inc.wg.Wait()
	if d.inc.running {
		<-d.inc.done
		d.inc.running = false
	}
}

type compactJob struct {
	objs   *checkpoint.Objects
	base   objRef
	deltas []objRef
	clock  int64
	exact  bool
	gen    uint64
	name   string
}

// run merges base and deltas into a new base object.
func (j compactJob) run(ctx context.Context) compactResult {
	fail := func(err error) compactResult { return compactResult{gen: j.gen, err: err} }
	inputs, err := readChain(ctx, j.objs, j.base, j.deltas, j.exact, j.clock)
	if err != nil {
		return fail(err)
	}
	nowSec := uint32(j.clock / int64(time.Second))
	var n uint64
	if err := mergeEntries(inputs, nowSec, func(*slot, []byte) error { n++; return nil }); err != nil {
		return fail(err)
	}
	var sum uint32
	info, err := j.objs.Write(ctx, j.name, func(w io.Writer) error {
		c := &chunkWriter{w: w, buf: make([]byte, 0, writeChunk), ctx: ctx}
		defer func() { sum = c.crc }()
		c.header(j.clock, j.exact, n)
		err := mergeEntries(inputs, nowSec, func(s *slot, key []byte) error {
			c.entry(s, key, j.exact)
			return c.err
		})
		if err != nil {
			return err
		}
		return c.finish()
	})
	if err != nil {
		j.objs.Abandon(j.name)
		return fail(fmt.Errorf("dedup: compaction into %s: %w", j.name, err))
	}
	return compactResult{gen: j.gen, base: objRef{name: j.name, size: info.Size, crc: sum, count: n}, merged: len(j.deltas)}
}

// manifest is a decoded version 2 snapshot.
type manifest struct {
	clock  int64
	exact  bool
	base   objRef
	deltas []objRef
}

func encodeManifest(clock int64, exact bool, base objRef, deltas []objRef) []byte {
	b := make([]byte, 0, manifestHeaderSize+(1+len(deltas))*48+4)
	b = append(b, snapshotMagic...)
	b = binary.LittleEndian.AppendUint16(b, manifestVersion)
	var flags uint16
	if exact {
		flags |= flagExactKeys
	}
	b = binary.LittleEndian.AppendUint16(b, flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(clock))
	b = binary.LittleEndian.AppendUint32(b, uint32(1+len(deltas)))
	for _, r := range append([]objRef{base}, deltas...) {
		b = binary.AppendUvarint(b, uint64(len(r.name)))
		b = append(b, r.name...)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.size))
		b = binary.LittleEndian.AppendUint32(b, r.crc)
		b = binary.LittleEndian.AppendUint64(b, r.count)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeManifest validates a version 2 snapshot completely.
func decodeManifest(b []byte) (manifest, error) {
	var m manifest
	if len(b) < manifestHeaderSize+trailerSize {
		return m, corrupt("manifest of %d bytes is too short", len(b))
	}
	if string(b[:8]) != snapshotMagic {
		return m, corrupt("bad magic %q", b[:8])
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != manifestVersion {
		return m, fmt.Errorf("%w: version %d, want %d", ErrUnsupportedVersion, v, manifestVersion)
	}
	body := b[:len(b)-trailerSize]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(body):]); got != want {
		return m, corrupt("manifest checksum %08x, want %08x (truncated or damaged)", got, want)
	}
	flags := binary.LittleEndian.Uint16(b[10:])
	if flags&^flagExactKeys != 0 {
		return m, corrupt("unknown flags %#x", flags)
	}
	m.exact = flags&flagExactKeys != 0
	m.clock = int64(binary.LittleEndian.Uint64(b[12:]))
	if m.clock < 0 || m.clock > maxClockNanos {
		return m, corrupt("clock %d out of range", m.clock)
	}
	n := binary.LittleEndian.Uint32(b[20:])
	rest := body[manifestHeaderSize:]
	if n == 0 || uint64(n) > uint64(len(rest))/21 {
		return m, corrupt("%d objects in %d bytes", n, len(rest))
	}
	seen := map[string]bool{}
	for i := range n {
		l, w := binary.Uvarint(rest)
		if w <= 0 || l == 0 || l > maxObjectName || l+20 > uint64(len(rest)-w) {
			return m, corrupt("object %d: bad name length", i)
		}
		r := objRef{name: string(rest[w : w+int(l)])}
		rest = rest[w+int(l):]
		if !checkpoint.ValidName(r.name) || bytes.IndexByte([]byte(r.name), '/') >= 0 || seen[r.name] {
			return m, corrupt("object %d: bad name %q", i, r.name)
		}
		seen[r.name] = true
		size := binary.LittleEndian.Uint64(rest)
		r.crc = binary.LittleEndian.Uint32(rest[8:])
		r.count = binary.LittleEndian.Uint64(rest[12:])
		rest = rest[20:]
		if size < minSnapshotLength || size > 1<<50 || r.count > (size-minSnapshotLength)/entrySize {
			return m, corrupt("object %q: %d entries in %d bytes", r.name, r.count, size)
		}
		r.size = int64(size)
		if i == 0 {
			m.base = r
		} else {
			m.deltas = append(m.deltas, r)
		}
	}
	if len(rest) != 0 {
		return m, corrupt("%d bytes after the last object", len(rest))
	}
	return m, nil
}

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
