package chsink

import (
	"fmt"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/cespare/xxhash/v2"
)

// colSet is one set of column buffers built by the Schema. A sink has two,
// so that rows fill one while the other is inserted.
//
// A batch is encoded once: seal prepares every column and encodes it, state
// prefix included, into wire, exactly as ch-go's block encoder would, hashes
// those bytes for the journal and keeps them; the insert then sends wire's
// columns (encoded), which ch-go copies to the connection without encoding
// anything again. The encoded bytes belong to the set: they stay valid until
// its reset, and whoever owns the set (the goroutine of the batch in flight,
// or the sink's with the set as its buffer) owns them.
type colSet[T any] struct {
	cols  []Column[T]
	input proto.Input // the typed columns, as the Schema built them

	wire    proto.Buffer // every column's encoding, one after the other, since the last seal
	encoded []encoded    // one per column, slices of wire
	sealed  proto.Input  // names and encoded columns, what an insert sends
}

func newColSet[T any](schema Schema[T]) (*colSet[T], error) {
	cols := schema()
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: schema has no columns", ErrInvalidOptions)
	}
	set := &colSet[T]{cols: cols, encoded: make([]encoded, len(cols))}
	for i, c := range cols {
		if c.name == "" || c.data == nil || c.add == nil {
			return nil, fmt.Errorf("%w: column %d is not built by a chsink column constructor", ErrInvalidOptions, i)
		}
		set.input = append(set.input, proto.InputColumn{Name: c.name, Data: c.data})
		set.sealed = append(set.sealed, proto.InputColumn{Name: c.name, Data: &set.encoded[i]})
	}
	return set, nil
}

// seal encodes the buffered rows as they go on the wire, keeps the bytes
// for the insert (see sealed) and returns their hash and size. The hash
// covers each column's name and encoding, state prefix included; replays
// compare it with the journaled one, so it must not change between
// versions (TestSealHashIsStable pins it).
//
// The steps mirror proto.Block.EncodeRawBlock, which ch-go runs for every
// input column: Type and Rows first, then Prepare, then, unless the column
// has no rows, EncodeState and EncodeColumn. An encoded column sends those
// bytes with no preparation or state of its own, so the server receives
// what it would have received from the typed column.
func (set *colSet[T]) seal() (uint64, int, error) {
	set.wire.Reset()
	ends := 0
	for i, c := range set.input {
		e := &set.encoded[i]
		e.typ, e.rows = c.Data.Type(), c.Data.Rows()
		if p, ok := c.Data.(proto.Preparable); ok {
			if err := p.Prepare(); err != nil {
				return 0, 0, fmt.Errorf("chsink: prepare column %s: %w", c.Name, err)
			}
		}
		start := len(set.wire.Buf)
		if c.Data.Rows() != 0 {
			if st, ok := c.Data.(proto.StateEncoder); ok {
				st.EncodeState(&set.wire)
			}
			c.Data.EncodeColumn(&set.wire)
		}
		e.start, e.end = start, len(set.wire.Buf)
		ends = e.end
	}
	d := xxhash.New()
	for i, c := range set.input {
		e := &set.encoded[i]
		e.data = set.wire.Buf[e.start:e.end:e.end] // wire no longer grows
		_, _ = d.WriteString(c.Name)
		_, _ = d.Write(e.data)
	}
	return d.Sum64(), ends, nil
}

// reset empties the set for the next batch, keeping every buffer's
// capacity.
func (set *colSet[T]) reset() {
	set.input.Reset()
	set.wire.Reset()
	for i := range set.encoded {
		set.encoded[i] = encoded{}
	}
}

// encoded is a column already encoded by seal: a proto.ColInput that writes
// its bytes as they are. It implements neither proto.Preparable nor
// proto.StateEncoder: its bytes hold the state prefix already.
type encoded struct {
	typ        proto.ColumnType
	rows       int
	data       []byte
	start, end int
}

var _ proto.ColInput = (*encoded)(nil)

func (e *encoded) Type() proto.ColumnType { return e.typ }
func (e *encoded) Rows() int              { return e.rows }

// EncodeColumn appends the bytes (ch-go's path with compression on).
func (e *encoded) EncodeColumn(b *proto.Buffer) { b.Buf = append(b.Buf, e.data...) }

// WriteColumn chains the bytes to the connection without copying them
// (ch-go's path with compression off); the Writer keeps them only until its
// Flush, within the insert.
func (e *encoded) WriteColumn(w *proto.Writer) {
	if len(e.data) > 0 {
		w.ChainWrite(e.data)
	}
}
