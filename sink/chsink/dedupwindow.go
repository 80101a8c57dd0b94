package chsink

// The window guard: a journaled batch is re-inserted only while the
// table's deduplication window still holds its token.

import (
	"context"
	"time"

	"github.com/exactlyonce/exactlyonce/sink"
)

// guardWindow checks that an unacknowledged journaled batch is still inside
// the table's deduplication window; it reports whether to skip the insert.
func (s *Sink[T]) guardWindow(ctx context.Context, p sink.Intent) (bool, error) {
	out := &sink.OutsideWindowError{Intent: p, BlocksSince: -1, WindowBlocks: s.info.windowBlocks}
	outside := false
	if p.Block >= 0 {
		if now, err := s.blockNumber(ctx); err == nil {
			out.BlocksSince = now - p.Block
			outside = out.BlocksSince >= s.info.windowBlocks
		}
	}
	if s.info.windowSeconds > 0 && s.opts.Now().Sub(p.Created) >= time.Duration(s.info.windowSeconds)*time.Second {
		outside = true
	}
	if !outside {
		return false, nil
	}
	switch s.opts.OnOutsideWindow {
	case WindowReinsert:
		s.opts.Logger.Error("chsink: re-inserting a batch outside the deduplication window; it may be duplicated", "err", out)
		return false, nil
	case WindowSkip:
		s.opts.Logger.Error("chsink: skipping a batch outside the deduplication window; it may be lost", "err", out)
		return true, nil
	}
	return false, out
}

// blockProbeInterval bounds how often a flush reads the table's block
// counter (a system.parts scan). A cached reading is a lower bound of the
// counter at the intent, so the window guard can only overestimate the
// blocks since: it may refuse a re-insert that was still inside the window,
// never accept one that was outside.
const blockProbeInterval = 5 * time.Second

// blockLowerBound returns the table's block counter for a new intent: a
// cached reading, or a fresh one once per blockProbeInterval; -1 if none
// could be read yet. A fresh probe needs the connection, which the batch in
// flight holds, so it first waits for that batch (and returns its error):
// once per interval a flush does not overlap the previous insert.
func (s *Sink[T]) blockLowerBound(ctx context.Context) (int64, error) {
	if !s.blockAt.IsZero() && time.Since(s.blockAt) < blockProbeInterval {
		return s.block, nil
	}
	if err := s.wait(); err != nil {
		return -1, err
	}
	if b, err := s.blockNumber(ctx); err == nil {
		s.block, s.blockAt = b, time.Now()
	} else if s.blockAt.IsZero() {
		return -1, nil
	}
	return s.block, nil
}

func (s *Sink[T]) blockNumber(ctx context.Context) (int64, error) {
	if err := s.connect(ctx); err != nil {
		return -1, err
	}
	n, err := blockNumber(ctx, s.conn, s.opts.Database, s.table.Name, s.info.replicated)
	if err != nil {
		s.dropConn()
	}
	return n, err
}
