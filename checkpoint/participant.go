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

// AsyncParticipant is a Participant whose snapshot has a short synchronous
// part, taken at the barrier, and an asynchronous part that makes it durable
// while the chain goes on with the records after the barrier: Flink's
// synchronous and asynchronous snapshot phases. The coordinator finds the
// interface by type assertion, as database/sql finds a driver's optional
// interfaces; a participant without it is snapshotted with Snapshot, at the
// barrier, as before.
//
// The coordinator calls SnapshotAsync instead of Snapshot, from the chain's
// goroutine, at the barrier. It calls the returned PendingSnapshot exactly
// once, from a goroutine of its own, while the chain processes later
// records, and CheckpointCompleted from that goroutine too, after the
// checkpoint file is saved: an AsyncParticipant synchronises its processing
// with both. It never calls SnapshotAsync again before the previous
// PendingSnapshot returned (one checkpoint of a chain is pending at a time),
// nor Restore while one runs.
type AsyncParticipant interface {
	Participant
	// SnapshotAsync takes what belongs to checkpoint id: every record
	// before the barrier and none after. It returns quickly, without
	// waiting for anything to become durable; an error aborts the
	// checkpoint as Snapshot's does (ErrDeclined included). Records after
	// the barrier never reach the returned part's state.
	SnapshotAsync(ctx context.Context, id ID) (PendingSnapshot, error)
}

// PendingSnapshot is the asynchronous part of a snapshot: it returns once
// everything the synchronous part took is durable (a sink's last insert
// acknowledged, a delta written), with the state Snapshot would have
// returned at the barrier, or an error, which aborts the checkpoint: no
// file is written and no offset moves. When the checkpoint was aborted
// before (another participant failed), it is still called, with a
// cancelled ctx, so that it can let go of what it holds; it then returns
// promptly and its result is ignored.
type PendingSnapshot func(ctx context.Context) ([]byte, error)

// Expirer is an optional interface of a Participant whose snapshot stays
// good only for a while after its barrier: a two-phase-commit sink whose
// prepared transaction the broker aborts once it is older than its
// timeout (kafkasink). The coordinator finds it by type assertion.
//
// Just before the coordinator saves checkpoint id (every pending part has
// returned, nothing is written yet), it calls Expired of every participant
// implementing it, from the goroutine that saves. An error aborts the
// checkpoint exactly as a failed pending part does: no file is written, no
// offset moves, and the chain restarts from its last completed checkpoint,
// whose replay writes the records again. Expired returns an error when
// the save and the CheckpointCompleted after it might not both finish
// before the deadline, with a margin of its own; it must return promptly
// (it may abort the participant's pending work, best effort, bounded by
// ctx).
type Expirer interface {
	Expired(ctx context.Context, id ID) error
}

// Resolver is an optional interface of a Participant whose checkpointed
// state names output that can be lost after the checkpoint was saved: a
// Kafka transaction the checkpoint recorded, which the broker aborts if it
// outlives its timeout before a commit (the process paused or down between
// the save and the commit), or which the broker forgets with its
// transactional id. The coordinator finds it by type assertion.
//
// Attach calls Resolve with the participant's state in the checkpoint it
// is about to restore (nil when the checkpoint holds none), before it
// restores any participant from that checkpoint. Resolve completes the
// output if it can (commits the transaction; repeating that is harmless).
// An error wrapping ErrOutputLost says the output is gone for good: Attach
// then tries the next older retained checkpoint, whose replay writes that
// output again, and restores every participant from the first checkpoint
// every Resolver accepts. Any other error fails Attach, as a Restore error
// does.
type Resolver interface {
	Resolve(ctx context.Context, state []byte) error
}

// Starter is an optional interface of a Participant that must act once
// the chain's starting point is decided, before its first record, whether
// the chain was restored or starts fresh: a transactional sink fences the
// producers of the partition's earlier owners (kafkasink starts its
// producer, which aborts their open transaction and refuses their
// commits). Restore alone cannot do it: it is not called on a fresh
// start. The coordinator finds it by type assertion.
//
// Attach calls Start of every participant implementing it, in name order,
// after every Restore (or, on a fresh start, once it found no checkpoint),
// before it returns. An error fails Attach, as a Restore error does.
type Starter interface {
	Start(ctx context.Context) error
}
