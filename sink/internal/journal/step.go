package journal

import (
	"strconv"

	"github.com/exactlyonce/exactlyonce/sink"
)

// Step is what a sink does with its next row while journaled batches remain
// to be replayed (see NextStep).
type Step uint8

const (
	// StepBatch: no journaled batch covers the row; it joins the normal
	// batch being filled.
	StepBatch Step = iota
	// StepAppend: the row belongs to the head batch; append it to that
	// batch's replay.
	StepAppend
	// StepAppendFinish: as StepAppend, and the row is the batch's last:
	// resolve the batch after appending.
	StepAppendFinish
	// StepFlush: the row reaches the head batch while the buffer holds rows
	// before it; those are a batch of their own, never part of the head
	// batch's (its token would cover them). Flush them, then decide again.
	StepFlush
	// StepFinish: the row is past the head batch; resolve the batch with
	// the rows replayed into it (maybe none), then decide again.
	StepFinish
	// StepMismatch: the row precedes the head batch after a restore, and
	// the policy refuses rows outside journaled batches.
	StepMismatch
)

var stepNames = [...]string{"batch", "append", "append+finish", "flush", "finish", "mismatch"}

func (s Step) String() string {
	if int(s) < len(stepNames) {
		return stepNames[s]
	}
	return "step(" + strconv.Itoa(int(s)) + ")"
}

// NextStep decides what to do with the row at pos, given head, the first
// journaled batch still to replay (nil when none is left); replaying,
// whether the buffer holds rows of head; buffered, the rows in the buffer;
// and failDetached, whether a row before head is an error (a restored sink
// that refuses mismatches: replay must resume exactly at a batch boundary).
//
// It is a pure function of journaled intents and positions, so every case
// is tested without a server. The sink calls it until it returns a step
// that consumes the row: StepFlush and StepFinish change the state (the
// buffer is emptied, or head is dropped) and ask again. Rows of head are
// only ever appended to an empty buffer or one holding head's rows, so a
// batch's token never covers a row outside it.
func NextStep(head *sink.Intent, replaying bool, buffered int, pos sink.Position, failDetached bool) Step {
	switch {
	case head == nil:
		return StepBatch
	case replaying && pos.Compare(head.Last) > 0:
		return StepFinish
	case replaying:
		return appendStep(head, pos)
	case pos.Compare(head.First) < 0 && failDetached:
		return StepMismatch
	case pos.Compare(head.First) < 0:
		return StepBatch
	case buffered > 0:
		return StepFlush
	case pos.Compare(head.Last) > 0:
		return StepFinish
	}
	return appendStep(head, pos)
}

// appendStep is the step for a row inside head: the batch is resolved after
// its last row.
func appendStep(head *sink.Intent, pos sink.Position) Step {
	if pos == head.Last {
		return StepAppendFinish
	}
	return StepAppend
}
