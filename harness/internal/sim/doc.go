// Package sim is a deterministic simulation of the checkpoint protocol: one
// partition's chain, its participants and the outside systems they write
// to, driven by a seeded scheduler through crashes, pauses, slow and
// failing parts, declined barriers, revocations, clock jumps and server
// restarts, and checked against a reference model computed from the input
// alone. It exists to find the next breach of a guarantee before a
// reviewer does; the tests in this package are its users.
//
// # Tour
//
// Run(seed, cfg) runs one seed and returns a Result: the violations found
// and the trace of every step. A seed fixes everything: the input, every
// choice of the scheduler (math/rand/v2's PCG, seeded), the simulated
// clocks. No wall clock and no goroutine race decides anything: the chain
// runs in the scheduler's goroutine, and every step the coordinator's
// goroutine takes outside the process (a pending part, the checkpoint
// file's write, the offset commit, the Kafka sink's CheckpointCompleted)
// waits at a gate that the scheduler opens, one at a time (gate.go). A
// seed replays exactly: SIM_SEED=n go test -run 'TestSimulation/<name>$'
// ./harness/internal/sim/ prints its trace. SIM_SEEDS=n runs n seeds per scenario
// (make sim, the long mode; go test alone runs 500, 300 under -short, about
// 10 s of CPU in all, and 100 under -race).
//
// Config chooses the faults: Faults for what the guarantees cover, and one
// switch per breach of issue 41 (TxnExpiry, EarlyTicks, SecondWriter) and
// for revoked owners that go on (Zombies: until they learn, or until their
// chain fails, which stops them, as kafkasource stops a chain once the
// group coordinator says its generation ended rather than restart it under
// that generation); DistinctViewRows gives the view
// the shape chsink accepts once breach 3 is fixed. The scenarios of TestSimulation
// are named after them; a scenario waiting for a fix is skipped in one
// place, pendingFix in sim_test.go, and TestFindsBreaches records the
// seeds that find each.
//
// # What is real and what stands in
//
// Real SDK code, as shipped: the checkpoint Coordinator, Task and Store
// over a checkpoint.MemoryStorage (the protocol: barriers, synchronous and
// asynchronous parts, the save, the commit, CheckpointCompleted, Attach's
// restore, Detach, declines), dedup.Deduplicator, two window.Operators
// (session windows and hopping windows, with early firings by count and
// by processing-time interval, Ticks, EndInput), and audit.Counter. Each process incarnation builds
// them anew and restores them from the newest checkpoint, as kafkasource
// does after a crash or a rebalance.
//
// Stand-ins, because the real participant needs a server and the
// simulation needs thousands of crashes a second; each follows the real
// code's protocol line for line and must be kept in step with it:
//
//   - Broker (kafka.go): a Kafka transaction coordinator and one output
//     partition. Transactions time out on the broker's clock, which the
//     processor's clock jumps do not move; an abort by timeout bumps the
//     epoch (the producer is then fenced), InitProducerID aborts the
//     ongoing transaction and bumps the epoch, an id idle longer than
//     transactional.id.expiration.ms is forgotten (INVALID_PRODUCER_ID_
//     MAPPING), and markers are the transaction's final state, which
//     read_committed obeys.
//   - txSink (txsink.go): kafkasink.Sink's protocol over the Broker: the
//     pre-commit in the pending part, the commit in CheckpointCompleted,
//     CommitPrepared in Restore, the producer start in Start (Attach,
//     fresh or restored) and Restore, sticky errors;
//     and Expired and Resolve of the fix of breach 1, which a coordinator
//     without checkpoint.Expirer and checkpoint.Resolver never calls.
//   - ClickHouse (clickhouse.go): plain MergeTree tables with the insert
//     deduplication window (the token is logged before the part is
//     renamed in, so a crash may keep the token and lose the part, and
//     block numbers go on from the highest surviving part), a materialized
//     view fed per inserted block and deduplicated by its own token, and a
//     ReplacingMergeTree(version, is_deleted) read with FINAL. Merges are
//     not modelled.
//   - chSink (chsink.go): chsink.Sink's journal of batch intents (a replay
//     cuts batches where the first run did and reuses their tokens), its
//     decline of a barrier inside a journaled batch, the in-order insert
//     of a barrier's batch in the pending part, and the lost-part check of
//     lostpart.go as it is today (a missing part is lost; the batch's own
//     when the server did not restart since it was journaled; otherwise
//     compared by content), with the put-back and re-derivation repairs.
//   - winSink (chsink.go): windowsink.Sink's writing of an operator's rows
//     at its flush timer and at every barrier, into the "sessions" or the
//     "hopping" ReplacingMergeTree, and its journal's claim at the sink's
//     first position, which fences a revoked owner's later writes
//     (sink.ErrFenced). Tokens are not modelled: a row written twice is
//     the same for FINAL.
//
// # Guarantees
//
// What a passing scenario proves, for the seeds it ran (not for every
// schedule; zombie_owner with revoked owners that go on until they learn,
// checkpoint.ErrSuperseded and the restore that skips a revoked owner's
// late checkpoint among what it covers): every input record is counted
// exactly once in each output
// (Kafka read_committed, the sink's table, the view over it, the audit
// counter's state); the sessions and hopping tables read with FINAL hold
// exactly the windows the input makes (computed from the input alone: per
// key, sessions by gap merging, and the count of every hopping window); no partition is stuck (once faults stop, the run reads its
// input to the end and the group's offset reaches it); a committed group
// offset never passes the newest saved checkpoint, nor one whose
// transaction is not committed yet (else a restore that falls back past
// an aborted one moves the offset back). A checkpoint saved
// naming a transaction the broker had already aborted is recorded as a
// note (Result.Notes), not a violation: what it costs shows in the outputs.
//
// What it assumes: that the stand-ins behave as the servers and the SDK
// code they mirror (a fix in kafkasink, chsink or windowsink is proven
// here only once the stand-in mirrors it), that one partition shows what
// many do, and that the documented requirements hold in the baseline (a
// transaction timeout longer than any pause while a checkpoint is pending,
// and a deduplication window that covers every replay).
package sim
