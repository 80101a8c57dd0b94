package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/window"
)

// errJournalFenced mirrors the chsink journal's fencing: a newer owner
// claimed the partition (Storage.Create of its owner record).
var errJournalFenced = errors.New("chsink model: journal claimed by a newer owner")

// intent is a journaled batch: its source positions, its token and the
// server's boot id when it was journaled (chsink's boot.go).
type intent struct {
	first, last int64
	token       string
	boot        int
}

// journal models chsink's journal in the checkpoint Storage: it survives
// every crash, is shared by all owners of the partition, and is fenced by
// owner generation.
type journal struct {
	owner   int64
	intents map[int64]intent // by first offset
}

// chSink is a stand-in for chsink.Sink, which needs a ClickHouse server:
// the journal of batch intents (so a replay cuts batches where the first
// run did and reuses their tokens), the decline of a barrier in the middle
// of a journaled batch (checkpoint.ErrDeclined), the asynchronous insert of
// the batch sealed at the barrier, and the lost-part check of
// sink/chsink/internal/repair (Repairer.Settle) as it is today: a deduplicated
// re-insert's part counts as lost when no active part has its name, as the
// batch's own when the server did not restart since the batch was
// journaled, and otherwise by comparing content. Keep it in step with
// repair.Settle.
type chSink struct {
	w     *world
	gen   int64
	batch int

	buf     []chRow
	offsets []int64
	// sealed says a barrier's batch waits in the pending part for its
	// insert: later batches wait behind it (chsink inserts batches in
	// order, each after the one before it settled).
	sealed bool
	err    error
}

var _ checkpoint.AsyncParticipant = (*chSink)(nil)

type chState struct {
	Gen int64 `json:"gen"`
}

func (s *chSink) claim() error {
	j := s.w.journal
	if j.owner > s.gen {
		return errJournalFenced
	}
	j.owner = s.gen
	return nil
}

// Add buffers the row of the record at offset and inserts the batches
// that are due: full ones, and journaled ones whose last row came.
func (s *chSink) Add(offset int64, r chRow) error {
	if s.err != nil {
		return s.err
	}
	s.buf = append(s.buf, r)
	s.offsets = append(s.offsets, offset)
	return s.flushDue(false)
}

// batch is a cut batch: its intent and rows.
type batch struct {
	in   intent
	rows []chRow
}

// cut cuts the batches due from the buffer, in order: a journaled batch
// exactly where the journal has it, once its last row is buffered (a
// replay cuts where the first run did, so each batch keeps its token); an
// unjournaled one when the buffer holds a full batch or all is set (a
// barrier, the flush timer), ending before the next journaled batch. It
// reports whether the buffer ends inside a journaled batch.
func (s *chSink) cut(all bool) (bs []batch, inside bool, err error) {
	for len(s.buf) > 0 {
		first := s.offsets[0]
		in, ok := s.w.journal.intents[first]
		n := 0
		switch {
		case ok:
			n = sort.Search(len(s.offsets), func(i int) bool { return s.offsets[i] > in.last })
			if s.offsets[n-1] < in.last {
				return bs, true, nil // its last row is still to come
			}
		default:
			if !all && len(s.buf) < s.batch {
				return bs, false, nil
			}
			n = len(s.buf)
			if !all {
				n = s.batch
			}
			for off := range s.w.journal.intents {
				if off > first && off <= s.offsets[n-1] {
					n = min(n, sort.Search(len(s.offsets), func(i int) bool { return s.offsets[i] >= off }))
				}
			}
			if err := s.claim(); err != nil {
				return bs, false, err
			}
			in = intent{first: first, last: s.offsets[n-1], token: fmt.Sprintf("p0:%d-%d", first, s.offsets[n-1]), boot: s.w.ch.boot}
			s.w.journal.intents[first] = in
		}
		bs = append(bs, batch{in: in, rows: slices.Clone(s.buf[:n])})
		s.buf, s.offsets = slices.Clone(s.buf[n:]), slices.Clone(s.offsets[n:])
	}
	return bs, false, nil
}

// flushDue inserts the batches due now (all: the flush timer). Batches wait
// while a barrier's batch waits for its insert in the pending part.
func (s *chSink) flushDue(all bool) error {
	if s.err != nil {
		return s.err
	}
	if s.sealed {
		return nil
	}
	bs, _, err := s.cut(all)
	for _, b := range bs {
		if err != nil {
			break
		}
		err = s.insert(b.in, b.rows)
	}
	if err != nil {
		s.err = err
	}
	return err
}

// flush is the flush timer.
func (s *chSink) flush() error { return s.flushDue(true) }

func (s *chSink) insert(in intent, rows []chRow) error {
	hits, err := s.w.ch.Insert(in.token, rows, true)
	if err != nil {
		s.w.logf("clickhouse: insert %s: %v; lost %v", in.token, err, s.w.ch.lastLost)
		return fmt.Errorf("chsink model: insert %s: %w", in.token, err)
	}
	if len(hits) > 0 {
		s.settle(in, rows, hits)
	}
	s.w.logf("clickhouse: insert %s (%d rows) hits %v", in.token, len(rows), hits)
	return nil
}

// settle is lostpart.go's settle on the model, as the code is today.
func (s *chSink) settle(in intent, rows []chRow, hits []hit) {
	ch := s.w.ch
	same := in.boot == ch.boot
	for _, h := range hits {
		t := ch.table(h.table)
		p := t.part(h.part)
		lost := p == nil
		if !lost && !same {
			want := rows
			if h.table == "hourly" {
				want = viewRows(rows, ch.distinctViewRows)
			}
			lost = !sameRows(p.rows, want)
		}
		switch {
		case !lost:
		case h.table == "events":
			// putBack: through a staging table kept per batch, moved
			// into the table once, without firing the views.
			if !ch.moved[in.token] {
				ch.moved[in.token] = true
				t.insert("", rows)
				s.w.logf("clickhouse: lost part %s of events: put back %s", h.part, in.token)
			}
		default:
			t.insert(in.token+"/rederive", viewRows(rows, ch.distinctViewRows))
			s.w.logf("clickhouse: lost part %s of hourly: derived %s again", h.part, in.token)
		}
	}
}

func sameRows(a, b []chRow) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, compareRows)
	slices.SortFunc(b, compareRows)
	return slices.Equal(a, b)
}

func (s *chSink) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	p, err := s.SnapshotAsync(ctx, id)
	if err != nil {
		return nil, err
	}
	return p(ctx)
}

func (s *chSink) SnapshotAsync(context.Context, checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.sealed {
		// Not reachable: one checkpoint of a chain is pending at a time.
		return nil, errors.New("chsink model: a barrier's batch is still pending")
	}
	// The barrier's batches are cut from a copy: a declined barrier
	// leaves the buffer as it was.
	buf, offsets := s.buf, s.offsets
	bs, inside, err := s.cut(true)
	if err != nil {
		s.err = err
		return nil, err
	}
	if inside {
		s.buf, s.offsets = buf, offsets
		return nil, fmt.Errorf("chsink model: in the middle of a journaled batch: %w", checkpoint.ErrDeclined)
	}
	st, _ := json.Marshal(chState{Gen: s.gen})
	s.sealed = len(bs) > 0
	return func(ctx context.Context) ([]byte, error) {
		defer func() { s.sealed = false }()
		if ctx.Err() != nil {
			// The intents stay journaled: the replay inserts them.
			s.err = ctx.Err()
			return nil, ctx.Err()
		}
		for _, b := range bs {
			if err := s.insert(b.in, b.rows); err != nil {
				s.err = err
				return nil, err
			}
		}
		return st, nil
	}, nil
}

// CheckpointCompleted would prune the journal; the model keeps it whole.
func (s *chSink) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

func (s *chSink) Restore(_ context.Context, data []byte) error {
	var st chState
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	return s.claim()
}

// winSink is a stand-in for windowsink.Sink, which needs a ClickHouse
// server: it writes the rows of a real window.Operator (a participant of
// its own in the chain) into its window table when its flush timer fires
// and at every barrier (Snapshot flushes, synchronously). A row the table
// deduplicated or reinserted is the same for FINAL, so tokens are not
// modelled; rows flushed before a crash stay in the table, as in
// ClickHouse. The journal's reach (the last position a row was written
// at, by any run) is kept in the world, as chsink keeps its journal in the
// checkpoint Storage.
//
// track is the fix of breach 2 (branch winretract, windowsink's reach.go):
// while the input replays positions a dead run may have written rows at,
// the operator counts every session it holds as written
// (window.Operator.AssumeWritten), so a merge retracts it. It calls
// AssumeWritten only on an operator that has it: today's has not, and
// track does nothing.
type winSink struct {
	w     *world
	table string
	op    any // the window.Operator
	buf   []sessionRow
	offs  []int64 // the position of each buffered row

	known, assuming bool
	reach           int64
	epoch           int // the journal's owner epoch this sink claimed, 0 before
}

// errWinFenced mirrors sink.ErrFenced from windowsink's journal (a chsink
// journal per window table): a later owner of the partition claimed it.
var errWinFenced = errors.New("windowsink model: journal claimed by a later owner")

// claim claims the table's journal once, at the sink's first position, as
// windowsink's readReach does (chsink's ensureInit: a Create of the next
// owner epoch). A revoked owner still running inserts nothing after that:
// its next flush fails.
func (s *winSink) claim() {
	if s.epoch == 0 {
		s.w.winEpoch[s.table]++
		s.epoch = s.w.winEpoch[s.table]
	}
}

var _ checkpoint.Participant = (*winSink)(nil)

type assumer interface{ AssumeWritten(on bool) }

// track is windowsink's track: before the operator handles position
// offset, read the reach once (after the restore or fresh start: each
// incarnation has its own winSink), and stop assuming past it.
func (s *winSink) track(offset int64) {
	s.claim()
	a, ok := s.op.(assumer)
	if !ok {
		return
	}
	if !s.known {
		reach, wrote := s.w.winReach[s.table]
		s.known, s.reach = true, reach
		s.assuming = wrote && reach >= offset
		a.AssumeWritten(s.assuming)
	}
	if s.assuming && offset > s.reach {
		s.assuming = false
		a.AssumeWritten(false)
	}
}

// add buffers the rows the operator emitted at position offset.
func (s *winSink) add(offset int64, rows []window.Row[uint64]) {
	for _, r := range rows {
		s.buf = append(s.buf, sessionRow{Key: r.Key, Start: r.Start, End: r.End, Version: r.Version, Count: r.Result, Deleted: r.Deleted})
		s.offs = append(s.offs, offset)
	}
}

func (s *winSink) flush() error {
	if len(s.buf) > 0 {
		if s.w.winEpoch[s.table] != s.epoch {
			return fmt.Errorf("%s: %w", s.table, errWinFenced)
		}
		s.w.ch.InsertWindows(s.table, s.buf)
		for _, o := range s.offs {
			if r, ok := s.w.winReach[s.table]; !ok || o > r {
				s.w.winReach[s.table] = o
			}
		}
		rows := make([]string, len(s.buf))
		for i, r := range s.buf {
			rows[i] = r.String()
		}
		s.w.logf("%s: insert %s", s.table, strings.Join(rows, " "))
		s.buf, s.offs = nil, nil
	}
	return nil
}

func (s *winSink) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	if err := s.flush(); err != nil {
		return nil, err
	}
	return []byte{1}, nil
}

func (s *winSink) Restore(context.Context, []byte) error { return nil }

func (s *winSink) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }
