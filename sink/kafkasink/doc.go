// Package kafkasink is the Kafka backend of the exactly-once sink: a
// checkpoint.Participant that writes a processing chain's output records to
// Kafka topics with a two-phase commit aligned with checkpoints, on
// kafkatxn's transactional producer.
//
// # Tour
//
// New returns the Sink of one source partition's chain. Process hands it
// records with Add; the chain's checkpoints do the rest:
//
//	s, err := kafkasink.New(brokers, "enricher", p, kafkasink.Options{})
//	proc.Participants["out"] = s
//	proc.Process = func(ctx context.Context, m kafka.Message) error {
//		return s.Add(ctx, "enriched", m.Partition, kafkatxn.Record{Key: m.Key, Value: enrich(m.Value)})
//	}
//
// Downstream, read the output with isolation read_committed and aborted
// records filtered: kafkatxn.Reader, kafkasource (which always does),
// or any Java, franz-go or librdkafka consumer.
//
// # The protocol
//
// Each chain has one transactional id, prefix-<source topic>-<source
// partition>, stable across restarts and instances, so the chain's next
// incarnation fences this one (as Kafka Streams does per task), and at most
// one transaction of the chain is open at a time.
//
//  1. Add buffers records per output partition and sends them, in
//     batches of Options.BatchSize, inside the open transaction.
//  2. Snapshot (the barrier) sends the rest and returns the transaction's
//     identity (transactional id, producer id, epoch, and each partition's
//     first offset): the pre-commit. The checkpoint stores it.
//  3. CheckpointCompleted commits the transaction (EndTxn); the next
//     Add begins a new one, with its own epoch.
//  4. Restore, after a crash, commits the transaction its checkpoint
//     recorded (kafkatxn.CommitPrepared): the checkpoint completed, so its
//     output must be visible, whether or not the commit happened before
//     the crash (a repeated commit is harmless, and once the epoch has
//     moved on the log's transaction marker settles it). Then its producer
//     starts, and InitProducerID aborts any later transaction of the id:
//     records written after the checkpoint, which the chain replays.
//
// A crash before the checkpoint is saved leaves the transaction open; the
// restore of the previous checkpoint starts the producer, which aborts it.
// A crash after the checkpoint is saved and before the commit is step 4.
// Records written after a barrier whose checkpoint has not completed yet
// are held in memory, so a prepared transaction never holds a record after
// its barrier. If a later barrier comes before that completion (the
// checkpoint failed after this sink's snapshot, for example because
// another participant declined it), Snapshot fails with ErrUnconfirmed:
// the sink cannot tell whether the checkpoint is durable, so the chain
// must restart from its newest checkpoint, which resolves the transaction.
// Register the sink under a name that sorts after participants that may
// decline (participants snapshot in name order) to avoid those restarts.
//
// Every failure of a send, commit or barrier leaves the sink failed with
// an *Error whose Retryable method says whether a restart of the chain can
// get past it (kafkasource restarts such a chain from its last checkpoint
// by itself): always, except when the producer was fenced, since then
// another incarnation of the chain runs, and restarting would fence it
// back.
//
// # Why consumed offsets do not ride in the transaction
//
// Kafka Streams commits its input offsets in the output transaction
// (AddOffsetsToTxn, TxnOffsetCommit) because the offsets are where it
// restarts. Here the checkpoint is: kafkasource restarts a chain from its
// checkpoint's NextOffset, and the transaction is tied to that checkpoint
// by steps 2 to 4 (committed exactly when the checkpoint that recorded it
// is durable). Committing offsets in the transaction as well would add a
// second record of the position that can disagree with the checkpoint (a
// checkpoint saved, its transaction not yet committed), and the group's
// offset serves lag monitoring only (kafkasource commits it after each
// checkpoint). kafkatxn.TxProducer.SendOffsets is there for programs that
// keep their position in Kafka instead.
//
// # Metrics
//
// Options.MeterProvider receives, per chain (the source topic and
// partition): exactlyonce.kafkasink.transactions by outcome (committed at
// CheckpointCompleted, restored, aborted, failed), records_written,
// precommit.duration (the barrier's hold on the chain) and commit.duration,
// and fenced. An aborted transaction is a completed checkpoint's lost
// output (its transaction outlived the transaction timeout): alert on it,
// and on fenced, which means two incarnations of a chain ran at once.
//
// # Guarantees
//
//   - Every record written before a completed checkpoint's barrier is in
//     the output topics exactly once, visible to read_committed consumers,
//     after the checkpoint's CheckpointCompleted or, after a crash, the
//     Restore of that checkpoint; records after the newest completed
//     checkpoint are never visible until a later checkpoint covers them
//     (the replay writes them again, into a new transaction). Tested by
//     killing a kafkasource -> dedup -> kafkasink pipeline with SIGKILL at
//     each point of the protocol, with a participant that declines
//     barriers, and by restarting the broker under it.
//   - With asynchronous checkpoints the pre-commit (sending the barrier's
//     records and recording the transaction) runs in the coordinator's
//     goroutine while the chain goes on: the barrier takes the records
//     written before it, records written meanwhile are only buffered, so
//     they never enter the prepared transaction, and the commit waits for
//     the checkpoint file as before. An aborted barrier puts its records
//     back before the later ones (TestSinkAsyncBarrier; TestKill9 kills
//     after the pending pre-commit too).
//   - A zombie (an earlier incarnation of the chain still running) is
//     fenced: its next write or commit fails with kafkatxn.ErrFenced, and
//     its open transaction is aborted.
//   - Restore fails with kafkatxn.ErrAborted, instead of going on, if the
//     recorded transaction was aborted (it outlived the transaction
//     timeout): output of a completed checkpoint would be missing.
//
// What it assumes: the chain is deterministic on replay (the checkpoint
// package's rule), so a replay writes the same records; the transaction
// timeout (Options.Tx.TransactionTimeout, capped by the broker's
// transaction.max.timeout.ms) exceeds the checkpoint interval plus the
// longest restart; one pipeline per prefix.
package kafkasink
