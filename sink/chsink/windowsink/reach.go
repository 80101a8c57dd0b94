// What the table may hold beyond what the operator emitted: the rows of a
// run that died before its next checkpoint.

package windowsink

import "context"

// track tells the operator, before it handles the record at offset (or a
// Tick or EndInput after it), whether the table may hold rows of its
// sessions that it did not emit: rows that a run which died before its
// next checkpoint wrote at positions the journal reaches (see
// chsink.Sink.JournalReach). That run held, after each record, the
// sessions the replay holds after it (they depend on the input only), and
// may have shown any of them at the record's positions by a Tick: so
// while offset is at or before the reach's, the operator counts every
// session it holds as written (window.Operator.AssumeWritten), and a merge
// retracts it. Past the reach no row of the dead run lies ahead, and the
// operator's own emissions say what the table holds.
//
// The rows stay deterministic, as chsink's replay needs: whether a session
// counts as written depends only on the restored state, the input and the
// journal, never on the clock, so a replay of the same checkpoint over the
// same journal emits the same rows at the same positions (the Cursor), and
// chsink re-cuts them into the journaled batches under the same tokens
// (derived from the source and the positions), which ClickHouse
// deduplicates. Where they differ from what the dead run wrote (its Tick
// rows; the deletions this adds), chsink inserts them under a token
// derived from the content (sink.ReinsertToken), so the same content is
// deduplicated on every later replay. Without a crash the journal holds
// nothing past the checkpoint and nothing is assumed: the rows are the
// operator's own.
func (s *Sink[In, Acc, Out]) track(ctx context.Context, offset int64) error {
	if !s.known {
		if err := s.readReach(ctx); err != nil {
			return err
		}
	}
	if s.assuming && offset > s.reach {
		s.assuming = false
		s.op.AssumeWritten(false)
	}
	return nil
}

// readReach reads the journal's reach (claiming the journal on a fresh
// start) and turns AssumeWritten on when it lies past the restored state.
func (s *Sink[In, Acc, Out]) readReach(ctx context.Context) error {
	p, ok, err := s.rows.JournalReach(ctx)
	if err != nil {
		return err
	}
	s.known, s.assuming, s.reach = true, ok, p.Offset
	s.op.AssumeWritten(ok)
	return nil
}
