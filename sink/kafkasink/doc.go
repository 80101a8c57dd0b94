// Package kafkasink is the Kafka backend of the exactly-once sink: a
// checkpoint.Participant that writes a processing chain's output records to
// Kafka topics with a two-phase commit aligned with checkpoints, on
// kafkatxn's transactional producer.
//
// # Tour
//
// Open returns the Sink of one source partition's chain, registered in
// the chain (a checkpoint.Chain, which kafkasource.Chains builds) under a
// name of its own. Process hands it records with Add; the chain's
// checkpoints do the rest:
//
//	s, err := kafkasink.Open(c, "zz-out", brokers, "enricher", kafkasink.Options{})
//	if err != nil {
//		return nil, err
//	}
//	return &kafkasource.Processor{Process: func(ctx context.Context, m kafka.Message) error {
//		return s.Add(ctx, "enriched", m.Partition, kafkatxn.Record{Key: m.Key, Value: enrich(m.Value)})
//	}}, nil
//
// New builds a sink outside a chain, for a caller that drives the
// protocol's calls itself.
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
//  3. Just before the checkpoint is saved, Expired (checkpoint.Expirer)
//     checks the transaction's age, counted from just before its first
//     partition was added: with less than Options.ExpiryMargin left of
//     TransactionTimeout, the broker might abort it before the save and
//     the commit finish, so the checkpoint is not saved (ErrExpired), the
//     transaction is aborted and the chain restarts from its last
//     checkpoint, whose replay writes the records again.
//  4. CheckpointCompleted commits the transaction (EndTxn); the next
//     Add begins a new one, with its own epoch.
//  5. Resolve (checkpoint.Resolver), then Restore, after a crash, commit
//     the transaction the checkpoint recorded (kafkatxn.CommitPrepared):
//     the checkpoint completed, so its output must be visible, whether or
//     not the commit happened before the crash (a repeated commit is
//     harmless, and once the epoch has moved on, or the broker forgot the
//     transactional id, the log's transaction marker settles it). Then
//     the producer starts, and InitProducerID aborts any later transaction
//     of the id: records written after the checkpoint, which the chain
//     replays.
//
// A crash before the checkpoint is saved leaves the transaction open; the
// restore of the previous checkpoint starts the producer, which aborts it.
// A crash after the checkpoint is saved and before the commit is step 5.
// If the chain stays down (or paused) so long after the save that the
// broker aborts the transaction by its timeout, or expires the
// transactional id (transactional.id.expiration.ms) with it, Resolve finds
// the transaction aborted and says so (checkpoint.ErrOutputLost): Attach
// falls back to the previous retained checkpoint, whose transaction was
// committed before this one was prepared (a barrier never prepares a
// transaction while the previous one is unconfirmed), restores every
// participant from it, and the replay writes the lost records again.
//
// What the other participants do on that fallback is what they do after
// any restore of an older checkpoint (the Store falls back past a corrupt
// one the same way): dedup restores the keys of the older checkpoint, so
// the replay's records after it are decided exactly as the first time
// (deterministic processing); chsink keeps its journal through the oldest
// of the Store's Keep checkpoints, so the replay re-inserts its batches
// with their journaled tokens and ClickHouse drops the copies as
// duplicates (inside its deduplication window). The checkpoint the
// replay then takes gets the lost checkpoint's ID and replaces its file.
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
// back. A transaction the broker aborted by its timeout is not fencing:
// the broker bumps the epoch and answers as to a fenced producer (or, with
// transactions v2, that the transaction is no longer open), but the
// error then wraps kafkatxn.ErrTimedOut instead of kafkatxn.ErrFenced
// (the transaction was open TransactionTimeout or longer), and is
// Retryable.
//
// # Timeouts
//
// A transaction lasts from the first record after a checkpoint to the
// commit after the next one: about Options.CheckpointInterval, plus the
// slowest participant's pending part, the save and the commit. New
// refuses a TransactionTimeout that is not above CheckpointInterval plus
// ExpiryMargin, and the producer's first start one above the brokers'
// transaction.max.timeout.ms, with a *TimeoutError naming both settings.
// A pending part that is slower than the rest of the timeout allows
// costs a restart and a replay (ErrExpired, counted in
// exactlyonce.checkpoint.expired), never a record.
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
// CheckpointCompleted, restored, aborted, expired, failed),
// records_written, precommit.duration (the barrier's hold on the chain)
// and commit.duration, and fenced. Expired counts transactions too close
// to TransactionTimeout for their checkpoint to be saved, or aborted by it
// before the commit; aborted, transactions found aborted at restore, whose
// checkpoint the restore passed over (exactlyonce.checkpoint.restore.fallbacks).
// Neither loses a record, but both mean the timeout is too short for the
// chain's checkpoints or pauses: alert on them, and on fenced, which means
// two incarnations of a chain ran at once.
// The gauges transaction.age (state open or prepared) and
// transaction.timeout say how close the sink's transaction is to the
// broker's abort; deploy/prometheus alerts when a prepared one passes
// three quarters of it (a commit stuck).
//
// # Errors
//
// Match them with errors.Is (the sentinels) or errors.As (the types):
//
//   - [ErrInvalidOptions] is wrapped by New's error for a missing argument
//     or an invalid option.
//   - [ErrInvalidArgument] is wrapped by Add's error for a record without a
//     topic or with a negative partition: nothing was buffered.
//   - [ErrUnconfirmed] is wrapped by a Snapshot *Error when the transaction
//     prepared at an earlier barrier was never confirmed by
//     CheckpointCompleted (that checkpoint failed after this sink's
//     snapshot, or its notification was lost).
//   - [ErrCorrupt] is wrapped by Restore's error for a state it cannot
//     decode.
//   - [ErrUnsupportedVersion] is wrapped by Restore's error for a state
//     written by a later version of the sink.
//   - [ErrExpired] is wrapped (with checkpoint.ErrExpired) by the error of
//     Expired when the prepared transaction is too close to its
//     TransactionTimeout for its checkpoint to be saved and committed in
//     time: the checkpoint is not saved, the sink aborts the transaction,
//     and the chain restarts from its last checkpoint (the error is
//     Retryable), whose replay writes the records again.
//   - [Error] is a failed send, commit or barrier of the sink.
//   - [TimeoutError] is returned by New, and by the sink's first write,
//     snapshot or restore, when Options.Tx.TransactionTimeout cannot work:
//     not above the checkpoint interval plus the expiry margin (a checkpoint
//     could never be saved in time), or above the broker's
//     transaction.max.timeout.ms (InitProducerID would refuse it).
//
// # Guarantees
//
//   - Every record written before a completed checkpoint's barrier is in
//     the output topics exactly once, visible to read_committed consumers,
//     after the checkpoint's CheckpointCompleted or, after a crash, the
//     Restore of that checkpoint; records after the newest completed
//     checkpoint are never visible until a later checkpoint covers them
//     (the replay writes them again, into a new transaction), through a
//     SIGKILL at each point of the protocol, a participant that declines
//     barriers and a broker restart.
//   - With asynchronous checkpoints the pre-commit (sending the barrier's
//     records and recording the transaction) runs in the coordinator's
//     goroutine while the chain goes on: the barrier takes the records
//     written before it, records written meanwhile are only buffered, so
//     they never enter the prepared transaction, and the commit waits for
//     the checkpoint file as before. An aborted barrier puts its records
//     back before the later ones.
//   - A zombie (an earlier incarnation of the chain still running, such
//     as a revoked owner paused past its session timeout) is fenced once
//     the chain's next incarnation is attached, restored or fresh (Start,
//     which checkpoint.Coordinator.Attach calls): its next write or
//     commit fails with kafkatxn.ErrFenced, and its open transaction is
//     aborted, so it commits nothing that the new owner's replay writes
//     again. Not covered: a zombie whose producer
//     starts after the new owner's Attach (it was itself paused inside
//     its own Attach) fences the new owner instead, whose chain then
//     fails with ErrFenced.
//   - A checkpoint is saved only while its transaction has more than
//     Options.ExpiryMargin left of TransactionTimeout (Expired, just before
//     the save); otherwise nothing is saved, no offset moves, and the
//     restarted chain's replay writes the records into a new transaction:
//     none lost, none twice, whether a co-participant's pending part or a
//     paused process (SIGSTOP) outlived the timeout.
//   - A checkpoint whose transaction was aborted after its save (the
//     process paused or down past TransactionTimeout between the save and
//     the commit, or past transactional.id.expiration.ms) is never
//     restored: Resolve reports it (kafkatxn.ErrAborted,
//     checkpoint.ErrOutputLost), Attach restores every participant from
//     the previous retained checkpoint, and the replay writes the lost
//     records once; the chain is not stuck. Restore itself, called without
//     Resolve, fails with the same error rather than go on. This holds
//     too after the transactional id expired, which the broker answers
//     with INVALID_PRODUCER_ID_MAPPING.
//   - A commit refused because the broker aborted the transaction by its
//     timeout fails with kafkatxn.ErrTimedOut (Retryable), never
//     kafkatxn.ErrFenced, and counts as outcome expired, not as fenced.
//
// docs/design/kafkasink.md names the test that holds each of these.
//
// What it assumes: the chain is deterministic on replay (the checkpoint
// package's rule), so a replay writes the same records; the Store keeps
// at least two checkpoints (StoreOptions.Keep, default 3), so that there
// is one to fall back to; the clock of this process runs at the broker's
// rate (the age of a transaction is measured here, its timeout there);
// one pipeline per prefix. A chain with two kafkasinks whose transactions
// of one checkpoint ended differently (one committed before a crash, the
// other aborted by the timeout after it) falls back too, and the
// committed one's records of that checkpoint are then written twice: use
// one kafkasink per chain.
package kafkasink
