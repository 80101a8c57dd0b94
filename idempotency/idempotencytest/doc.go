// Package idempotencytest is the conformance suite for idempotency.Store.
// Every backend runs it, the in-memory one included:
//
//	func TestConformance(t *testing.T) {
//		idempotencytest.Run(t, func(t *testing.T) idempotency.Store {
//			return newBackend(t)
//		})
//	}
//
// The suite uses real time with TTLs of a few hundred milliseconds, so a
// backend must expire keys to within about 100 ms (Redis does). Subtests run
// in parallel and use distinct keys, so one server may back them all.
//
// # Guarantees
//
// A backend that passes has: atomic claims (50 concurrent Claims of one key
// give one claim), token-guarded Complete and Release that report
// idempotency.ErrClaimLost and never overwrite a successor's claim, pending
// and done TTLs, fingerprint checks on pending and done keys, byte-exact
// replayed responses, and ErrInvalidArgument for empty keys and non-positive TTLs.
package idempotencytest
