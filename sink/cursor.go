package sink

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Cursor hands out source positions for rows that no single record maps to
// one for one: the rows a window operator emits. Rows caused by the record
// at offset O get (O, 0), (O, 1), ...; rows emitted afterwards without a new
// record (by a Tick that closes idle windows) continue after the last
// record's: (O, k), (O, k+1), ... so positions keep growing.
//
// A Cursor is a checkpoint.Participant: register it in the chain beside the
// sinks it feeds, so positions continue from where the checkpoint left them
// after a restore and never repeat one a sink has journaled. Like every
// participant it is used from the chain goroutine only.
//
//	cur := new(sink.Cursor)
//	err := c.Add("cursor", cur) // c is the partition's checkpoint.Chain
//	// Process(m): cur.At(m.Offset); ... rows.Add(ctx, cur.Next(), row)
//	// Tick:       ... rows.Add(ctx, cur.Next(), row)
//
// The zero value starts at (0, 0).
type Cursor struct {
	offset int64
	index  uint32
}

var _ checkpoint.Participant = (*Cursor)(nil)

// At moves the cursor to the record at offset: the next position is
// (offset, 0).
func (c *Cursor) At(offset int64) { c.offset, c.index = offset, 0 }

// Next returns the next position and advances past it.
func (c *Cursor) Next() Position {
	p := Position{Offset: c.offset, Index: c.index}
	c.index++
	return p
}

// Peek returns the position Next would return, without advancing.
func (c *Cursor) Peek() Position { return Position{Offset: c.offset, Index: c.index} }

// cursorVersion is the first byte of a Cursor's state; the layout is
// version, offset (8 bytes, big endian), index (4 bytes, big endian).
const cursorVersion = 1

// Snapshot encodes the next position.
func (c *Cursor) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	b := []byte{cursorVersion}
	b = binary.BigEndian.AppendUint64(b, uint64(c.offset))
	return binary.BigEndian.AppendUint32(b, c.index), nil
}

// Restore sets the next position from a Snapshot. A state of another
// version is refused with ErrUnsupportedVersion, one of the wrong length
// with ErrCorrupt; either way the cursor is unchanged.
func (c *Cursor) Restore(_ context.Context, b []byte) error {
	if len(b) > 0 && b[0] != cursorVersion {
		return fmt.Errorf("%w: cursor state version %d, this build reads %d", ErrUnsupportedVersion, b[0], cursorVersion)
	}
	if len(b) != 13 {
		return fmt.Errorf("%w: cursor state of %d bytes (version %v), want 13", ErrCorrupt, len(b), firstByte(b))
	}
	c.offset = int64(binary.BigEndian.Uint64(b[1:]))
	c.index = binary.BigEndian.Uint32(b[9:])
	return nil
}

// CheckpointCompleted does nothing: the cursor keeps no resources.
func (c *Cursor) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

func firstByte(b []byte) any {
	if len(b) == 0 {
		return "none"
	}
	return b[0]
}
