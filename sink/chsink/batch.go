package chsink

import (
	"context"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/sink"
)

// AddBatch buffers rows[i] at pos[i], in order, exactly as one Add call per
// row would (the same batches, journal and rows in ClickHouse), with one
// lock and one clock reading for all of them. It returns how many rows it
// buffered: all of them, or fewer with the error of the next one, which Add
// would have returned for it (and which, unless sink.ErrOutOfOrder, breaks
// the sink until Restore). pos and rows must have the same length: otherwise
// it buffers nothing and returns an error, and the sink stays usable.
func (s *Sink[T]) AddBatch(ctx context.Context, pos []sink.Position, rows []T) (int, error) {
	if len(pos) != len(rows) {
		return 0, fmt.Errorf("chsink: AddBatch: %d positions for %d rows", len(pos), len(rows))
	}
	if len(rows) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return 0, err
	}
	s.lastRow = time.Now()
	for i := range rows {
		if err := s.addLocked(ctx, pos[i], &rows[i]); err != nil {
			return i, err
		}
	}
	return len(rows), nil
}
