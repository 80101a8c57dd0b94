// Package state keeps keyed state that is part of a partition's
// checkpoints: a value per key ([Value], Flink's ValueState, a Kafka
// Streams key-value store) or a map per key ([Map], Flink's MapState),
// each entry with an optional TTL. After a crash or when another instance
// takes the partition over, the state and the Kafka offsets go back to the
// same checkpoint, so every record changes the state exactly once.
//
// # Tour
//
// Create one state per partition, in the function that builds the
// partition's chain, and add it to the chain under the name that keys its
// state in every checkpoint; the source restores it from the partition's
// newest checkpoint before the first record, on whichever instance the
// partition is assigned to, and closes it when the chain ends:
//
//	kafkasource.Chains(store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
//		opened, err := state.NewValue[string, time.Time](state.String{}, state.Time{},
//			state.Options{TTL: 30 * 24 * time.Hour})
//		if err != nil {
//			return nil, err
//		}
//		if err := c.Add("opened", opened); err != nil {
//			return nil, err
//		}
//		...
//
// Then read and write it from the chain, passing the record's time:
//
//	switch ev.Action {
//	case "opened":
//		err = opened.Put(ev.PR, ev.At, m.Time)
//	case "review_submitted":
//		if at, ok := opened.Get(ev.PR, m.Time); ok { // the first review
//			opened.Delete(ev.PR, m.Time)
//			// emit ev.At.Sub(at)
//		}
//	}
//
// Keys and values reach snapshots through a [Codec]: [String], [Bytes],
// [Int64], [Uint64], [Float64], [Bool], [Time] and [Duration] are built in;
// a struct needs a codec of a few lines (see the examples). Keys are any
// comparable type.
//
// # TTL semantics
//
// As dedup's, after Flink's StateTtlConfig:
//
//   - Options.TTL 0 (the default) keeps entries until they are deleted:
//     right for a bounded key set, a leak for an unbounded one.
//   - UpdateType OnCreateAndWrite (default): an entry lives TTL after its
//     last Put. OnReadAndWrite also extends it on every Get that finds it.
//   - Visibility NeverReturnExpired (the only one): an expired entry is
//     absent even before cleanup removes it.
//   - Time: EventTime (default: the clock is the largest record time passed
//     in, kept in snapshots) or ProcessingTime (Options.Now).
//
// Expired entries are removed incrementally: each call removes up to
// Options.CleanupBudget entries, found in expiry order without a scan;
// Cleanup removes more. Snapshots leave out entries expired at the clock.
//
// # Memory and speed
//
// Entries live in a Go map from the key to the value and its expiry (8
// bytes), plus, with a TTL, a queue item per write (the key and 8 bytes),
// rebuilt when stale items outnumber the entries twice over. Measured at a
// million string keys with int64 values: 1.2 to 1.5 times the memory of a
// plain map[string]int64 and 1.6 to 1.8 times its time per write;
// BENCHMARKS.md has the figures beside the map and dedup.
//
// # Snapshot format
//
// A snapshot (version 1, little endian) is a 28-byte header (magic
// "EOSTATE\x00", version, kind: Value or Map, clock in Unix nanoseconds,
// entry count), the live entries in increasing order of their encoded keys
// (uvarint length and key bytes, 8-byte expiry in Unix nanoseconds or 0,
// uvarint length and value bytes), and a CRC-32C of everything before it.
// A Map's key is the key's length, the key and the user key. Only live
// entries are written, in one order, so a state has exactly one encoding.
// Every snapshot holds the whole state: its cost is linear in the number
// of entries, with a sort. Taken asynchronously (Value and Map are
// checkpoint.AsyncParticipants), the barrier holds the chain only to copy
// the map, and the encoding and sort run beside the chain. There are no
// incremental snapshots yet; for tens of millions of keys that only need
// membership, dedup with Options.Incremental writes only what changed.
//
// # Concurrency
//
// A Value or Map belongs to one partition's processing chain and is called
// from that goroutine only, as checkpoint.Participant requires. Metric
// collection may run concurrently.
//
// # Errors
//
// Match them with errors.Is:
//
//   - [ErrInvalidOptions] is returned by NewValue and NewMap for an invalid
//     option or a missing codec.
//   - [ErrFull] is returned by Put for a new entry while Options.MaxKeys
//     live entries are stored, and by Restore for a snapshot holding more.
//   - [ErrClosed] is returned by every method called after Close.
//   - [ErrCorrupt] is wrapped by the error Restore returns for a truncated,
//     corrupt or non-canonical snapshot, or one whose keys or values the
//     codecs refuse.
//   - [ErrUnsupportedVersion] is wrapped by the error Restore returns for a
//     snapshot of an unknown format version.
//   - [ErrIncompatible] is wrapped by the error Restore returns for the
//     snapshot of another kind of state (a Map's restored into a Value, or
//     the other way round).
//   - [ErrAmbiguousKey] is wrapped by the error Snapshot returns when two
//     stored keys encode to the same bytes (a NaN key, a time.Time key in
//     two locations, a codec that loses information): no snapshot could
//     restore both.
//
// # Guarantees
//
// Given at-least-once input from Kafka and restore from the checkpoint
// whose offsets the source resumes from, the state after a restore is the
// state at that checkpoint's barrier: it reflects exactly the records
// before it, so after the replay of the records since, every record has
// changed the state once. With EventTime, what a replay reads is what the
// first run read. This assumes that every record of a key lands in the
// same partition, and that the chain's other stages are deterministic or
// idempotent.
//
// An asynchronous snapshot (SnapshotAsync) holds exactly the entries at
// its barrier and returns the bytes Snapshot returns there, whatever the
// chain does meanwhile, provided stored values are not modified in place
// (checkpointtest.TestAsyncParticipant checks it).
//
// Snapshot returns the same bytes for the same state, whatever the order
// of the writes or the process, or fails with ErrAmbiguousKey when two
// stored keys share an encoding (then no checkpoint is taken). Restore
// checks the whole snapshot (checksum, order, expiries, lengths, and that
// each key and value decodes and encodes back to the same bytes) before it
// replaces anything: a truncated, corrupt, foreign or non-canonical
// snapshot is refused with an error wrapping ErrCorrupt,
// ErrUnsupportedVersion, ErrIncompatible or ErrFull, and loads nothing. A
// failed Put stores nothing.
package state
