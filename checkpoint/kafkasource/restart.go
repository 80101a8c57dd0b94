package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/backoff"
	"github.com/exactlyonce/exactlyonce/internal/meter"
	"github.com/exactlyonce/exactlyonce/internal/netfail"
)

// Defaults for Restart, the values of Flink's exponential-delay restart
// strategy where it has one.
const (
	DefaultRestartInitialBackoff = time.Second
	DefaultRestartMaxBackoff     = time.Minute
	DefaultRestartMultiplier     = 2.0
	DefaultRestartJitter         = 0.1
	DefaultRestartResetAfter     = 5 * time.Minute
)

// ErrRestartsExhausted is wrapped by the error Run returns when a partition's
// chain failed Restart.MaxAttempts times in a row with retryable errors.
var ErrRestartsExhausted = errors.New("kafkasource: chain restarts exhausted")

// Restart is the restart strategy for failed chains, in the manner of
// Flink's exponential-delay strategy, but per partition: a chain that fails
// with a retryable error (IsRetryable, or Retryable if set) is closed and
// built again from its partition's last completed checkpoint after a
// backoff, while every other partition goes on. A chain failing with any
// other error (a Process error on bad input, a corrupt journal, an offset
// out of range, a content mismatch) ends Run, as before: nothing is
// skipped, and the caller decides.
//
// The n-th consecutive restart of a partition waits
// min(MaxBackoff, InitialBackoff * Multiplier^(n-1)), lowered by a random
// fraction of at most Jitter.
// A chain that ran ResetAfter without failing starts over at
// InitialBackoff. Each restart adds one to the exactlyonce.kafkasource.chain.restarts
// counter (topic and partition attributes) and logs a warning with the
// error.
//
// A restarted chain replays from its last checkpoint: the sinks' journals
// make that exactly once, as after any other restart.
//
// The zero value is valid: restarts on, with the defaults below.
type Restart struct {
	// Disabled ends Run on any chain failure, retryable or not (the
	// behaviour for a supervisor that restarts the whole process).
	Disabled bool
	// InitialBackoff before the first restart. Default:
	// DefaultRestartInitialBackoff (1 s).
	InitialBackoff time.Duration
	// MaxBackoff bounds the wait between two restarts. Default:
	// DefaultRestartMaxBackoff (1 min). It is also the longest a chain
	// lags behind a server that came back.
	MaxBackoff time.Duration
	// Multiplier of the backoff after each failed restart; at least 1.
	// Default: DefaultRestartMultiplier (2).
	Multiplier float64
	// Jitter lowers each backoff by a random fraction of at most Jitter, so
	// chains of many partitions do not hammer a returning server at the
	// same instant; in [0, 1). Default: DefaultRestartJitter (0.1);
	// negative means none.
	Jitter float64
	// ResetAfter: a chain that ran this long since its last restart without
	// failing starts over at InitialBackoff and MaxAttempts. Default:
	// DefaultRestartResetAfter (5 min).
	ResetAfter time.Duration
	// MaxAttempts bounds consecutive restarts of one partition; when
	// exceeded Run returns the last error, wrapping ErrRestartsExhausted.
	// Default 0: unlimited (a server that is down for an hour is waited
	// for, and alerts come from the metric and from consumer lag).
	MaxAttempts int
	// Retryable classifies a chain's error. Default: IsRetryable.
	Retryable func(error) bool
}

func (r *Restart) setDefaults() error {
	switch {
	case r.InitialBackoff < 0, r.MaxBackoff < 0, r.ResetAfter < 0, r.MaxAttempts < 0:
		return fmt.Errorf("%w: negative Restart option", ErrInvalidOptions)
	case r.Multiplier != 0 && r.Multiplier < 1:
		return fmt.Errorf("%w: Restart.Multiplier %v below 1", ErrInvalidOptions, r.Multiplier)
	case r.Jitter >= 1:
		return fmt.Errorf("%w: Restart.Jitter %v not below 1", ErrInvalidOptions, r.Jitter)
	}
	setDefault(&r.InitialBackoff, DefaultRestartInitialBackoff)
	setDefault(&r.MaxBackoff, DefaultRestartMaxBackoff)
	setDefault(&r.Multiplier, DefaultRestartMultiplier)
	setDefault(&r.ResetAfter, DefaultRestartResetAfter)
	if r.Jitter == 0 {
		r.Jitter = DefaultRestartJitter
	} else if r.Jitter < 0 {
		r.Jitter = 0
	}
	if r.MaxBackoff < r.InitialBackoff {
		r.MaxBackoff = r.InitialBackoff
	}
	if r.Retryable == nil {
		r.Retryable = IsRetryable
	}
	return nil
}

// backoff returns the wait before the attempt-th consecutive restart (1
// for the first), by the SDK's one retry policy (internal/backoff).
func (r *Restart) backoff(attempt int) time.Duration {
	p := backoff.Policy{Initial: r.InitialBackoff, Max: r.MaxBackoff, Multiplier: r.Multiplier, Jitter: r.Jitter}
	return p.Delay(attempt, rand.Float64)
}

// IsRetryable reports whether a chain's error says a server or the network
// failed, so the same chain built again later can succeed: a refused,
// reset or timed-out connection, an unexpected EOF, a closed connection, a
// Kafka error kafka-go marks temporary (also when a client's delivery
// timeout ended its retries of it), or an error in the chain whose
// Retryable() bool method says so (which takes precedence). Everything
// else is permanent: a Process error on a record that cannot be processed
// fails the same way again, and so does an offset out of range, a journal
// that does not match the replay or a fenced sink. Context cancellation,
// and a deadline with nothing retryable under it, are not retryable.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var oor *OffsetOutOfRangeError
	if errors.As(err, &oor) || errors.Is(err, ErrPoison) {
		return false
	}
	// A backend that knows better says so (chsink.InsertError: a batch
	// whose retries ran out on TOO_MANY_PARTS or a dropped connection).
	var r interface{ Retryable() bool }
	if errors.As(err, &r) {
		return r.Retryable()
	}
	// Before the deadline: a client whose own timeout ran out while the
	// server kept answering a temporary error (kafkatxn wraps both) met a
	// server that may answer later.
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Temporary()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return false // a deadline alone is the caller's to set
	}
	return netfail.Is(err)
}

// superviseChain runs p's chain for one ownership (gctx) and restarts it after
// retryable failures. It returns nil when the generation or Run ends, and
// the error that ends Run otherwise.
//
// Before every restart it asks the group coordinator whether the
// generation is still current (generationCurrent): a member paused past its
// session timeout learns that its generation ended only at kafka-go's next
// heartbeat, and a chain attached meanwhile under the old generation would
// restore the new owner's checkpoint and fence the new owner's producer at
// Start (kafkasink.Sink.Start), ending the new owner's chain.
//
// A save refused with checkpoint.ErrSuperseded (a later generation saved a
// checkpoint of the partition) is that same case, found by the checkpoint
// store: this member's generation ended though it was not told yet. It is
// not permanent (ending Run would stop every chain of the instance for a
// routine race, and ask the caller to restart), nor retryable as is
// (restarting at once would attach under the old generation): the
// generation is confirmed first, whatever Restart.Retryable says; once it
// ended, the chain stops as on a revocation, which loses nothing, since
// nothing after its last completed checkpoint was committed and the new
// owner replays from its own. A generation still current (the group was
// created anew and counts from 1 again) restarts the chain from its last
// checkpoint, whose Attach no longer counts the later generation's files
// it lists (with Restart.Disabled, Run returns the error instead).
//
// Under the consumer protocol (own.confirm nil) the member learns of a
// revocation from its own heartbeat: a refused save stops the chain, and
// the member starts it again at its next heartbeat if the partition is
// still in its assignment, counting that restart (own.superseded).
func (s *Source) superviseChain(runCtx, gctx context.Context, own ownership, p checkpoint.TopicPartition) error {
	r := &s.opts.Restart
	attrs := metric.WithAttributes(meter.Partition(p.Topic, p.Partition)...)
	attempt := 0
	for {
		started := time.Now()
		// runChain returns nil when the ownership ended before the chain
		// failed; an error happened while it owned the partition, even if
		// Run is stopping by now.
		err := s.runChain(runCtx, gctx, own, p)
		if err == nil {
			return nil
		}
		superseded := errors.Is(err, checkpoint.ErrSuperseded)
		if superseded {
			current, cerr := false, error(nil)
			if own.confirm != nil {
				current, cerr = own.confirm(gctx)
			}
			switch {
			case own.confirm == nil && gctx.Err() == nil && runCtx.Err() == nil:
				s.log.Info("kafkasource: a later owner saved a checkpoint of the partition; the chain stops, and starts again from the newest checkpoint at the member's next heartbeat if the partition is still assigned to it",
					"partition", p.String(), "generation", own.meta.Generation, "err", err)
				if own.superseded != nil {
					own.superseded()
				}
				return nil
			case cerr == nil && !current || gctx.Err() != nil || runCtx.Err() != nil:
				s.log.Info("kafkasource: a later generation saved a checkpoint of the partition; the chain stops",
					"partition", p.String(), "generation", own.meta.Generation, "err", err)
				return nil
			}
		}
		if r.Disabled || !superseded && !r.Retryable(err) {
			return err
		}
		if time.Since(started) >= r.ResetAfter {
			attempt = 0
		}
		for {
			attempt++
			if r.MaxAttempts > 0 && attempt > r.MaxAttempts {
				return fmt.Errorf("%w after %d restarts: %w", ErrRestartsExhausted, r.MaxAttempts, err)
			}
			wait := r.backoff(attempt)
			s.restarts.Add(context.WithoutCancel(runCtx), 1, attrs)
			s.log.Warn("kafkasource: chain failed; restarting it from its last checkpoint",
				"partition", p.String(), "attempt", attempt, "backoff", wait, "err", err)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-gctx.Done():
				t.Stop()
				return nil
			case <-runCtx.Done():
				t.Stop()
				return nil
			}
			current, cerr := true, error(nil)
			if own.confirm != nil {
				current, cerr = own.confirm(gctx)
			}
			gen := own.meta.Generation
			switch {
			case gctx.Err() != nil || runCtx.Err() != nil:
				return nil
			case cerr == nil && !current:
				s.log.Info("kafkasource: the generation ended; the chain is not restarted",
					"partition", p.String(), "generation", gen, "err", err)
				return nil
			case cerr != nil && !IsRetryable(cerr):
				return fmt.Errorf("kafkasource: %s: confirming generation %d before a restart: %w (after: %w)", p, gen, cerr, err)
			case cerr != nil:
				err = fmt.Errorf("kafkasource: %s: confirming generation %d before a restart: %w", p, gen, cerr)
				continue
			}
			break
		}
	}
}

// generationCurrent asks the group coordinator whether gen is still the
// group's generation with this member in it: kafka-go's heartbeat ends the
// generation's context only at its next tick, and a member that was paused
// or cut off longer than its session timeout may not know yet. The group
// must be Stable with this member among its members: being in a later
// generation takes this member's own JoinGroup, which kafka-go sends only
// after ending gen. (A Heartbeat would say it more directly, but kafka-go's
// Client.Heartbeat decodes versions 1 to 4 of the response in the wrong
// field order and never reports its error.) An error says the question was
// not answered.
func (s *Source) generationCurrent(ctx context.Context, gen *kafka.Generation) (bool, error) {
	tr := dialerTransport(s.opts.Dialer)
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(s.group.Brokers...), Transport: tr, Timeout: 10 * time.Second}
	resp, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{gen.GroupID}})
	if err != nil {
		return false, err
	}
	if len(resp.Groups) != 1 {
		return false, fmt.Errorf("kafkasource: describe group %s: %d groups in the answer", gen.GroupID, len(resp.Groups))
	}
	g := resp.Groups[0]
	if g.Error != nil {
		return false, g.Error
	}
	if g.GroupState != "Stable" {
		return false, nil
	}
	return slices.ContainsFunc(g.Members, func(m kafka.DescribeGroupsResponseMember) bool { return m.MemberID == gen.MemberID }), nil
}
