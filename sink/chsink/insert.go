package chsink

// Connections and insert attempts: one connection, redialled after any
// failure, and an insert retried with the same token.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/repair"
)

func (s *Sink[T]) dial(ctx context.Context) (*ch.Client, error) {
	o := s.opts.Client
	o.Address, o.Database, o.DialTimeout, o.ReadTimeout = s.table.Addr, s.opts.Database, s.opts.DialTimeout, s.opts.InsertTimeout
	if s.opts.User != "" {
		o.User = s.opts.User
	}
	if s.opts.Password != "" {
		o.Password = s.opts.Password
	}
	if o.ClientName == "" {
		o.ClientName = "exactlyonce-chsink"
	}
	c, err := ch.Dial(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("chsink: dial %s: %w", s.table.Addr, err)
	}
	return c, nil
}

func (s *Sink[T]) connect(ctx context.Context) error {
	if s.conn != nil && !s.conn.IsClosed() {
		return nil
	}
	s.dropConn()
	c, err := s.dial(ctx)
	if err != nil {
		return err
	}
	s.conn = c
	boot := repair.ReadBoot(ctx, c, s.opts.Database, s.sent)
	s.boot.Store(&boot)
	return nil
}

func (s *Sink[T]) dropConn() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// insert sends input with in's token, retrying retryable errors with
// exponential backoff and full jitter; hook, if set, runs before each
// attempt. It runs in the flight's goroutine, or in the sink's with no batch
// in flight: it uses the connection and, of the journal, only CheckOwner.
//
// unsure says an earlier attempt (of this process or of one before a crash)
// may have reached the server; every attempt after a failed one is unsure
// too. An unsure attempt on a plain MergeTree reads the server's log and
// settles the blocks it reports as duplicates (see repair.Repairer.Settle): a
// token the server kept for a part it lost would otherwise drop the batch
// silently.
// rows says how input relates to the batch journaled as in.
//
// It returns the parts of the table that the server dropped the block as a
// duplicate of, and still holds (known only from an unsure attempt on a
// plain MergeTree).
func (s *Sink[T]) insert(ctx context.Context, input proto.Input, in sink.Intent, unsure bool, rows repair.Content, hook func()) ([]string, error) {
	settings := insertSettingsFor(s.sent, in.Token) // see settings.go
	for attempt := 0; ; attempt++ {
		err := ctx.Err()
		if err == nil && attempt > 0 {
			err = s.journal.CheckOwner(ctx)
		}
		if err == nil {
			err = s.connect(ctx)
		}
		timedOut := false
		if err == nil {
			if hook != nil {
				hook()
			}
			actx, cancel := context.WithTimeout(ctx, s.opts.InsertTimeout)
			// ch-go notices a cancelled context only at its next read
			// deadline (InsertTimeout away); closing the connection ends the
			// attempt at once, with an unknown outcome like any cut.
			conn := s.conn
			stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
			q := ch.Query{Body: s.body, Input: input, Settings: settings}
			var log repair.Log // the blocks the server dropped as duplicates
			if unsure && !s.info.replicated {
				q = log.Watch(q)
			}
			err = conn.Do(actx, q)
			var dups []string
			if err == nil {
				dups, err = s.repairer.Settle(actx, conn, input, in, rows, &log)
				err = lostPart(err)
			}
			stop()
			// The attempt's own deadline, not the caller's: the outcome is
			// unknown and a retry with the same token settles it.
			timedOut = err != nil && actx.Err() != nil && ctx.Err() == nil
			cancel()
			if err == nil {
				return dups, nil
			}
			s.dropConn()
		}
		unsure = true
		if errors.Is(err, sink.ErrFenced) || ctx.Err() != nil {
			return nil, &InsertError{Intent: in, Attempts: attempt + 1, Err: errors.Join(err, ctx.Err())}
		}
		retryable := timedOut || IsRetryable(err)
		if !retryable || !s.opts.policy().Retry(attempt+1) {
			return nil, &InsertError{Intent: in, Attempts: attempt + 1, Permanent: !retryable, Err: err}
		}
		s.m.retries.Add(ctx, 1, s.m.attrs)
		delay := s.opts.policy().Delay(attempt+1, rand.Float64)
		s.opts.Logger.Debug("chsink: insert failed, retrying", "token", in.Token, "attempt", attempt+1, "delay", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// runID returns the id of the server's run as last read, "" if unknown.
func (s *Sink[T]) runID() string {
	if id := s.boot.Load(); id != nil {
		return *id
	}
	return ""
}
