// Package sink holds the ClickHouse-independent half of the exactly-once
// sink: source positions, the journal's entries (Intent) and layout, the
// protocol of the write-ahead journal that fixes batch boundaries and
// deduplication tokens, and the errors shared by backends. The ClickHouse
// backend, which imports ch-go, is package sink/chsink; the journal itself
// is internal to this module (sink/internal/journal), driven by the backend.
// The Kafka backend, sink/kafkasink, needs no journal: Kafka transactions
// give it a two-phase commit (records sent in a transaction prepared at the
// barrier, committed when the checkpoint completes), so nothing in this
// package applies to it.
//
// # Tour
//
// A processing chain hands each row to its sink with a Position: the offset
// of the Kafka record that produced it and the row's index within that
// record. Positions grow strictly, and replaying the same records after a
// restore yields the same rows at the same positions.
// Rows that no single record maps to one for one (a window's rows, which a
// Tick may emit between records) take their positions from a Cursor, a
// participant of the chain so that positions continue after a restore.
//
// Before a batch is inserted, the sink records an Intent in its journal: the
// source (topic, partition), table, first and last position, row count,
// content hash and the insert_deduplication_token (derived from the
// journal's incarnation, the source and the positions). After ClickHouse
// acknowledges the insert, the ack rides on a later batch's intent
// (AckedThrough), so a batch costs one journal write. After a
// restart the new owner loads every intent after the restored checkpoint and
// cuts the replayed rows into exactly those batches: an acked batch is
// skipped, an unacknowledged one (the last ones before the crash, whether or
// not they landed) is re-inserted with its token, so ClickHouse drops it if
// it already has it. Only then does normal
// batching resume. A replayed batch whose content hash differs from the
// journal returns a *ContentMismatchError: reusing the token would silently
// keep one version. A backend may instead, for idempotent tables, insert the
// new content under ReinsertToken and journal it as an Intent that
// Supersedes the old one; a replay then uses the superseding entry.
//
// # Where the journal lives, and why
//
// In checkpoint.Storage, beside the checkpoints, not in a ClickHouse table:
// the checkpoint's storage is by contract visible to whichever instance takes
// a partition over (the same requirement a restore already has), writes are
// atomic and durable, reads after writes are consistent, and its conditional
// writes (Create, Replace) give every process one order of the writes to a
// name, on one machine (FSStorage) or many (an S3 bucket). A plain MergeTree
// table gives none of that without FINAL and quorum settings, and a KeeperMap
// table is not available everywhere. The journal and the insert need not be
// atomic: the intent is written first, so an intent without an insert is
// harmless (the replay inserts it) and an insert without an ack is
// deduplicated by its token.
//
// # Fencing
//
// A new owner claims the journal by raising the owner epoch with a
// conditional write of the owner record, so each epoch has exactly one owner
// however many instances claim at once. Recording an intent creates it under
// a name that carries its epoch (two owners never write the same name) and
// then re-reads the owner record, failing with ErrFenced if another instance
// claimed the partition. So an old owner that passed the check had written
// its intent before the new owner claimed, and the new owner's load of the
// journal sees it and re-inserts it with the same token: a paused old owner
// that resumes and sends that insert late is deduplicated. An intent written
// after the takeover fails the check and is never inserted; loading drops
// such stale unacknowledged entries when a newer epoch's batch overlaps
// them. Nothing else is shared state: acks of replayed batches are
// create-only records of the acking epoch, and the prune point lives in the
// owner record, raised by compare-and-swap, so a fenced owner can neither
// move it nor delete entries.
//
// # Errors
//
// Match them with errors.Is (the sentinels) or errors.As (the types):
//
//   - [ErrFenced] reports that another instance claimed the partition's
//     journal: this instance lost the partition and must not insert for it
//     again.
//   - [ErrOutOfOrder] reports a row whose position is not after the previous
//     row's.
//   - [ErrNondeterministic] is matched by *ContentMismatchError: replayed
//     rows differ from the journaled batch that covers their positions.
//   - [ErrCorrupt] reports journal entries that cannot be reconciled
//     (undecodable, or overlapping batches that were both inserted).
//   - [ErrUnsupportedVersion] reports a journal entry of a format version
//     this build does not read (a newer program wrote it).
//   - [ErrJournalMissing] reports that a snapshot expects journal entries
//     that the journal no longer holds: the journal storage is not the one
//     the snapshot was taken against, or was rolled back.
//   - [ErrStaleCheckpoint] reports a restore from a checkpoint older than
//     one whose completion already pruned the journal: batches that the
//     replay would need were deleted.
//   - [ErrPrunedJournal] reports a fresh start (no checkpoint restored) over
//     a journal that was already pruned: every checkpoint of the partition
//     was lost, and the batches the source would replay are partly deleted
//     from the journal, so they would be cut and inserted again.
//   - [ErrReplayInProgress] reports a snapshot whose barrier falls inside a
//     journaled batch that is being replayed: the batch can only be written
//     whole, with its token.
//   - [ErrOutsideDedupWindow] is matched by *OutsideWindowError.
//   - [ErrClosed] is returned by calls on a closed sink.
//   - [ErrPruneDeferred] is wrapped by the journal's prune error when
//     pruning could not finish (a delete or the prune point's write failed):
//     nothing is lost, the entries are kept and the next Prune tries again.
//   - [ContentMismatchError] describes a journaled batch whose replayed rows
//     differ from what was journaled: processing is not deterministic.
//   - [OutsideWindowError] reports that a journaled batch whose insert
//     outcome is unknown can no longer be deduplicated by ClickHouse: more
//     blocks (or more time) went by than the table's deduplication window
//     keeps.
//
// # Guarantees
//
// With deterministic processing, a Storage with read-after-write
// consistency and conditional writes, and a table whose deduplication
// window covers the blocks inserted between an intent and its re-insert,
// every row reaches the table exactly once, and through
// deduplicate_blocks_in_dependent_materialized_views every dependent
// materialized view sees it once (chsink refuses a view target whose window
// is smaller than the replay depth times the views that feed it). Residual
// window: an old owner paused after its ownership check for longer than the
// table's deduplication window (in blocks, or seconds for replicated tables)
// can insert a duplicate when it resumes; the window guard in chsink reports
// the converse case (a replay past the window) instead of inserting blindly.
// Pruning never affects correctness: it runs only through the oldest
// checkpoint the store keeps, so restore can fall back to any kept
// checkpoint; the prune point is durable before anything is deleted, only the
// current owner can raise it, and a failed delete is retried later
// (ErrPruneDeferred, never fatal). Restoring a checkpoint older than the
// prune point fails with ErrStaleCheckpoint, and a fresh start (no
// checkpoint) over a pruned journal fails with ErrPrunedJournal unless the
// backend is told to allow it.
package sink
