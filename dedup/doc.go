// Package dedup remembers the event keys a partition has seen, for a TTL, and
// tells first sights from duplicates. It is stage 2 of the pipeline: keyed
// state in the style of Flink's ValueState with StateTtlConfig, snapshotted
// in every checkpoint so that after a restart the seen keys and the Kafka
// offsets go back to the same point.
//
// # Tour
//
// Build a key from its parts with AppendKey (length-prefixed, so "a:b"+"c"
// and "a"+"b:c" differ), then ask Observe:
//
//	d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
//	...
//	key = dedup.AppendKey(key[:0], orgID, source, eventID)
//	first, err := d.Observe(key, m.Time) // the Kafka record's timestamp
//	if err != nil {
//		return err // nothing recorded: fail the partition, never drop
//	}
//	if !first {
//		return nil // duplicate: drop it (counted in exactlyonce.dedup.dropped)
//	}
//	// pass the event on
//
// Which time to pass: the Kafka record's timestamp (kafka.Message.Time, set
// when the gateway published the delivery), not the event's own time from
// its payload. The TTL has to outlast the gap between two deliveries of one
// event (a provider's retries, a redelivery by hand), and record timestamps
// measure exactly that gap; an event's own time says when something
// happened at the provider, which may be long before its delivery (a push
// of week-old commits, a redelivered old event), and an entry stamped with
// it expires as soon as newer events move the clock past it, so its
// duplicates pass. Record timestamps are in Kafka, so a replay decides the
// same.
//
// A consumer that handles records in batches (a Kafka fetch) decides a whole
// batch with ObserveBatch: same answers and same state as one Observe per
// record, about twice as fast on large tables, because it reads the table
// slots of several keys before deciding any of them and their cache misses
// overlap.
//
// A Deduplicator is a checkpoint.Participant: Snapshot returns its state at
// the barrier, Restore loads one. There is one Deduplicator per Kafka
// partition, owned by that partition's processing chain, so a partition's
// state moves to another instance with its checkpoint.
//
// A large table changes little between two checkpoints: with
// Options.Incremental a checkpoint writes only the keys written since the
// previous one (see Incremental snapshots below), so its cost follows what
// changed, not the size of the state.
//
// # TTL semantics
//
// The TTL is required (there is no "0 means forever": state that is never
// cleaned grows without bound). It must cover the longest gap between two
// deliveries of one event, how long the provider retries and how late an
// operator may redeliver by hand, not how long Kafka retains data; see
// DefaultTTL. The semantics follow Flink's StateTtlConfig:
//
//   - UpdateType OnCreateAndWrite (default): an entry lives TTL after it was
//     written; finding a duplicate does not extend it. With a 24-hour TTL a
//     duplicate 23 hours later is caught, and one 25 hours after the first
//     delivery is not, however many came between. OnReadAndWrite also
//     extends on every duplicate.
//   - Visibility NeverReturnExpired (the only one): an expired entry is
//     absent even before cleanup removes it.
//   - Time: EventTime (default) or ProcessingTime; see TimeCharacteristic.
//     Expiries have one-second granularity and round up: an entry lives at
//     least TTL and less than TTL plus one second.
//
// Expired entries are removed incrementally, as with Flink's incremental
// cleanup: each Observe examines Options.CleanupBudget table slots, so no
// call stalls on a full sweep. Snapshots leave out the entries expired at
// the deduplicator's clock, as with Flink's full-snapshot cleanup. Call
// Cleanup when idle to remove more and to give memory back after a burst of
// keys expired; with ProcessingTime it reads Options.Now first, so keys
// that expired while the partition was quiet go too (and leave the next
// snapshot). Growing the table (when
// it is 80% full) rehashes it in the calling Observe; presize with
// Options.ExpectedKeys to avoid that. Restore leaves room for half as many
// keys again as it restored, so a restarted chain does not rehash the whole
// table on its first new key.
//
// An optional cap, Options.MaxKeys, makes Observe return ErrFull for new keys
// once reached. Nothing is ever evicted to make room.
//
// # Memory
//
// Keys are stored as 128-bit MurmurHash3 fingerprints in an ordered
// linear-probing table of 20-byte slots with no pointers: 25 to 38 bytes per
// stored key depending on where the table is in its growth cycle (25 when
// presized with Options.ExpectedKeys), against about 110 for a
// map[string]int64 of 53-byte keys. Tables of 8 MiB and more are advised to
// use transparent huge pages, since each lookup touches one random slot.
// Two distinct keys share a fingerprint with probability about n²/2¹²⁹ for
// n keys in one deduplicator (1.5e-21 at 10⁹ keys); the second would be
// dropped as a duplicate. Options.ExactKeys stores the key bytes too and
// tells such keys apart, at about the memory of a map.
//
// # Snapshot format
//
// A full snapshot (version 1, little endian) is a 28-byte header (magic
// "EODEDUP\x00", version, flags, clock in Unix nanoseconds, entry count),
// the live entries in increasing fingerprint order (16-byte fingerprint,
// 4-byte expiry in Unix seconds, and with ExactKeys a uvarint length and the
// key), and a CRC-32C of everything before it. Only live entries are written
// and their order is fixed, so a state has exactly one encoding: the same
// state gives byte-identical snapshots, whatever the insertion order, table
// size or process. Restore checks everything (checksum, order, expiries,
// lengths) before it replaces any state, and rejects a truncated, corrupt or
// non-canonical snapshot with an error wrapping ErrCorrupt. Expiries
// are absolute, so restoring into a Deduplicator with another TTL keeps
// each entry's expiry. Snapshot and restore are linear in the number of
// keys, with no sort. An incremental snapshot is a version 2 manifest (see
// Incremental snapshots) whose base and deltas are version 1 snapshots.
//
// # Incremental snapshots
//
// With Options.Incremental, and attached to a checkpoint.Coordinator (it is
// a checkpoint.ObjectParticipant), the deduplicator keeps a log of the table
// writes since the last checkpoint (new keys, keys written again after they
// expired, and with OnReadAndWrite extended ones): 20 bytes per write, plus
// the key with ExactKeys. Snapshot sorts the log, keeps each entry's largest
// expiry and the entries live at the clock, and streams them to storage as a
// delta object in the version 1 format (the first checkpoint of a run that
// did not restore an incremental one writes a base: every live entry; one
// that started empty writes its log as that base, after the barrier, so
// only a restore of a full snapshot makes a barrier read the table); it
// returns a version 2 manifest naming the base and the deltas, each with its
// size, CRC-32C and entry count. Like Flink's incremental RocksDB
// checkpoints, and Kafka Streams' changelog, the bytes a checkpoint writes
// follow what changed: at 10 million keys with 1% changed, about 2 MB
// instead of 200 MB.
//
// A compaction merges the base and the deltas into a new base when the
// deltas outweigh half the base or number Options.MaxDeltas. It runs in a
// goroutine of the deduplicator, reading the objects (never the table, which
// the chain goes on changing), and the next checkpoint after it finished
// names the new base: no barrier waits for it, unless the chain reaches four
// times MaxDeltas deltas while it runs. Close stops it and waits. The
// coordinator deletes the objects no retained checkpoint needs.
//
// Restore of a manifest reads the base and the deltas, checks each against
// the manifest (size, CRC, entry count, flags, clocks in order) and in
// itself (as a version 1 snapshot), and merges them: every entry with its
// largest expiry, less those expired at the manifest's clock. An expiry
// never needs a record: an entry's expiry only grows, and one that has
// passed at the clock is dropped, so no expired key comes back. The
// restored state is the one a full snapshot at the same barrier holds. A
// Deduplicator restores full snapshots and manifests alike, whatever its
// Options.Incremental.
//
// # Concurrency
//
// A Deduplicator is not safe for concurrent use. It belongs to one
// partition's processing chain and is called from that goroutine only, as
// checkpoint.Participant requires. Metric collection may run concurrently.
//
// # Errors
//
// Match them with errors.Is:
//
//   - [ErrInvalidOptions] is returned by New for a missing TTL or an invalid
//     option.
//   - [ErrFull] is returned by Observe when a new key arrives while
//     Options.MaxKeys entries are stored, and by Restore for a snapshot
//     holding more.
//   - [ErrTimeOutOfRange] is returned by Observe when the clock plus the TTL
//     lies past 2106-02-07 (expiries are stored as 32-bit Unix seconds).
//   - [ErrKeyTooLong] is returned by Observe in exact mode for a key longer
//     than 16 MiB - 1.
//   - [ErrClosed] is returned by every method called after Close.
//   - [ErrCorrupt] is wrapped by the error Restore returns for a truncated,
//     corrupt or non-canonical snapshot.
//   - [ErrUnsupportedVersion] is wrapped by the error Restore returns for a
//     snapshot written by a newer, unknown format version.
//   - [ErrIncompatible] is returned by Restore when a snapshot of
//     fingerprints only is restored into a deduplicator with ExactKeys.
//
// # Guarantees
//
// Given at-least-once input from Kafka and restore from the checkpoint whose
// offsets the source resumes from, every key passes Observe as first-seen at
// most once within its TTL, counted across restarts: the snapshot holds
// exactly the keys recorded before the barrier, and with EventTime the
// replay after a restore gives the same decisions as the first run. This
// assumes:
//
//   - every delivery of an event yields the same key and lands in the same
//     partition (key the Kafka records by that key or a prefix of it);
//   - redeliveries arrive within the TTL of the first one (counted on the
//     deduplicator's clock);
//   - downstream stages are deterministic or idempotent, since an event
//     passed on before a crash is passed on again after the restore.
//
// Errors never half-apply: a failed Observe records nothing, and a failed
// Restore loads nothing.
//
// Incremental snapshots hold the same state as full ones at the same
// barrier (tested against full snapshots through random sightings,
// expiries, checkpoints, compactions and restarts, and by killing a process
// with SIGKILL while it writes a delta or a compaction's base: the newest
// checkpoint then restores exactly the state of an uncrashed run at its
// offset). A delta is durable before the checkpoint naming it, so a crash
// never leaves a checkpoint naming a missing object; a damaged, truncated,
// missing or swapped base or delta fails Restore with an error wrapping
// ErrCorrupt or checkpoint.ErrNotFound, and loads nothing. Full snapshots
// of earlier releases (version 1) restore as before.
//
// Asynchronously (checkpoint.AsyncParticipant), the barrier hands over the
// change log of the keys recorded before it and the delta is written while
// the chain goes on logging into a second buffer: the delta holds exactly
// the keys before the barrier, the same bytes the synchronous Snapshot
// writes, and is still durable before the checkpoint file names it (the
// coordinator writes the file after the pending part returned). A delta
// that was not written (a failed or aborted checkpoint) goes back into the
// next one, so no key is dropped from the chain of deltas. The dedup
// incremental, model and kill tests take every checkpoint this way.
package dedup
