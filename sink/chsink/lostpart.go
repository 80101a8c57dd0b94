package chsink

// The public errors of the lost-part check and repair, which the
// internal repair package reports in its own terms (see lostPart).

import (
	"errors"
	"fmt"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/repair"
)

// ErrLostPart is wrapped by a *LostPartError.
var ErrLostPart = errors.New("chsink: ClickHouse deduplicated a block against a part it no longer has")

// LostPartError reports a re-inserted batch that ClickHouse dropped as a
// duplicate of a part that is not in the table: the server lost the part
// but kept its token (a plain MergeTree killed between writing its
// deduplication log and renaming the part in; see Lost parts in the
// package doc). The sink repairs its own table and the target of a view
// that selects from its table; this error means a table could not be
// repaired: a view's target is fed through another view (a cascade, which
// New refuses unless replicated), or the view's query could not be run
// over the batch alone; or the table, or a target, was changed since New
// into a shape whose merged part cannot be checked, or a view into a plain
// MergeTree target was added since New without Options.DistinctViewRows
// and the target holds rows like the batch's, perhaps another insert's
// (ErrUnprovenTarget) (Err says why). ViewTarget, and the message, say
// whether the rows were lost in the sink's table itself or in a view's
// target. It is permanent: the batch's intent stays in the journal, and the
// sink fails at the same batch until an operator restores that table's
// rows of the batch (Intent.First..Intent.Last of the source).
type LostPartError struct {
	Intent sink.Intent
	Table  string // database.table whose part is gone
	// ViewTarget says Table is the target of a materialized view over the
	// sink's table; false, Table is the sink's table itself.
	ViewTarget bool
	Part       string // the part its deduplication log names
	Err        error  // why the rows could not be checked or derived again
}

func (e *LostPartError) Error() string {
	table, rows := "the sink's table "+e.Table, "the table's rows of this batch cannot be put back"
	if e.ViewTarget {
		table, rows = e.Table+", the target of a materialized view over the sink's table,", "the view's rows of this batch cannot be derived again"
	}
	held := "which it does not hold"
	if errors.Is(e.Err, ErrUnprovenTarget) {
		// Nothing proves the part lost: its rows cannot be told apart.
		held, rows = "which it may no longer hold", "whether it holds the batch cannot be checked"
	}
	return fmt.Sprintf("chsink: batch %s..%s (token %s): %s deduplicated it against part %s, %s, and %s: %v",
		e.Intent.First, e.Intent.Last, e.Intent.Token, table, e.Part, held, rows, e.Err)
}

func (e *LostPartError) Unwrap() []error { return []error{ErrLostPart, e.Err} }

// ErrUnprovenTarget is matched by *TableCheckError when the table, or the
// target of a materialized view fed by it, is of a shape in which the sink
// could not tell exactly whether a replayed batch's rows are there after
// the server lost the batch's part but kept its token (a plain
// MergeTree-family table, killed between writing a block's deduplication
// log and renaming its part in): a folding engine (Summing, Aggregating,
// Collapsing, VersionedCollapsing, Coalescing, Graphite), a plain
// MergeTree that does not store each row's block number, or a cascade of
// views through a table that is not replicated. The error's Reason says
// what to use instead. So is a view target that is a plain MergeTree,
// unless Options.DistinctViewRows: after a restart another insert's same
// rows would pass for the batch's.
var ErrUnprovenTarget = repair.ErrUnproven

// lostPart returns err with the repair's *repair.Lost, if err holds one,
// as the public *LostPartError: the same fields, a message that says
// which table lost what.
func lostPart(err error) error {
	if lost, ok := errors.AsType[*repair.Lost](err); ok {
		e := LostPartError(*lost)
		return &e
	}
	return err
}
