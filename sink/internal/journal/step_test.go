package journal_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/internal/journal"
)

func at(offset int64) sink.Position { return sink.Position{Offset: offset} }

func TestNextStep(t *testing.T) {
	head := &sink.Intent{First: at(10), Last: at(20)}
	tests := []struct {
		name         string
		head         *sink.Intent
		replaying    bool
		buffered     int
		pos          sink.Position
		failDetached bool
		want         journal.Step
	}{
		{name: "nothing journaled", pos: at(5), want: journal.StepBatch},
		{name: "nothing journaled, rows buffered", buffered: 3, pos: at(5), want: journal.StepBatch},
		{name: "before the batch", head: head, pos: at(9), want: journal.StepBatch},
		{name: "before the batch, rows buffered", head: head, buffered: 2, pos: at(9), want: journal.StepBatch},
		{name: "before the batch after a strict restore", head: head, pos: at(9), failDetached: true, want: journal.StepMismatch},
		{name: "at its first row", head: head, pos: at(10), want: journal.StepAppend},
		{name: "inside it", head: head, pos: at(15), want: journal.StepAppend},
		{name: "a one-row batch", head: &sink.Intent{First: at(10), Last: at(10)}, pos: at(10), want: journal.StepAppendFinish},
		{name: "reaching it with rows buffered", head: head, buffered: 4, pos: at(10), want: journal.StepFlush},
		{name: "past it with rows buffered", head: head, buffered: 4, pos: at(30), want: journal.StepFlush},
		{name: "past it, nothing replayed into it", head: head, pos: at(30), want: journal.StepFinish},
		{name: "past it, strict restore", head: head, pos: at(30), failDetached: true, want: journal.StepFinish},
		{name: "replaying, inside", head: head, replaying: true, buffered: 1, pos: at(11), want: journal.StepAppend},
		{name: "replaying, its last row", head: head, replaying: true, buffered: 1, pos: at(20), want: journal.StepAppendFinish},
		{name: "replaying, its last row's next index", head: head, replaying: true, buffered: 1,
			pos: sink.Position{Offset: 20, Index: 1}, want: journal.StepFinish},
		{name: "replaying, past it", head: head, replaying: true, buffered: 1, pos: at(21), want: journal.StepFinish},
		{name: "replaying ignores the strict policy", head: head, replaying: true, buffered: 1, pos: at(12), failDetached: true, want: journal.StepAppend},
	}
	for _, tt := range tests {
		got := journal.NextStep(tt.head, tt.replaying, tt.buffered, tt.pos, tt.failDetached)
		assert.Equal(t, tt.want.String(), got.String(), tt.name)
	}
}

// replayModel drives journal.NextStep the way chsink's Sink.add does, over a model of
// the sink's buffer and pending batches, and records where each row went.
type replayModel struct {
	pending   []sink.Intent
	replaying bool
	buf       []sink.Position
	normal    [][]sink.Position // sealed normal batches
	replayed  map[int][]sink.Position
	resolved  []int // pending batches resolved, in order, by index
	head      int   // index of pending[0] in the original list
}

func (m *replayModel) seal() {
	if len(m.buf) > 0 {
		m.normal = append(m.normal, m.buf)
	}
	m.buf = nil
}

func (m *replayModel) finish() {
	m.replayed[m.head] = m.buf
	m.resolved = append(m.resolved, m.head)
	m.buf, m.replaying = nil, false
	m.pending = m.pending[1:]
	m.head++
}

// add returns an error for a broken promise of journal.NextStep, and
// errMismatch for a row refused as detached.
func (m *replayModel) add(pos sink.Position, failDetached bool) error {
	// At most one flush and one finish per pending batch before the row is
	// consumed.
	bound := 2 + len(m.pending)
	for steps := 0; ; steps++ {
		if steps > bound {
			return fmt.Errorf("row %s: no decision after %d steps", pos, steps)
		}
		if len(m.pending) == 0 {
			break
		}
		p := &m.pending[0]
		step := journal.NextStep(p, m.replaying, len(m.buf), pos, failDetached)
		switch step {
		case journal.StepMismatch:
			if !failDetached {
				return fmt.Errorf("row %s: mismatch without the strict policy", pos)
			}
			return errMismatch
		case journal.StepFlush:
			if m.replaying || len(m.buf) == 0 {
				return fmt.Errorf("row %s: flush while replaying=%v with %d rows", pos, m.replaying, len(m.buf))
			}
			m.seal()
			continue
		case journal.StepFinish:
			if !m.replaying && len(m.buf) > 0 {
				return fmt.Errorf("row %s: finishing %s..%s would put %d normal rows under its token", pos, p.First, p.Last, len(m.buf))
			}
			m.finish()
			continue
		case journal.StepAppend, journal.StepAppendFinish:
			if !m.replaying && len(m.buf) > 0 {
				return fmt.Errorf("row %s: replay of %s..%s starts with %d normal rows buffered", pos, p.First, p.Last, len(m.buf))
			}
			m.replaying = true
			m.buf = append(m.buf, pos)
			if (step == journal.StepAppendFinish) != (pos == p.Last) {
				return fmt.Errorf("row %s: %s for a batch ending %s", pos, step, p.Last)
			}
			if step == journal.StepAppendFinish {
				m.finish()
			}
			return nil
		}
		break
	}
	if m.replaying {
		return fmt.Errorf("row %s: normal row while replaying", pos)
	}
	m.buf = append(m.buf, pos)
	return nil
}

var errMismatch = fmt.Errorf("mismatch")

func inside(p sink.Position, in sink.Intent) bool {
	return p.Compare(in.First) >= 0 && p.Compare(in.Last) <= 0
}

// FuzzNextStep feeds a journal of disjoint batches and increasing rows
// through journal.NextStep and checks where every row ends up: a row inside a
// journaled batch is replayed into exactly that batch, a row outside every
// batch goes to a normal batch, normal rows never share a token with a
// journaled batch, and the batches are resolved in journal order.
func FuzzNextStep(f *testing.F) {
	f.Add([]byte{10, 5, 3, 2, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1}, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8}, false)
	f.Add([]byte{0, 0, 1, 0}, []byte{0, 0, 0, 1, 1}, true)
	f.Add([]byte{3, 2}, []byte{1, 1, 1, 1, 9}, true)
	f.Add([]byte{2, 3}, []byte{2, 2, 2, 2}, false)
	f.Fuzz(func(t *testing.T, journal, rows []byte, failDetached bool) {
		// journal: pairs (gap, length) of disjoint batches over offsets,
		// each position being (offset, 0) or (offset, 1).
		var pending []sink.Intent
		next := int64(0)
		for i := 0; i+1 < len(journal) && len(pending) < 16; i += 2 {
			first := next + int64(journal[i]%8)
			last := first + int64(journal[i+1]%8)
			pending = append(pending, sink.Intent{First: at(first), Last: sink.Position{Offset: last, Index: uint32(journal[i+1] / 128)}})
			next = last + 1
		}
		m := &replayModel{pending: slices.Clone(pending), replayed: map[int][]sink.Position{}}
		var fed []sink.Position
		pos := sink.Position{Offset: -1}
		for _, r := range rows {
			// Strictly increasing positions: a step of offsets, or the
			// next index of the same offset.
			if r%4 == 0 {
				pos.Index++
			} else {
				pos = at(pos.Offset + int64(r%4))
			}
			err := m.add(pos, failDetached)
			if err == errMismatch {
				break
			}
			require.NoError(t, err)
			fed = append(fed, pos)
		}
		if !m.replaying {
			m.seal()
		}
		// Every row went to exactly one place, in order.
		var got []sink.Position
		for _, b := range m.normal {
			got = append(got, b...)
		}
		for _, b := range m.replayed {
			got = append(got, b...)
		}
		got = append(got, m.buf...)
		slices.SortFunc(got, sink.Position.Compare)
		require.Equal(t, fed, got, "every row once")
		for _, b := range m.normal {
			for _, p := range b {
				for i, in := range pending {
					require.False(t, inside(p, in), "normal row %s inside journaled batch %d %s..%s", p, i, in.First, in.Last)
				}
			}
		}
		for i, b := range m.replayed {
			for _, p := range b {
				require.True(t, inside(p, pending[i]), "row %s replayed into batch %d %s..%s", p, i, pending[i].First, pending[i].Last)
			}
		}
		for i, r := range m.resolved {
			require.Equal(t, i, r, "batches resolved in journal order")
		}
		// A batch is resolved once a row reached its end or went past it.
		if n := len(fed); n > 0 {
			for i, in := range pending {
				if fed[n-1].Compare(in.Last) >= 0 {
					require.Less(t, i, len(m.resolved), "batch %d %s..%s ended before row %s but is unresolved", i, in.First, in.Last, fed[n-1])
				}
			}
		}
	})
}

func TestStepString(t *testing.T) {
	tests := []struct {
		give journal.Step
		want string
	}{
		{journal.StepBatch, "batch"},
		{journal.StepAppendFinish, "append+finish"},
		{journal.StepMismatch, "mismatch"},
		{journal.StepMismatch + 1, "step(6)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.give.String())
	}
}
