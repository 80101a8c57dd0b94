package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors a [Store] returns. They are definite answers: the store was reached,
// and the call changed nothing. [IsOutcomeUnknown] tells them apart from
// errors whose outcome is unknown.
var (
	// ErrPending is returned by Claim when another claim holds the key. The
	// caller must not run the side effect; it should ask its client to retry.
	ErrPending = errors.New("idempotency: key is pending")

	// ErrDone matches (with errors.Is) the *DoneError that Claim returns for
	// a key whose side effect is done.
	ErrDone = errors.New("idempotency: key is done")

	// ErrFingerprintMismatch is returned by Claim when the key is pending or
	// done for a request whose fingerprint differs: the same key was reused
	// for a different payload. Nothing is claimed.
	ErrFingerprintMismatch = errors.New("idempotency: key reused with a different request")

	// ErrClaimLost is returned by Complete and Release when the key no longer
	// holds the claim: its pending TTL ran out, and the key expired or was
	// claimed by someone else. The store is left unchanged; in particular
	// another owner's claim is never overwritten.
	ErrClaimLost = errors.New("idempotency: claim lost")

	// ErrStoreFull is returned by a bounded store's Claim when it holds its
	// maximum number of pending keys and can evict nothing.
	ErrStoreFull = errors.New("idempotency: store full")

	// ErrInvalidArgument is returned by a Store for an empty key or a TTL
	// that is not positive: a bad argument to one call.
	ErrInvalidArgument = errors.New("idempotency: invalid argument")

	// ErrInvalidOptions is wrapped by the errors NewHandler, NewMemoryStore
	// and the backends' constructors return for a missing argument or an
	// invalid option.
	ErrInvalidOptions = errors.New("idempotency: invalid options")
)

// ErrOutcomeUnknown is wrapped by a side effect's ([Func], or [Do]'s fn)
// error when the side effect may have taken effect although it failed: a
// publish sent to a broker that did not answer. The key of such a delivery
// is never released as failed, since a retry could then run the side
// effect a second time: it stays pending until its PendingTTL runs out (a
// retry meanwhile is answered 503, or ErrPending). A side effect that can
// learn its outcome (kafkapub's IdempotentPublisher) returns only once it
// knows it, and needs this error only when it never will. kafkapub's
// publishers wrap it in every error their IsOutcomeUnknown reports.
var ErrOutcomeUnknown = errors.New("idempotency: outcome unknown")

// DoneError is returned by Claim for a key whose side effect is done. Its
// Record holds the response to replay. errors.Is(err, ErrDone) reports true.
type DoneError struct {
	Record Record
}

// Error implements error.
func (e *DoneError) Error() string {
	return fmt.Sprintf("idempotency: key %q is done (status %d)", e.Record.Key, e.Record.Response.Status)
}

// Is reports whether target is ErrDone.
func (e *DoneError) Is(target error) bool { return target == ErrDone }

// IsOutcomeUnknown reports whether a store's error leaves it open whether
// the call took effect (a timeout, a dropped connection): a Claim may have
// taken the key, which then stays pending until its TTL runs out; a
// Complete may have marked it done; a Release may have deleted it.
//
// It is false for nil and for a definite answer, one of the sentinel errors
// above or a *DoneError: the call changed nothing. kafkapub and kafkatxn
// name the same idea the same way.
func IsOutcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	for _, s := range []error{ErrPending, ErrDone, ErrFingerprintMismatch, ErrClaimLost, ErrStoreFull, ErrInvalidArgument} {
		if errors.Is(err, s) {
			return false
		}
	}
	return true
}

// Claim is a pending hold on a key, returned by Store.Claim. Its Token is
// unique to this claim: Complete and Release act only while the key still
// holds the same token, so a claim that expired and was taken over can never
// overwrite its successor.
type Claim struct {
	Key         string
	Token       string
	Fingerprint string
}

// Response is what a done key replays to a duplicate request.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

// Record is the stored state of a done key.
type Record struct {
	Key         string
	Fingerprint string
	Response    Response
}

// Store keeps the two-state record of each idempotency key: pending while a
// side effect runs, done once it has completed. A key says "done" only after
// the side effect is done: that ordering is the whole point of the package.
//
// Implementations are safe for concurrent use, and each method is atomic:
// two concurrent Claims of one absent key give exactly one claim.
type Store interface {
	// Claim takes an absent key: it becomes pending for ttl, held by the
	// returned Claim. For a key that is present it returns, without changing
	// anything:
	//   - ErrFingerprintMismatch when the stored fingerprint differs;
	//   - a *DoneError carrying the stored Record when the key is done;
	//   - ErrPending when another claim holds it.
	// A pending key whose ttl has run out is absent.
	Claim(ctx context.Context, key, fingerprint string, ttl time.Duration) (Claim, error)

	// Complete turns the key held by c done, storing resp for ttl, so that
	// later Claims return it. It returns ErrClaimLost if the key no longer
	// holds c.
	Complete(ctx context.Context, c Claim, resp Response, ttl time.Duration) error

	// Release deletes the key held by c, so that a retry can claim it at
	// once. It returns ErrClaimLost if the key no longer holds c.
	Release(ctx context.Context, c Claim) error
}

// Extender is a [Store] that can extend a pending claim. The Handler
// extends the claim of a delivery whose side effect outlives its answer
// (a publish whose outcome the producer is still learning), every third
// of PendingTTL, so that the key stays pending until the side effect ends
// however long that takes, and no retry runs it again meanwhile; if the
// gateway dies, the key expires within PendingTTL. Without Extender such a
// key can expire while its side effect still runs. MemoryStore and
// redisstore's Store implement it.
type Extender interface {
	// Extend sets the life of the pending key held by c to ttl from now.
	// It returns ErrClaimLost, changing nothing, if the key no longer
	// holds c (it expired, was taken over, completed or released).
	Extend(ctx context.Context, c Claim, ttl time.Duration) error
}

// CheckClaimArgs validates the arguments of Store.Claim and Store.Complete:
// key must not be empty and ttl must be positive. Backends call it so that
// every Store rejects the same input with ErrInvalidArgument.
func CheckClaimArgs(key string, ttl time.Duration) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: ttl %v is not positive", ErrInvalidArgument, ttl)
	}
	return nil
}
