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

// ownership is what a chain knows of its partition's owner: the meta of its
// checkpoints and how to commit the group's offset. Under the classic
// protocol it is a generation (classicOwnership), under the consumer
// protocol the member and its epoch (member.go).
type ownership struct {
	meta       checkpoint.Meta
	commit     func(ctx context.Context, p checkpoint.TopicPartition, next int64) error
	membership *membership // what MembershipOf returns
	// confirm asks the group coordinator whether the ownership is still
	// current, before a chain is restarted (see superviseChain); nil under
	// the consumer protocol, whose member learns it from its heartbeat.
	confirm func(ctx context.Context) (bool, error)
	// superseded is called, under the consumer protocol, when a save
	// refused with checkpoint.ErrSuperseded stops the chain: the member
	// starts the chain again at its next heartbeat if the partition is
	// still in its target, and counts that restart. Nil under the classic
	// protocol, whose supervisor restarts the chain itself.
	superseded func()
}

func (s *Source) classicOwnership(gen *kafka.Generation) ownership {
	return ownership{
		meta: checkpoint.Meta{Generation: int64(gen.ID), Member: gen.MemberID},
		commit: func(_ context.Context, p checkpoint.TopicPartition, next int64) error {
			s.commitMu.Lock()
			defer s.commitMu.Unlock()
			return gen.CommitOffsets(map[string]map[int]int64{p.Topic: {p.Partition: next}})
		},
		membership: &membership{group: s.group.ID, current: func() (int, string) { return int(gen.ID), gen.MemberID }},
		confirm:    func(ctx context.Context) (bool, error) { return s.generationCurrent(ctx, gen) },
	}
}

// runChain runs partition p's chain for one ownership. It returns nil when
// the ownership (gctx) or Run ends, and an error when the chain failed.
func (s *Source) runChain(runCtx, gctx context.Context, own ownership, p checkpoint.TopicPartition) (err error) {
	// ctx ends with the ownership: the generation or Run, whichever first.
	ctx, cancel := context.WithCancel(context.WithValue(gctx, membershipKey{}, own.membership))
	defer cancel()
	stop := context.AfterFunc(runCtx, cancel)
	defer stop()
	ended := func() bool { return ctx.Err() != nil }

	proc, err := s.newProc(ctx, p)
	if err != nil {
		if proc != nil {
			// A half-built chain: close what ProcessorFunc managed to build.
			if cerr := closeParticipants(proc.Participants); cerr != nil {
				s.log.Warn("kafkasource: closing a half-built chain", "partition", p.String(), "err", cerr)
			}
		}
		if ended() {
			return nil
		}
		return fmt.Errorf("kafkasource: %s: new processor: %w", p, err)
	}
	if proc == nil || (proc.Process == nil && proc.ProcessBatch == nil) {
		if proc != nil {
			_ = closeParticipants(proc.Participants)
		}
		return fmt.Errorf("kafkasource: %s: ProcessorFunc returned neither Process nor ProcessBatch", p)
	}
	// Ends the chain's runners before anything is closed; a runner's error
	// is the cause of the chain context consume reads.
	chainCtx, failChain := context.WithCancelCause(ctx)
	var run runners
	var dl *deadLetters // closed with the participants
	defer func() {
		failChain(nil)
		run.wait()
		var cerr error
		if proc.Close != nil {
			cerr = proc.Close()
		}
		cerr = errors.Join(cerr, closeParticipants(proc.Participants))
		if dl != nil {
			cerr = errors.Join(cerr, dl.Close())
		}
		if cerr != nil && err == nil && !ended() {
			err = fmt.Errorf("kafkasource: %s: close processor: %w", p, cerr)
		}
	}()
	participants := proc.Participants
	if proc.DeadLetter != nil {
		if _, taken := participants[deadLetterParticipant]; taken {
			return fmt.Errorf("kafkasource: %s: participant name %q is reserved for the dead-letter state", p, deadLetterParticipant)
		}
		if dl, err = newDeadLetters(*proc.DeadLetter, s.group.ID, s.group.Brokers, s.opts.Dialer, p); err != nil {
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

	meta := own.meta
	commit := func(cctx context.Context, next int64) error {
		if cctx.Err() != nil {
			return errGenerationEnded
		}
		return own.commit(cctx, p, next)
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
	r := s.newWireFetcher(p, next)
	fctx, fcancel := context.WithCancel(ctx)
	mb := newMailbox(s.opts.Buffer, next)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			ms, err := r.fetchBatch(fctx)
			if !mb.putAll(ms, r.f.Next, r.f.HighWatermark, err, fctx.Done()) || err != nil {
				return
			}
		}
	})
	defer func() {
		// The fetch returns once fctx ends (the fetcher sets its
		// connection's deadline), so the fetcher is closed after its
		// goroutine ended: its Close is not safe beside a fetch (the race
		// detector caught one reconnecting meanwhile).
		fcancel()
		wg.Wait()
		_ = r.Close()
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
	c := chainState{s: s, p: p, proc: proc, dl: dl, task: task, meta: meta, commit: commit, next: next}
	batch := make([]kafka.Message, 0, s.opts.Buffer)
	for {
		// select picks at random among ready cases: without this check a
		// record or barrier could still be handled after ownership ended.
		if ctx.Err() != nil {
			return c.next, false, nil
		}
		select {
		case <-ctx.Done():
			return c.next, false, nil
		case <-tick:
			if err := proc.Tick(ctx); err != nil {
				if ctx.Err() != nil {
					return c.next, false, nil
				}
				return c.next, false, fmt.Errorf("kafkasource: %s: tick: %w", p, err)
			}
		case b := <-task.Barriers():
			if stop, err := c.checkpoint(ctx, b); stop {
				return c.next, false, err
			}
		case err := <-task.Failures():
			// The asynchronous part of a checkpoint failed: nothing was
			// written, and the chain restarts from its last completed one.
			if ctx.Err() != nil {
				return c.next, false, nil
			}
			return c.next, false, fmt.Errorf("kafkasource: %w", err)
		case <-mb.ready:
			var ferr error
			var end, hwm int64
			batch, end, hwm, ferr = mb.take(batch)
			if stop, err := c.records(ctx, batch); stop {
				return c.next, false, err
			}
			c.fetched(end, hwm)
			if ferr != nil {
				if ctx.Err() != nil {
					return c.next, false, nil
				}
				if errors.Is(ferr, kafka.OffsetOutOfRange) {
					return c.next, true, nil
				}
				return c.next, false, fmt.Errorf("kafkasource: %s: fetch at %d: %w", p, c.next, ferr)
			}
		}
	}
}

// chainState is what consume's loop needs to process records and barriers.
type chainState struct {
	s      *Source
	p      checkpoint.TopicPartition
	proc   *Processor
	dl     *deadLetters
	task   *checkpoint.Task
	meta   checkpoint.Meta
	commit func(context.Context, int64) error
	next   int64 // the offset after the last record processed
}

// checkpoint begins the checkpoint of barrier b at c.next: its synchronous
// part, after which the chain goes on while the task completes it (a
// failure then arrives on Task.Failures). stop says the chain must end,
// with err (nil when ctx ended).
func (c *chainState) checkpoint(ctx context.Context, b *checkpoint.Barrier) (stop bool, err error) {
	if err := c.task.Begin(ctx, b, c.next, c.meta, c.commit); err != nil {
		if ctx.Err() != nil {
			return true, nil // revoked mid-checkpoint: nothing was committed
		}
		if errors.Is(err, checkpoint.ErrDeclined) {
			c.s.log.Debug("kafkasource: checkpoint declined; the next barrier tries again", "err", err)
			return false, nil
		}
		return true, fmt.Errorf("kafkasource: %w", err)
	}
	return false, nil
}

// records processes a fetched batch in offset order: through ProcessBatch
// in slices of at most Options.MaxBatch records, or one Process call per
// record. A barrier that arrives meanwhile is taken at the next record
// boundary (before the next record or slice), not after the whole batch, so
// a checkpoint's offset and state always agree record for record.
func (c *chainState) records(ctx context.Context, batch []kafka.Message) (stop bool, err error) {
	barriers, failures := c.task.Barriers(), c.task.Failures()
	for i := 0; i < len(batch); {
		if ctx.Err() != nil {
			return true, nil
		}
		if len(failures) > 0 {
			return true, fmt.Errorf("kafkasource: %w", <-failures)
		}
		if len(barriers) > 0 { // only this goroutine receives, so this does not block
			if stop, err := c.checkpoint(ctx, <-barriers); stop {
				return true, err
			}
		}
		var n int
		if c.proc.ProcessBatch != nil {
			end := min(len(batch), i+c.s.opts.MaxBatch)
			n, err = c.proc.ProcessBatch(ctx, batch[i:end])
			if n < 0 || n > end-i || (err == nil) != (n == end-i) {
				if ctx.Err() != nil {
					return true, nil
				}
				return true, fmt.Errorf("kafkasource: %s: ProcessBatch returned %d for %d records at offset %d (it must handle all, or fewer with an error about the next): %w",
					c.p, n, end-i, batch[i].Offset, err)
			}
		} else {
			err = c.proc.Process(ctx, batch[i])
			if err == nil {
				n = 1
			}
		}
		if n > 0 {
			i += n
			c.advance(batch[i-1])
		}
		if err != nil {
			if ctx.Err() != nil {
				return true, nil
			}
			m := batch[i]
			if err = c.s.handlePoison(ctx, c.p, c.dl, m, err); err != nil {
				if ctx.Err() != nil {
					return true, nil
				}
				return true, err
			}
			i++
			c.advance(m)
		}
	}
	return false, nil
}

// fetched moves the chain to end, the fetcher's position once every record
// fetched so far was processed, when it lies past the last record: past
// the control records and aborted records that followed it. The Java
// consumer's position moves past them the same way, so a group offset
// committed at the end of a transactional topic is its high watermark, not
// the offset of its last commit marker (a lag of 1 forever in Kafka's
// tools). It then sets the lag from the fetch's high watermark.
func (c *chainState) fetched(end, hwm int64) {
	if end > c.next {
		c.next = end
		if c.dl != nil {
			c.dl.next = c.next
		}
	}
	if hwm > 0 {
		c.task.SetLag(max(hwm-c.next, 0))
	}
}

// advance moves the chain past m.
func (c *chainState) advance(m kafka.Message) {
	c.next = m.Offset + 1
	if c.dl != nil {
		c.dl.next = c.next
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
