// Package journal is the sink's write-ahead journal in a checkpoint.Storage:
// the batch intents, their acks, the owner record that fences a stale owner
// and the prune point. Package sink describes the protocol; this package is
// internal because only the ClickHouse backend (sink/chsink) drives it.
//
// NextStep is the replay's per-row decision over the loaded intents: which
// rows after a crash are re-cut into which journaled batch. It knows nothing
// of ClickHouse, so every case is tested here without a server.
//
// # Guarantees
//
// With a Storage that has read-after-write consistency and conditional
// writes (checkpoint.Storage's Create and Replace):
//
//   - One owner per epoch: Claim raises the epoch by compare-and-swap, so of
//     instances claiming at once each gets an epoch of its own and the last
//     owns the journal.
//   - An intent that Record returned nil for is seen by every later owner:
//     Record creates the intent and then re-reads the owner record, so an
//     instance that passed the check wrote before the next Claim, whose Load
//     follows it. A fenced owner gets sink.ErrFenced and must not insert.
//   - Nothing an owner wrote is overwritten by another: intents and acks are
//     create-only and named with their writer's epoch; the owner record is
//     the only object rewritten, and only by compare-and-swap.
//   - Pruning loses nothing: the prune point is raised before any entry is
//     deleted, so a restore from a checkpoint older than a deletion fails
//     with sink.ErrStaleCheckpoint rather than replaying a partial journal,
//     and a failed delete is retried by a later Prune
//     (sink.ErrPruneDeferred).
//   - Replays are deterministic: Token depends only on the journal's
//     incarnation, the source and the batch's positions, and NextStep only on its
//     arguments, so a replay after any crash re-cuts the same batches under
//     the same tokens.
package journal
