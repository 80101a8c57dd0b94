// Package checkpointtest is the conformance suite for checkpoint.Storage
// implementations. Every backend, the in-memory and filesystem ones included,
// runs it:
//
//	func TestStorage(t *testing.T) {
//		checkpointtest.TestStorage(t, func(t *testing.T) checkpoint.Storage {
//			return newMyStorage(t)
//		})
//	}
//
// TestStorage covers Put, Get, List and Delete, and the conditional writes:
// Create and Replace refuse with ErrConflict and change nothing when they
// lose, and when goroutines race for one name exactly one wins each round.
//
// A Storage that several processes share (a directory, an S3 bucket) also
// runs TestProcessRace, which re-executes the test binary as several child
// processes racing Create and compare-and-swap Replace on one name.
//
// TestParticipant is the conformance suite for checkpoint.Participant
// implementations (dedup, window, state, sink.Cursor, chsink, windowsink and
// audit.Counter run it): the same state gives the
// same bytes, a restored snapshot round-trips, and a truncated, garbage or
// foreign state is refused with the package's typed error and loads nothing.
//
//	checkpointtest.TestParticipant(t, checkpointtest.Participant{
//		New:     func(t *testing.T) checkpoint.Participant { return newOp(t) },
//		Fill:    func(t *testing.T, p checkpoint.Participant, n int) { feed(t, p, n) },
//		Refused: []error{mypkg.ErrCorrupt, mypkg.ErrUnsupportedVersion},
//	})
//
// TestAsyncParticipant is the suite for checkpoint.AsyncParticipant
// implementations (chsink, dedup and state run it; kafkasink, whose state is a
// prepared transaction restored by committing it, has tests of its own): the pending
// part returns the barrier's state, records fed after the barrier while it
// runs never reach it, its state restores, and a pending part of an aborted
// checkpoint lets go without losing the records after its barrier. It runs
// TestParticipant too; run it with -race.
//
// BenchmarkStorage measures Put, Create and Get of small and large blobs, the
// same way on every backend, so their figures compare.
//
// # Guarantees
//
// A suite fails the test (never skips) on every broken promise it checks,
// naming the call and the name or state that broke it; TestProcessRace's
// children are killed and reaped at the test's cleanup.
// Passing it is necessary, not sufficient: it checks the contract of
// checkpoint.Storage and checkpoint.Participant, not a backend's own
// durability, which the backend's tests against its real server prove.
package checkpointtest
