package dedup

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

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
	es = sortLog(es)
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
