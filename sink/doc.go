// Package sink holds the ClickHouse-independent half of the exactly-once
// sink: source positions, the write-ahead journal that fixes batch
// boundaries and deduplication tokens, and the errors shared by backends.
// The ClickHouse backend, which imports ch-go, is package sink/chsink.
//
// # Tour
//
// A processing chain hands each row to its sink with a Position: the offset
// of the Kafka record that produced it and the row's index within that
// record. Positions grow strictly, and replaying the same records after a
// restore yields the same rows at the same positions.
//
// Before a batch is inserted, the sink records an Intent in a Journal: the
// source (topic, partition), table, first and last position, row count,
// content hash and the insert_deduplication_token (see Journal.Token). After
// ClickHouse acknowledges the insert, the ack rides on a later batch's
// intent (Journal.AckLater), so a batch costs one journal write. After a
// restart the new owner loads every intent after the restored checkpoint and
// cuts the replayed rows into exactly those batches: an acked batch is
// skipped, an unacknowledged one (the last ones before the crash, whether or
// not they landed) is re-inserted with its token, so ClickHouse drops it if
// it already has it. Only then does normal
// batching resume. A replayed batch whose content hash differs from the
// journal returns a *ContentMismatchError: reusing the token would silently
// keep one version. A backend may instead, for idempotent tables, insert the
// new content under ReinsertToken and journal it as an Intent that
// Supersedes the old one; Load then returns the superseding entry.
//
// # Where the journal lives, and why
//
// In checkpoint.Storage, beside the checkpoints, not in a ClickHouse table:
// the checkpoint's storage is by contract visible to whichever instance takes
// a partition over (the same requirement a restore already has), Put is
// atomic and durable, and List/Get after Put is read-after-write consistent.
// A plain MergeTree table gives none of that without FINAL and quorum
// settings, and a KeeperMap table is not available everywhere. The journal
// and the insert need not be atomic: the intent is written first, so an
// intent without an insert is harmless (the replay inserts it) and an insert
// without an ack is deduplicated by its token.
//
// # Fencing
//
// Journal.Claim raises an owner epoch; Journal.Record writes an intent and
// then re-reads the owner record, returning ErrFenced if another instance
// claimed the partition. So an old owner that passed the check had written
// its intent before the new owner claimed, and the new owner's Load sees it
// and re-inserts it with the same token: a paused old owner that resumes and
// sends that insert late is deduplicated. An intent written after the
// takeover fails the check and is never inserted; Load drops such stale
// unacknowledged entries when a newer epoch's batch overlaps them.
//
// # Guarantees
//
// With deterministic processing, a Storage with read-after-write
// consistency, and a table whose deduplication window covers the blocks
// inserted between an intent and its re-insert, every row reaches the table
// exactly once, and through deduplicate_blocks_in_dependent_materialized_views
// every dependent materialized view sees it once. Residual window: an old
// owner paused after its ownership check for longer than the table's
// deduplication window (in blocks, or seconds for replicated tables) can
// insert a duplicate when it resumes; the window guard in chsink reports the
// converse case (a replay past the window) instead of inserting blindly.
// Pruning (on checkpoint completion) never affects correctness; its prune
// point rides on the next intent, entries are deleted only up to a point
// already durable, and restoring a checkpoint older than a durable prune
// point fails with ErrStaleCheckpoint.
package sink
