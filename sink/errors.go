package sink

import (
	"errors"
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrFenced reports that another instance claimed the partition's journal:
	// this instance lost the partition and must not insert for it again. The
	// batch that was being written was not inserted.
	ErrFenced = errors.New("sink: fenced: another instance owns this partition")

	// ErrOutOfOrder reports a row whose position is not after the previous
	// row's. Nothing was buffered.
	ErrOutOfOrder = errors.New("sink: row position not increasing")

	// ErrNondeterministic is matched by *ContentMismatchError: replayed rows
	// differ from the journaled batch that covers their positions.
	ErrNondeterministic = errors.New("sink: replayed rows differ from the journaled batch")

	// ErrCorrupt reports journal entries that cannot be reconciled
	// (undecodable, or overlapping batches that were both inserted).
	ErrCorrupt = errors.New("sink: journal corrupt")

	// ErrUnsupportedVersion reports a journal entry of a format version this
	// build does not read (a newer program wrote it). Nothing is loaded.
	ErrUnsupportedVersion = errors.New("sink: unsupported journal version")

	// ErrJournalMissing reports that a snapshot expects journal entries that
	// the journal no longer holds: the journal storage is not the one the
	// snapshot was taken against, or was rolled back.
	ErrJournalMissing = errors.New("sink: journal entries expected by the snapshot are missing")

	// ErrStaleCheckpoint reports a restore from a checkpoint older than one
	// whose completion already pruned the journal: batches that the replay
	// would need were deleted.
	ErrStaleCheckpoint = errors.New("sink: checkpoint older than the journal's prune point")

	// ErrPrunedJournal reports a fresh start (no checkpoint restored) over a
	// journal that was already pruned: every checkpoint of the partition was
	// lost, and the batches the source would replay are partly deleted from
	// the journal, so they would be cut and inserted again. A backend
	// refuses it unless told otherwise (chsink.Options.AllowFreshStart).
	ErrPrunedJournal = errors.New("sink: fresh start over a pruned journal")

	// ErrReplayInProgress reports a snapshot whose barrier falls inside a
	// journaled batch that is being replayed: the batch can only be written
	// whole, with its token. It wraps checkpoint.ErrDeclined: the checkpoint
	// is skipped, the chain goes on, and the next barrier, after the batch's
	// last record, succeeds.
	ErrReplayInProgress = fmt.Errorf("sink: barrier inside a journaled batch being replayed: %w", checkpoint.ErrDeclined)

	// ErrOutsideDedupWindow is matched by *OutsideWindowError.
	ErrOutsideDedupWindow = errors.New("sink: journaled batch outside the table's deduplication window")

	// ErrClosed is returned by calls on a closed sink.
	ErrClosed = errors.New("sink: closed")
)

// ContentMismatchError describes a journaled batch whose replayed rows differ
// from what was journaled: processing is not deterministic. Reusing the
// token would silently keep one version and drop the other, so by default the
// sink refuses and returns this error (see MismatchPolicy).
type ContentMismatchError struct {
	Intent   Intent   // the journaled batch
	Rows     int      // rows replayed into its range
	Hash     uint64   // content hash of the replayed rows
	Last     Position // last replayed position in the range
	Detached bool     // replayed rows fell before the batch, outside any journaled batch
}

func (e *ContentMismatchError) Error() string {
	return fmt.Sprintf("sink: %s table %s: journaled batch %s..%s (%d rows, hash %016x) replayed as %d rows ending %s, hash %016x: "+
		"processing is not deterministic (rows that depend on the clock, such as a window's Tick, early firings by interval or idleness, "+
		"differ on replay); for rows that replace themselves by version (window rows in a ReplacingMergeTree) set the sink's "+
		"OnMismatch to MismatchReinsert (windowsink does), else make the rows depend on the input only",
		checkpoint.TopicPartition{Topic: e.Intent.Topic, Partition: e.Intent.Partition}, e.Intent.Table, e.Intent.First, e.Intent.Last,
		e.Intent.Rows, e.Intent.Hash, e.Rows, e.Last, e.Hash)
}

// Is reports whether target is ErrNondeterministic.
func (e *ContentMismatchError) Is(target error) bool { return target == ErrNondeterministic }

// OutsideWindowError reports that a journaled batch whose insert outcome is
// unknown can no longer be deduplicated by ClickHouse: more blocks (or more
// time) went by than the table's deduplication window keeps. Re-inserting it
// could duplicate it; skipping it could lose it.
type OutsideWindowError struct {
	Intent       Intent
	BlocksSince  int64 // blocks inserted into the table since the intent, -1 if unknown
	WindowBlocks int64 // the table's deduplication window in blocks
}

func (e *OutsideWindowError) Error() string {
	return fmt.Sprintf("sink: %s table %s: journaled batch %s..%s (token %s) is outside the deduplication window (%d blocks since, window %d)",
		checkpoint.TopicPartition{Topic: e.Intent.Topic, Partition: e.Intent.Partition}, e.Intent.Table, e.Intent.First, e.Intent.Last,
		e.Intent.Token, e.BlocksSince, e.WindowBlocks)
}

// Is reports whether target is ErrOutsideDedupWindow.
func (e *OutsideWindowError) Is(target error) bool { return target == ErrOutsideDedupWindow }

// ErrPruneDeferred is wrapped by the journal's prune error when pruning could
// not finish (a delete or the prune point's write failed): nothing is lost,
// the entries are kept and the next Prune tries again. It is not fatal.
var ErrPruneDeferred = errors.New("sink: journal pruning deferred")
