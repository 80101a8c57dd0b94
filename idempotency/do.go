package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DoOptions bounds the steps of [Do]. The zero value is valid: the Default
// constants.
type DoOptions struct {
	// PendingTTL is the life of the claim while the side effect runs. It
	// must exceed SideEffectTimeout plus StoreTimeout. Default
	// DefaultPendingTTL.
	PendingTTL time.Duration
	// DoneTTL is how long a done key remembers its Response. Default
	// DefaultDoneTTL.
	DoneTTL time.Duration
	// SideEffectTimeout bounds fn. Default DefaultSideEffectTimeout.
	SideEffectTimeout time.Duration
	// StoreTimeout bounds each store call. Default DefaultStoreTimeout.
	StoreTimeout time.Duration
}

func (o *DoOptions) setDefaults() error {
	if err := durationDefaults([]durationOption{
		{"PendingTTL", &o.PendingTTL, DefaultPendingTTL},
		{"DoneTTL", &o.DoneTTL, DefaultDoneTTL},
		{"SideEffectTimeout", &o.SideEffectTimeout, DefaultSideEffectTimeout},
		{"StoreTimeout", &o.StoreTimeout, DefaultStoreTimeout},
	}); err != nil {
		return err
	}
	if o.PendingTTL <= o.SideEffectTimeout+o.StoreTimeout {
		return fmt.Errorf("%w: PendingTTL %v must exceed SideEffectTimeout %v + StoreTimeout %v",
			ErrInvalidOptions, o.PendingTTL, o.SideEffectTimeout, o.StoreTimeout)
	}
	if o.DoneTTL < o.PendingTTL {
		return fmt.Errorf("%w: DoneTTL %v is shorter than PendingTTL %v", ErrInvalidOptions, o.DoneTTL, o.PendingTTL)
	}
	return nil
}

// Outcome is what [Do] did with a key.
type Outcome struct {
	// Response is fn's response, or the stored one when Replayed.
	Response Response
	// Replayed is true when the key was already done: fn did not run.
	Replayed bool
	// CompleteErr is set when fn succeeded but the key could not be marked
	// done (the store failed, or the claim was lost: errors.Is
	// ErrClaimLost). The side effect is durable, so Do still succeeds; the
	// key stays pending until its TTL, and a later duplicate runs fn again.
	CompleteErr error
}

// EffectError is returned by [Do] when fn failed: the key was released (or
// ReleaseErr says why not), so a retry runs fn again; or, when fn's error
// wraps ErrOutcomeUnknown, held (Held): it stays pending until its
// PendingTTL, and retries until then get ErrPending.
type EffectError struct {
	Err error
	// ReleaseErr is the Release failure, if any: the key then stays
	// pending until its PendingTTL, and retries until then get ErrPending.
	ReleaseErr error
	// Held is true when fn's outcome is unknown and the key was not
	// released.
	Held bool
}

// Error implements error.
func (e *EffectError) Error() string {
	if e.Held {
		return fmt.Sprintf("idempotency: side effect's outcome unknown, key held: %v", e.Err)
	}
	if e.ReleaseErr != nil {
		return fmt.Sprintf("idempotency: side effect failed: %v (release failed too: %v)", e.Err, e.ReleaseErr)
	}
	return fmt.Sprintf("idempotency: side effect failed: %v", e.Err)
}

// Unwrap returns the side effect's error.
func (e *EffectError) Unwrap() error { return e.Err }

// Do runs fn at most once per key while store remembers the key, and marks
// the key done only after fn returned nil: the claim -> side effect ->
// complete or release protocol of the [Handler], without HTTP, for a Kafka
// or gRPC consumer.
//
//   - A key already done is not run again: Do returns its stored Response
//     with Replayed set.
//   - A key another caller holds returns ErrPending; a key stored with
//     another fingerprint, ErrFingerprintMismatch; neither runs fn.
//   - A store failure while claiming is returned wrapped; fn did not run
//     (IsOutcomeUnknown tells whether the claim may have been taken).
//   - fn's failure returns an *EffectError after releasing the key; if its
//     error wraps ErrOutcomeUnknown, without releasing it (Held).
//   - fn's success completes the key with fn's Response and returns nil,
//     even if completing fails (see Outcome.CompleteErr).
//
// fn runs under ctx bounded by SideEffectTimeout. Once the claim is taken,
// completing or releasing it ignores ctx's cancellation (bounded by
// StoreTimeout instead): a claim must not be left to its TTL because the
// caller gave up.
func Do(ctx context.Context, store Store, key, fingerprint string, fn func(ctx context.Context) (Response, error), opts DoOptions) (Outcome, error) {
	if store == nil || fn == nil {
		return Outcome{}, fmt.Errorf("%w: store and fn are required", ErrInvalidOptions)
	}
	if err := opts.setDefaults(); err != nil {
		return Outcome{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, opts.StoreTimeout)
	claim, err := store.Claim(cctx, key, fingerprint, opts.PendingTTL)
	cancel()
	if err != nil {
		var done *DoneError
		if errors.As(err, &done) {
			return Outcome{Response: done.Record.Response, Replayed: true}, nil
		}
		return Outcome{}, err
	}

	after := context.WithoutCancel(ctx)
	fctx, cancel := context.WithTimeout(ctx, opts.SideEffectTimeout)
	resp, err := fn(fctx)
	cancel()
	if errors.Is(err, ErrOutcomeUnknown) {
		return Outcome{}, &EffectError{Err: err, Held: true}
	}
	if err != nil {
		sctx, cancel := context.WithTimeout(after, opts.StoreTimeout)
		rerr := store.Release(sctx, claim)
		cancel()
		return Outcome{}, &EffectError{Err: err, ReleaseErr: rerr}
	}
	sctx, cancel := context.WithTimeout(after, opts.StoreTimeout)
	cerr := store.Complete(sctx, claim, resp, opts.DoneTTL)
	cancel()
	return Outcome{Response: resp, CompleteErr: cerr}, nil
}
