// Package history is the chaos run's history of operations and the checkers
// that read it, after Jepsen's: every send of a webhook and its answer,
// every transaction of the run's transactional writer and its outcome,
// every poll of a consumer, every committed offset seen and the final reads
// of the stores, one JSON object per line (Op), written by a Recorder as
// the run goes and read back with Decode.
//
// The checkers are pure functions of a history: LostWrites (an
// acknowledged write missing from a final read), Duplicates (a key read
// twice where each must be once), AbortedReads (a key only aborted
// transactions wrote, read or polled), UnexpectedReads (a key nobody
// wrote), Polls (a consumer's offsets going backwards, skipping records the
// final read holds, or disagreeing with it) and Commits (a committed offset
// going backwards). Check runs them all.
//
// # Guarantees
//
// A checker reports nothing only when the history shows no instance of its
// anomaly: writes of unknown outcome (Info, or an Invoke without an
// answer) may be read or not, writes acknowledged must be read, writes
// definitely failed must not be. A checker sees only what the history
// holds: an operation the run did not record cannot be judged.
package history
