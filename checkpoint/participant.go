package checkpoint

import "context"

// ID numbers checkpoints. IDs grow by one with every attempted checkpoint of
// a job, so a larger ID always describes a later input position.
type ID uint64

// Participant is an operator whose state is part of every checkpoint: the Go
// counterpart of Flink's CheckpointedFunction.
//
// A participant belongs to one processing chain (one Kafka topic-partition)
// and is called from that chain's goroutine only, between two records, so its
// methods never race with its own processing. A participant that also runs
// background work (a sink's flush timer) synchronises that work itself.
type Participant interface {
	// Snapshot returns the participant's state as it is at the barrier of
	// checkpoint id: it reflects every record before the barrier and none
	// after it. A participant with side effects (a sink) completes them here:
	// Snapshot returns only once everything before the barrier is durable
	// downstream, or returns an error, which aborts the checkpoint.
	//
	// The returned bytes are self-contained and versioned; the caller owns
	// them. Snapshotting the same state twice returns identical bytes.
	Snapshot(ctx context.Context, id ID) ([]byte, error)

	// Restore replaces the participant's state with one returned by Snapshot,
	// possibly by another process or an older version of the program. It is
	// called before the first record of the chain, and not at all when no
	// checkpoint holds state for the chain (a fresh start). A corrupt or
	// truncated state is rejected with an error and loads nothing.
	Restore(ctx context.Context, state []byte) error

	// CheckpointCompleted reports that checkpoint id, and so every earlier
	// one, is durable. Notifications may be skipped or repeated: an
	// implementation must be idempotent and must treat a notification for id
	// as covering every id before it. Work done here (pruning a journal)
	// must never be needed for correctness: the process may die first.
	CheckpointCompleted(ctx context.Context, id ID) error
}
