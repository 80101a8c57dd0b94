package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"sync"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Runner is an optional capability of a participant: background work that
// lasts as long as the chain, such as a sink's flush timer. The Source
// starts Run once the chain is restored, with a context that ends with the
// chain, and waits for it before the chain's participants are closed. A Run
// that returns an error while its context is live fails the chain with
// that error (see Options.Restart for what happens next); returning nil
// early is fine.
type Runner interface {
	Run(ctx context.Context) error
}

// runners starts the Run of every participant that has one. Their errors
// cancel fail with the participant's name.
type runners struct {
	wg sync.WaitGroup
}

func (r *runners) start(ctx context.Context, p checkpoint.TopicPartition, participants map[string]checkpoint.Participant,
	fail context.CancelCauseFunc) {
	for _, name := range sortedNames(participants) {
		run, ok := participants[name].(Runner)
		if !ok {
			continue
		}
		r.wg.Go(func() {
			if err := run.Run(ctx); err != nil && ctx.Err() == nil {
				fail(&runnerError{partition: p, name: name, err: err})
			}
		})
	}
}

func (r *runners) wait() { r.wg.Wait() }

// runnerError is how a failed Run reaches the chain: as the cause of the
// chain's cancelled context.
type runnerError struct {
	partition checkpoint.TopicPartition
	name      string
	err       error
}

func (e *runnerError) Error() string {
	return fmt.Sprintf("kafkasource: %s: participant %q: run: %v", e.partition, e.name, e.err)
}

func (e *runnerError) Unwrap() error { return e.err }

// closeParticipants closes every participant that implements io.Closer,
// each once even if it is registered under two names, in name order.
func closeParticipants(participants map[string]checkpoint.Participant) error {
	var errs []error
	seen := map[io.Closer]bool{}
	for _, name := range sortedNames(participants) {
		c, ok := participants[name].(io.Closer)
		if !ok {
			continue
		}
		// A map key must be comparable; a participant held by value in a
		// non-comparable type is closed without the check.
		if reflect.TypeOf(c).Comparable() {
			if seen[c] {
				continue
			}
			seen[c] = true
		}
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("participant %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func sortedNames(m map[string]checkpoint.Participant) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
