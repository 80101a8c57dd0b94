// Package backoff is the one retry policy of the SDK: how long a retry
// waits and how many there are. Every package's Options spell its fields
// the same way (InitialBackoff, MaxBackoff, Multiplier, Jitter,
// MaxAttempts) and hand them to a Policy.
//
//	p := backoff.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: 1}
//	for attempt := 1; ; attempt++ {
//		err := try()
//		if err == nil || !p.Retry(attempt) { return err }
//		time.Sleep(p.Delay(attempt, rand.Float64))
//	}
//
// # Guarantees
//
// Delay is a pure function of the attempt and the random number it is
// given, so tests pin it; it never returns a negative wait or one above
// Max, and does not overflow for any attempt.
package backoff

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalid is wrapped by Validate's error.
var ErrInvalid = errors.New("backoff: invalid policy")

// Policy is an exponential backoff with jitter. The n-th retry (n from 1)
// waits d = min(Max, Initial * Multiplier^(n-1)), lowered by a random
// fraction of at most Jitter: uniformly in [d*(1-Jitter), d]. Jitter 1 is
// "full jitter" (uniform in [0, d]), 0 none.
type Policy struct {
	// Initial is the wait before the first retry.
	Initial time.Duration
	// Max bounds every wait.
	Max time.Duration
	// Multiplier grows the wait after each retry; at least 1.
	Multiplier float64
	// Jitter is the largest fraction a wait is shortened by, in [0, 1].
	Jitter float64
	// MaxAttempts bounds the attempts, the first one included; 0 means no
	// bound.
	MaxAttempts int
}

// Validate reports a policy no retry loop can follow.
func (p Policy) Validate() error {
	switch {
	case p.Initial < 0, p.Max < 0, p.MaxAttempts < 0:
		return fmt.Errorf("%w: a negative value in %+v", ErrInvalid, p)
	case p.Max < p.Initial:
		return fmt.Errorf("%w: MaxBackoff %v below InitialBackoff %v", ErrInvalid, p.Max, p.Initial)
	case p.Multiplier < 1 || math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0):
		return fmt.Errorf("%w: Multiplier %v is not a finite number of at least 1", ErrInvalid, p.Multiplier)
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return fmt.Errorf("%w: Jitter %v is not in [0, 1]", ErrInvalid, p.Jitter)
	}
	return nil
}

// Retry reports whether another attempt follows the failed attempt-th one
// (from 1).
func (p Policy) Retry(attempt int) bool {
	return p.MaxAttempts == 0 || attempt < p.MaxAttempts
}

// Delay returns the wait after the failed attempt-th attempt (from 1),
// with r a random number in [0, 1) (rand.Float64; a constant in tests).
func (p Policy) Delay(attempt int, r func() float64) time.Duration {
	d := float64(p.Initial) * math.Pow(p.Multiplier, float64(max(attempt, 1)-1))
	if d > float64(p.Max) || math.IsNaN(d) || math.IsInf(d, 0) {
		d = float64(p.Max)
	}
	if p.Jitter > 0 {
		d -= d * p.Jitter * r()
	}
	return max(0, min(time.Duration(d), p.Max))
}
