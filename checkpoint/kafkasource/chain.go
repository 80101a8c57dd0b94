package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

type fetched struct {
	m   kafka.Message
	err error
}

// runChain runs partition p's chain for one generation. It returns nil when
// the generation (or Run) ends, and an error when the chain failed.
func (s *Source) runChain(runCtx, gctx context.Context, gen *kafka.Generation, p checkpoint.TopicPartition) (err error) {
	// ctx ends with the ownership: the generation or Run, whichever first.
	ctx, cancel := context.WithCancel(gctx)
	defer cancel()
	stop := context.AfterFunc(runCtx, cancel)
	defer stop()
	ended := func() bool { return ctx.Err() != nil }

	proc, err := s.newProc(ctx, p)
	if err != nil {
		if proc != nil {
			// A half-built chain: close what NewProcessor managed to build.
			if cerr := closeParticipants(proc.Participants); cerr != nil {
				s.log.Warn("kafkasource: closing a half-built chain", "partition", p.String(), "err", cerr)
			}
		}
		if ended() {
			return nil
		}
		return fmt.Errorf("kafkasource: %s: new processor: %w", p, err)
	}
	if proc == nil || proc.Process == nil {
		if proc != nil {
			_ = closeParticipants(proc.Participants)
		}
		return fmt.Errorf("kafkasource: %s: NewProcessor returned no Process", p)
	}
	// Ends the chain's runners before anything is closed; a runner's error
	// is the cause of the chain context consume reads.
	chainCtx, failChain := context.WithCancelCause(ctx)
	var run runners
	defer func() {
		failChain(nil)
		run.wait()
		var cerr error
		if proc.Close != nil {
			cerr = proc.Close()
		}
		cerr = errors.Join(cerr, closeParticipants(proc.Participants))
		if cerr != nil && err == nil && !ended() {
			err = fmt.Errorf("kafkasource: %s: close processor: %w", p, cerr)
		}
	}()
	participants := proc.Participants
	var dl *deadLetters
	if proc.DeadLetter != nil {
		if _, taken := participants[deadLetterParticipant]; taken {
			return fmt.Errorf("kafkasource: %s: participant name %q is reserved for the dead-letter state", p, deadLetterParticipant)
		}
		if dl, err = newDeadLetters(*proc.DeadLetter, s.group.Brokers, p); err != nil {
			return fmt.Errorf("kafkasource: %s: %w", p, err)
		}
		participants = make(map[string]checkpoint.Participant, len(proc.Participants)+1)
		maps.Copy(participants, proc.Participants)
		participants[deadLetterParticipant] = dl
	}
	task, err := s.coord.Attach(ctx, p, participants)
	if err != nil {
		if ended() {
			return nil
		}
		return fmt.Errorf("kafkasource: %s: %w", p, err)
	}
	defer task.Detach()

	meta := checkpoint.Meta{Generation: int64(gen.ID), Member: gen.MemberID}
	commit := func(cctx context.Context, next int64) error {
		if cctx.Err() != nil {
			return errGenerationEnded
		}
		s.commitMu.Lock()
		defer s.commitMu.Unlock()
		return gen.CommitOffsets(map[string]map[int]int64{p.Topic: {p.Partition: next}})
	}

	next, err := s.startOffset(ctx, p, task.Restored())
	if err != nil {
		if ended() {
			return nil
		}
		return err
	}
	run.start(chainCtx, p, proc.Participants, failChain)
	for {
		var oor bool
		next, oor, err = s.consume(chainCtx, p, next, proc, dl, task, meta, commit)
		if err == nil && !ended() {
			var rerr *runnerError
			if errors.As(context.Cause(chainCtx), &rerr) {
				return rerr
			}
		}
		if err != nil || ended() {
			return err
		}
		if !oor {
			return nil
		}
		// The log moved under a running reader: apply the policy again.
		cp := &checkpoint.Checkpoint{NextOffset: next}
		if r := task.Restored(); r != nil {
			cp.ID = r.ID
		}
		if next, err = s.startOffset(ctx, p, cp); err != nil {
			if ended() {
				return nil
			}
			return err
		}
	}
}

// consume reads p from next until ctx ends, an error, or the reader reports
// an offset out of range (oor). It returns the next offset to read.
func (s *Source) consume(ctx context.Context, p checkpoint.TopicPartition, next int64, proc *Processor, dl *deadLetters,
	task *checkpoint.Task, meta checkpoint.Meta, commit func(context.Context, int64) error) (int64, bool, error) {
	r, err := s.newFetcher(p, next)
	if err != nil {
		return next, false, err
	}
	fctx, fcancel := context.WithCancel(ctx)
	recs := make(chan fetched, s.opts.Buffer)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			m, err := r.FetchMessage(fctx)
			select {
			case recs <- fetched{m: m, err: err}:
			case <-fctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	})
	defer func() {
		fcancel()
		_ = r.Close()
		wg.Wait()
	}()

	var tick <-chan time.Time
	if proc.Tick != nil {
		interval := proc.TickInterval
		if interval <= 0 {
			interval = DefaultTickInterval
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		// select picks at random among ready cases: without this check a
		// record or barrier could still be handled after ownership ended.
		if ctx.Err() != nil {
			return next, false, nil
		}
		select {
		case <-ctx.Done():
			return next, false, nil
		case <-tick:
			if err := proc.Tick(ctx); err != nil {
				if ctx.Err() != nil {
					return next, false, nil
				}
				return next, false, fmt.Errorf("kafkasource: %s: tick: %w", p, err)
			}
		case b := <-task.Barriers():
			if err := task.Checkpoint(ctx, b, next, meta, commit); err != nil {
				if ctx.Err() != nil {
					return next, false, nil // revoked mid-checkpoint: nothing was committed
				}
				if errors.Is(err, checkpoint.ErrDeclined) {
					s.log.Debug("kafkasource: checkpoint declined; the next barrier tries again", "err", err)
					continue
				}
				return next, false, fmt.Errorf("kafkasource: %w", err)
			}
		case f := <-recs:
			if f.err != nil {
				if ctx.Err() != nil {
					return next, false, nil
				}
				if errors.Is(f.err, kafka.OffsetOutOfRange) {
					return next, true, nil
				}
				return next, false, fmt.Errorf("kafkasource: %s: fetch at %d: %w", p, next, f.err)
			}
			if err := proc.Process(ctx, f.m); err != nil {
				if ctx.Err() != nil {
					return next, false, nil
				}
				if err = s.handlePoison(ctx, p, dl, f.m, err); err != nil {
					if ctx.Err() != nil {
						return next, false, nil
					}
					return next, false, err
				}
			}
			next = f.m.Offset + 1
			if dl != nil {
				dl.next = next
			}
			if f.m.HighWaterMark > 0 {
				task.SetLag(max(f.m.HighWaterMark-next, 0))
			}
		}
	}
}

// startOffset returns where the chain reads first: the restored checkpoint's
// offset if it is inside the log, else what the policies say.
func (s *Source) startOffset(ctx context.Context, p checkpoint.TopicPartition, restored *checkpoint.Checkpoint) (int64, error) {
	first, last, err := s.logBounds(ctx, p)
	if err != nil {
		return 0, err
	}
	if restored == nil {
		if s.opts.StartOffset == StartLatest {
			return last, nil
		}
		return first, nil
	}
	next := restored.NextOffset
	if next >= first && next <= last {
		return next, nil
	}
	oerr := &OffsetOutOfRangeError{Partition: p, Offset: next, First: first, Last: last, CheckpointID: restored.ID}
	switch s.opts.OutOfRange {
	case OutOfRangeEarliest:
		s.log.Warn("kafkasource: offset out of range, continuing at the first offset", "err", oerr)
		return first, nil
	case OutOfRangeLatest:
		s.log.Warn("kafkasource: offset out of range, continuing at the high watermark", "err", oerr)
		return last, nil
	default:
		return 0, oerr
	}
}

// logBounds returns the first offset and the high watermark of p.
func (s *Source) logBounds(ctx context.Context, p checkpoint.TopicPartition) (first, last int64, err error) {
	var errs []error
	for _, b := range s.group.Brokers {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err := s.opts.Dialer.DialLeader(dctx, "tcp", b, p.Topic, p.Partition)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		first, last, err = conn.ReadOffsets()
		_ = conn.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return first, last, nil
	}
	return 0, 0, fmt.Errorf("kafkasource: %s: read log bounds: %w", p, errors.Join(errs...))
}
