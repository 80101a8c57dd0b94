// Package checkpoint takes consistent snapshots of a stream processor's
// state together with the input position they match, and restores them after
// a crash or when a partition moves to another instance.
//
// # Tour
//
// A Participant (dedup, window, sink) is an operator whose state is part of
// every checkpoint. Processing is partitioned by Kafka topic-partition: each
// partition has its own chain of participants, run by one goroutine.
//
// Storage keeps named blobs durably. FSStorage is the default (temp file,
// fsync, rename, fsync of the directory); MemoryStorage is for tests. The
// checkpointtest package is the conformance suite every Storage runs.
//
// Store lays checkpoints out in a Storage and finds the newest intact one,
// skipping a corrupt or partial one with a logged reason. Coordinator
// triggers checkpoints on an interval (Run) and on demand (Trigger), and
// runs the protocol of each chain through a Task:
//
//	storage, _ := checkpoint.NewFSStorage("/var/lib/pipeline")
//	store, _ := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
//	coord, _ := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Second})
//
//	// in the chain goroutine of partition p:
//	task, _ := coord.Attach(ctx, p, map[string]checkpoint.Participant{"dedup": d, "sink": s})
//	defer task.Detach()
//	next := task.Restored().NextOffset // or the start policy when Restored is nil
//	for {
//		select {
//		case b := <-task.Barriers(): // between two records: an exact position
//			if err := task.Begin(ctx, b, next, meta, commitOffset); err != nil { return err }
//		case err := <-task.Failures(): // a pending checkpoint failed
//			return err
//		case rec := <-records:
//			process(rec); next = rec.Offset + 1
//		}
//	}
//
// The kafkasource subpackage runs exactly this loop for every partition of a
// kafka-go consumer group; most programs use it and never see a Task.
//
// A Chain declares a partition's participants once, each under the name
// that keys its state: NewChain(store, p), then Add(name, participant)
// (an empty, taken or nil one is refused with ErrInvalidOptions), and
// Participants is the map Attach takes. The chain hands its participants
// what they would otherwise repeat: its Partition, the Store's Storage
// (where a sink journals beside the checkpoints) and Keep (so the journal
// keeps what restoring any kept checkpoint needs). chsink.Open and
// windowsink.Open take a Chain and register the sink they return;
// kafkasource.Chains builds one per assigned partition.
//
// # Barriers and the protocol
//
// A barrier is delivered to a chain in-band: the chain goroutine takes it
// between two records, so the snapshot reflects every record before the
// barrier and none after it, and the checkpoint's NextOffset is exact. A
// checkpoint has a synchronous part, which holds the chain, and an
// asynchronous part, which runs while the chain goes on with the records
// after the barrier, as Flink's snapshots do. For checkpoint N of a
// partition, Task.Begin
//
//  1. in the chain goroutine, at the barrier, takes every participant's
//     part: an AsyncParticipant's SnapshotAsync(N) cuts what belongs to N
//     (a sink seals its batch and starts its insert) and returns at once;
//     any other participant's Snapshot(N) returns its state (a synchronous
//     sink flushes here). Begin returns and the chain goes on;
//  2. in a goroutine of the task, waits for every pending part (the sink's
//     insert acknowledged), asks every Expirer whether its snapshot is
//     still good (a Kafka transaction not too close to its timeout), then
//     writes one file holding N, the next offset, every participant's
//     state, the time, the duration and the consumer-group generation,
//     atomically (its fsyncs included);
//  3. only then commits the next offset to the consumer group, for lag
//     monitoring, while the generation is current;
//  4. notifies every participant with CheckpointCompleted(N): an
//     AsyncParticipant from that goroutine, any other from the chain's at
//     its next barrier.
//
// One checkpoint of a chain is pending at a time, Flink's default: an
// interval barrier that comes while the previous checkpoint is pending is
// skipped (exactlyonce.checkpoint.skips), and a Trigger's barrier waits
// for it (exactlyonce.checkpoint.waits). Task.Checkpoint is Begin and the
// wait for the rest, for a chain that checkpoints on its own.
//
// A failure in 1 or 2 aborts checkpoint N: nothing is written, no offset
// moves, and the error reaches the chain (from Begin, or on
// Task.Failures) and the Trigger caller. The chain restarts from the last
// completed checkpoint; records it processed after the barrier are
// processed again from there. A chain whose context ended (its partition
// was revoked) before step 2 writes nothing either. A participant that is
// healthy but cannot snapshot at this barrier (a sink in the middle of a
// batch it must write whole) returns an error wrapping ErrDeclined:
// checkpoint N is skipped in the same way, but the chain goes on and the
// next barrier tries again.
//
// # Snapshots that expire, output that is lost
//
// A two-phase-commit sink's snapshot names a Kafka transaction that the
// broker aborts once it outlives its timeout. Such a participant
// implements Expirer: just before the save, after every pending part
// returned, it can refuse (ErrExpired) when the save and its commit could
// not finish in time; checkpoint N is then aborted like a failed pending
// part, and the chain restarts from its last completed checkpoint
// (exactlyonce.checkpoint.expired). It also implements Resolver: a process
// paused or down between the save and the commit may find the
// transaction aborted at restore, so Attach first asks every Resolver to
// complete the output of the checkpoint it is about to restore, and
// passes over a checkpoint whose output a Resolver reports lost
// (ErrOutputLost) for the next older retained one
// (exactlyonce.checkpoint.restore.fallbacks). Every participant is then
// restored from that older checkpoint and the replay from its NextOffset
// writes the lost output again. For the other participants this is the
// restore of an older checkpoint, as after a corrupt newest one: dedup
// decides the replayed records from the older checkpoint's keys, as it
// did the first time; chsink's journal reaches back to the oldest of the
// Keep checkpoints, so the replayed batches carry their journaled tokens
// and ClickHouse drops what it holds already. The chain's next
// checkpoint takes the lost one's ID (and, in the same generation, its
// file name).
//
// A participant that must act before the chain's first record whether it
// was restored or starts fresh implements Starter: Attach calls Start
// last (kafkasink starts its producer there, which fences a revoked owner
// still running; Restore is not called on a fresh start).
//
// Each checkpoint records its Parent: the checkpoint its chain had
// restored, or completed last, before its barrier (0 for a chain that
// started fresh), whose output was confirmed intact then. When every
// retained checkpoint's output is lost, the oldest one's Parent decides:
// 0, and the chain starts fresh, as the lineage did; any other, and
// Attach fails naming the missing parent, since a fresh start would skip
// or repeat input. Retention never deletes the parent of the checkpoint
// just saved, so checkpoints that are saved and then lose their output
// (one checkpoint retried under several generations) cannot push the
// last good one out.
//
// # Layout: one file per partition and checkpoint
//
//	<prefix>/<topic>/<partition>/<id, 20 digits>-<generation, 10 digits>.ckpt
//
// Checkpoints are per partition, not per instance, because state is per
// partition and partitions move between instances of a consumer group: the
// new owner of a partition lists that partition's directory and restores
// its newest checkpoint, whoever wrote it, without reading anyone else's
// state. Each partition's chain checkpoints independently, so a slow
// partition delays no other one. IDs grow per partition and continue from
// the restored checkpoint. If a revoked owner still finishes a write while
// the new owner writes the same ID, the later generation sorts first; both
// files are consistent (state and offset of the same barrier), which is all
// restore needs.
//
// A revoked owner that does not know it yet (a process paused past its
// consumer-group session) can go on past the new owner's first checkpoint,
// and under a larger ID, since its declined barriers used IDs too. Its
// save is refused with ErrSuperseded when the partition holds a checkpoint
// of a later generation above the one the chain restored, and a save that
// raced the new owner's (checked before it, written after) is skipped at
// restore: a checkpoint is passed over when a later generation's
// checkpoint sorts between the start of its lineage (followed through
// Parent within its generation) and it. The file format (see Encode) is a JSON header, the raw
// states and a CRC-32C, so a partial or bit-flipped file is detected and
// skipped. Store keeps the newest StoreOptions.Keep files per partition,
// and the parent of the newest saved (see above) wherever it sorts.
//
// # Incremental state: objects beside the checkpoint
//
// A participant whose state is large and changes little between two
// checkpoints (dedup with millions of keys) implements ObjectParticipant:
// it writes what changed since the last checkpoint as objects of its own,
//
//	<prefix>/<topic>/<partition>/objects/<participant>/<name>
//
// through Objects.Write (streamed to the Storage, CRC-32C computed on the
// way), and its Snapshot returns a small manifest naming them; the
// checkpoint file lists every object its states reference
// (Checkpoint.Objects). Objects are shared between checkpoints, as Flink's
// shared-state registry shares SST files: after each completed checkpoint
// the coordinator deletes the objects that none of the newest Keep
// checkpoints references and that are not awaiting a checkpoint still to
// come. A crash between writing an object and its checkpoint leaves garbage
// that the next run's first checkpoint deletes; restore skips a checkpoint
// whose objects are missing.
//
// # Shared storage
//
// For partitions to move between instances, all instances must use one
// Storage: a shared filesystem, or an object store (the s3storage
// subpackage). An object-store backend needs atomic whole-object Put (S3,
// GCS and Azure give it), read-after-write consistency for Get and List (S3
// has it since 2020), conditional writes for Create and Replace (S3's
// If-None-Match and If-Match), and names mapped to keys one to one; rename
// and directory fsync are not needed. Create and Replace are what fences a
// stale owner: the sink journal claims a partition by creating the next
// epoch's owner record, which exactly one instance can do.
//
// # The rule that makes replay safe
//
// After a restore, the records after the checkpoint are processed again.
// That yields the same state and the same output only if processing depends
// on nothing but the restored state and the records, in offset order: use
// event time carried in the records, never the wall clock, random numbers
// or lookups of mutable outside data. Participants' Snapshot must be
// deterministic, and a sink must be idempotent or transactional for rows
// written after the last checkpoint.
//
// # Errors
//
// Match them with errors.Is (the sentinels) or errors.As (the types):
//
//   - [ErrChainStopped] is returned for a checkpoint that a chain could not
//     take because it stopped first (its partition was revoked).
//   - [ErrUnknownState] is returned by Attach when the newest checkpoint
//     holds state for a participant name the chain does not have: loading
//     the rest would silently drop that state.
//   - [ErrDeclined] is wrapped by a Snapshot error of a participant that is
//     healthy but cannot snapshot at this barrier, for example a sink in the
//     middle of a batch it must write whole.
//   - [ErrOutputLost] is wrapped by a Resolver's error for a checkpoint
//     whose output is gone for good (its Kafka transaction was aborted):
//     Attach falls back to an older retained checkpoint.
//   - [ErrExpired] is wrapped by an Expirer's error: the checkpoint's
//     snapshot would no longer be good once saved, so it is not saved.
//   - [ErrSuperseded] is wrapped by the error of a checkpoint that was not
//     saved because a later owner of the partition (a consumer-group
//     generation after the chain's) has saved one since the chain's Parent:
//     the chain's ownership ended though it was not told yet (a process
//     paused past its session timeout).
//   - [ErrInvalidOptions] is wrapped by the errors NewStore and
//     NewCoordinator return for a missing argument or an invalid option.
//   - [ErrConflict] is wrapped by the error of a conditional write that
//     lost: Create over a name that holds data, Replace over a name whose
//     content is no longer the given Version (or that is gone).
//   - [ErrCorrupt] is wrapped by errors from Decode for bytes that are not a
//     whole, intact checkpoint: truncated or bit-flipped.
//   - [ErrInvalidName] is returned for a name that is not a slash-separated
//     path of non-empty [A-Za-z0-9._-] segments (the segments "." and ".."
//     are refused).
//   - [ErrNotFound] is returned by Storage.Get for a name that holds no
//     data.
//   - [ErrUnsupportedVersion] is wrapped by errors from Decode for a
//     checkpoint file of a format version this build does not read (a newer
//     program wrote it).
//   - [Error] describes a checkpoint that did not complete: nothing was
//     written and no offset moved.
//
// # Guarantees
//
//   - A checkpoint is durable before any offset it covers is committed to the
//     consumer group; a committed group offset never passes the newest
//     completed checkpoint. With the asynchronous part this still holds:
//     the commit runs after the file's save in the same goroutine, and one
//     checkpoint of a chain is pending at a time, so commits move forward.
//     The commit also follows the AsyncParticipants' CheckpointCompleted,
//     as Kafka's exactly-once commits offsets inside the transaction: the
//     group offset never passes output a kafkasink has yet to commit, so a
//     transaction the broker aborts under a paused process does not leave
//     the offset ahead of the checkpoint the restore falls back to. (A
//     participant notified at the next barrier, one without SnapshotAsync
//     or under Options.Synchronous, is notified after the commit.)
//   - Every checkpoint's states reflect exactly the records before its
//     NextOffset: restoring it and reading from NextOffset processes every
//     record at least once and every record's effect on state exactly once.
//     Every participant's part is taken at the barrier in the chain's
//     goroutine, so an AsyncParticipant's pending part holds what came
//     before the barrier and nothing after it (AsyncParticipant's
//     contract, which checkpointtest checks).
//   - A failed snapshot or write leaves the previous checkpoint as the
//     newest; nothing partial is ever restored. A pending part that fails,
//     or whose chain stopped, writes no file and moves no offset: the file
//     is written only after every pending part returned its state.
//   - No goroutine of a Task runs after Detach: it cancels a pending
//     checkpoint (written already, or not at all) and waits for it.
//   - Restore takes the newest intact checkpoint and logs why it skipped
//     newer ones; a checkpoint naming a missing object is not intact, nor
//     one whose output a Resolver reports lost (ErrOutputLost). Every
//     participant is restored from the same checkpoint, and only after
//     every Resolver accepted it. When every retained checkpoint's output
//     is lost, Attach starts fresh if the oldest of them descends from a
//     fresh start (Checkpoint.Parent 0; in a version 1 file, which does
//     not record it, ID 1), and otherwise fails (ErrOutputLost) naming
//     the parent that is no longer retained.
//   - Store.Save never deletes the saved checkpoint's parent, the newest
//     checkpoint its chain knew to be intact, whatever Keep says; its
//     objects stay with it. A
//     restore can therefore always fall back to it, unless another
//     process prunes it (a revoked owner still saving, see the objects
//     guarantee's assumption below).
//   - A checkpoint an Expirer refuses just before the save (ErrExpired)
//     writes no file and moves no offset.
//   - A chain whose partition holds a checkpoint of a later consumer-group
//     generation (Meta.Generation) than its own, with an ID above the
//     checkpoint the chain restored, saves nothing more: its checkpoint
//     fails with ErrSuperseded, writes no file, moves no offset and
//     notifies no participant (on memory, a directory and S3). Restore skips a checkpoint that a later
//     generation's checkpoint sorts between the start of its lineage and
//     it: the save of a revoked owner that raced the new owner's first
//     one. This assumes
//     generations grow; a consumer group created anew starts at 1 again
//     and goes on from the old group's newest checkpoint, unless that
//     checkpoint's output was lost and an older one restored, when a
//     checkpoint of the new group that the lost one sorts between can be
//     skipped at restore.
//   - An object (see ObjectParticipant) is deleted only after a checkpoint
//     completed, and only when none of the newest Keep checkpoints
//     references it and no checkpoint of this process still to be saved
//     can: a retained checkpoint never names a deleted object. This
//     assumes one writer per partition at a time (a revoked owner stops
//     before its next write, as kafkasource's chains do; ErrSuperseded
//     stops one that did not learn of its revocation, but only at its
//     next save).
//   - Store writes a checkpoint file as a stream (StreamPutter) from the
//     participants' states, with its CRC computed on the way: the states are
//     not copied into one file-sized buffer. The file format is version
//     2 (version 1 with the header's "parent"); files of version 1, of
//     earlier releases, read as before (their parent unknown), and the
//     optional "objects" member is absent when empty. A release before
//     this one skips a version 2 file as unreadable (ErrUnsupportedVersion):
//     do not roll back past it while its checkpoints are the newest.
//   - Storage's conditional writes fence: of concurrent Creates of one name,
//     from any process sharing the storage, exactly one succeeds; Replace
//     applies only over the Version it was given. The loser gets ErrConflict
//     and nothing changes. Any other error from a conditional write leaves
//     the outcome unknown (see Storage). FSStorage holds this on one machine
//     (link(2) and flock(2)); MemoryStorage within one process; the s3storage
//     subpackage across machines.
//   - FSStorage: a write that returned nil (Put, Create, Replace, Delete)
//     survives a crash of the machine; one cut by the crash is wholly there
//     or wholly absent. Tested by crashing an in-memory filesystem that
//     drops everything not fsynced at every step of a scenario.
//   - FSStorage: the temporary file of a writer that died mid-write is
//     removed by the next NewFSStorage on the directory, or List of its
//     directory; a live writer's never is, from any process (each writer
//     holds a flock(2) of its own until the rename, see TempLocker).
//     Tested with a writer killed with SIGKILL inside PutStream.
//
// docs/design/checkpoint.md names the test that holds each of these.
//
// What it assumes: participants keep the Participant contract (the sink
// flushes in Snapshot, or its PendingSnapshot returns only once the rows
// before the barrier are durable), processing obeys the replay rule above, and the
// Storage keeps its atomic-Put promise.
//
// # Metrics
//
// Through Options.MeterProvider: exactlyonce.checkpoint.duration (s),
// .hold (s: the synchronous part), .size (By), .failures, .declines,
// .expired, .restore.fallbacks, .skips, .waits, .offset_commit.failures,
// .last_completed.age (s) and .consumer.lag (records), each with the
// OpenTelemetry topic and partition attributes (messaging.destination.name,
// messaging.destination.partition.id). docs/metrics.md lists every metric.
package checkpoint
