package chsink

import (
	"context"

	"github.com/exactlyonce/exactlyonce/sink"
)

// JournalReach returns the last position at which ClickHouse may hold a
// row that the sink's restored state does not account for, and false when
// there is none: the end of the last batch journaled past the restored
// checkpoint (on a fresh start, of any journaled batch), superseded
// batches included, as the journal stood when the sink was restored. Such
// rows were written by an owner that died before its next checkpoint;
// the replay re-cuts its rows into those batches, but ClickHouse keeps
// whatever the dead owner inserted there even where the replay's rows
// differ (see MismatchReinsert). A processor whose rows depend on more
// than its input (a window operator's early rows by processing time)
// uses it to tell which of its results the table may hold: those it
// could have emitted at positions through the reach.
//
// On a fresh start it claims the journal, as the first row would.
// It returns the sink's error when the sink is broken.
func (s *Sink[T]) JournalReach(ctx context.Context) (sink.Position, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return sink.Position{}, false, err
	}
	p, ok := s.journal.Reach()
	return p, ok, nil
}
