// Package chsink is the ClickHouse backend of package sink: a batching,
// checkpoint-coordinated sink over ch-go that inserts each row exactly once
// into a MergeTree-family table and through its materialized views.
//
// Package sink holds the journal, positions and shared errors; this package
// holds everything that imports ch-go, so importing the concept package does
// not pull in a ClickHouse client.
//
// # Tour
//
// Describe how a row type maps to columns with a Schema built from typed
// column constructors (String, LowCardinality, Int64, Float64, DateTime64,
// Nullable, Array, or Col for any ch-go column); no reflection runs per row
// and column buffers are reused between batches. New connects, checks the
// table (engine, deduplication window, columns) and returns a *Sink for one
// source partition. The chain then calls Restore (if a checkpoint holds
// state), Add for each row (or AddBatch for several, with the same result
// and one lock), Snapshot at each barrier and CheckpointCompleted
// when a checkpoint is durable; a goroutine runs Run for the flush timer
// until Close. One sink serves one topic-partition chain.
//
// Open is New for a sink of a checkpoint.Chain: a DB names the server and
// the database once for all of a chain's tables, and Open takes the
// partition, the Storage and the Store's Keep (Options.KeepCheckpoints)
// from the chain, registers the sink there under the table's name and
// returns it, the handle Process adds rows to. kafkasource.Chains builds
// the chain, runs the sink's Run and closes it.
//
// Batches are flushed at MaxRows, at an estimated MaxBytes, after MaxDelay
// (a real timer, so a quiet stream flushes), shortly before a checkpoint
// barrier is due when many rows are buffered (see Batching and
// checkpoints) and in Snapshot, which returns only when ClickHouse
// acknowledged every row before the barrier. Inserts
// retry with exponential backoff and full jitter, classified by IsRetryable;
// when a batch fails permanently or runs out of retries the error is
// returned, the sink stops accepting rows, and the checkpoint fails: a batch
// is never dropped. Every insert carries insert_deduplication_token from the
// journal and the settings a replay depends on (see Server settings).
// A batch costs one journal write before its insert (the intent, which also
// carries an earlier batch's ack and the prune point) and one Delete when a
// later checkpoint completes.
//
// # Pipelining
//
// A flush cuts the batch: it swaps in an empty set of column buffers and
// hands the full one to a goroutine of the sink, and the caller returns and
// fills the empty set meanwhile. That goroutine seals the batch (it encodes
// the columns once, as they go on the wire, and hashes those bytes),
// journals its intent once the batch before it is journaled, waits for the
// batch before it to be inserted, and sends the encoded columns with their
// retries, without encoding them again. At most two batches are cut and
// unsettled (three column sets in all): one being inserted and one queued
// behind it, so a barrier's batch, cut while a full batch's insert runs,
// queues instead of waiting; a third cut waits for the oldest. So the
// insert of batch N overlaps the filling of batch N+1, its encoding and
// the journal write of its intent, which is still durable before N+1's own
// insert starts: the order that makes a replay safe is kept, only the
// waiting is shared. A batch cut and not yet journaled when the process
// dies was not inserted: the replay cuts its rows afresh. The ack of batch
// N rides on a later intent (those written while N was in flight cannot
// carry it), so after a crash up to three batches are re-inserted with
// their tokens and dropped by ClickHouse. Replays of journaled batches run
// synchronously.
//
// Where errors surface: a failed background insert breaks the sink as a
// failed flush always did; the first Add after it ended returns its
// *InsertError (or, at the latest, the next flush, Snapshot or Close), so the
// checkpoint fails and nothing after the batch is acknowledged. The insert
// belongs to the sink, not to the call that sealed the batch: cancelling
// that call's context does not stop it (a per-call context may end as soon
// as Add returns); Close and Restore do, at once, with an unknown outcome
// that a replay settles by token. No goroutine of the sink runs after Close
// returns.
//
// # Batching and checkpoints
//
// Each insert costs ClickHouse a fixed amount of CPU (a part written, and
// merged later) besides its rows, so few large inserts are cheaper than
// many small ones: on the embedded server, inserts of ~8,000 rows (a
// MaxDelay of 200 ms at 40,000 rows/s) cost it 2.6 times the CPU
// per row of inserts of 40,000 (BENCHMARKS.md). The barrier, on the other
// hand, waits for the insert of everything buffered, and the chain is held
// meanwhile. The sink balances the two this way:
//
//   - MaxDelay bounds how long a row waits to be visible; left at or above
//     the checkpoint interval, it does not cut an interval's rows into
//     smaller inserts, and the barrier sets the size of the inserts.
//   - Flushing ahead: the sink learns the barriers' cadence from its
//     Snapshot calls and, when at least FlushAheadMinRows rows are buffered
//     shortly before the next barrier is due, starts their insert in the
//     background. The barrier then waits only for what came after (the
//     tail), at the price of one more insert per interval, which pays only
//     for large intervals (default 50,000 rows; Options.NoFlushAhead turns
//     it off).
//   - MaxRows and MaxBytes cap a batch, so one insert stays one block.
//
// None of this touches the exactly-once contract: a flush ahead is journaled
// before its insert like every flush, with its token, and a replay after a
// crash cuts the replayed rows into the journaled batches whatever the
// timing was (TestFlushAheadKilled kills a processor at each moment of a
// flush ahead).
//
// # Table requirements
//
// A plain MergeTree needs non_replicated_deduplication_window > 0 (it is 0
// by default; New fails with ErrNoDedupWindow otherwise); replicated tables
// deduplicate by default (10,000 blocks and one hour since 25.9); one
// with replicated_deduplication_window_seconds = 0 is refused
// (ErrNoDedupWindow): ClickHouse counts that bound back from the newest
// block, so 0 keeps only the newest block's hash. The window
// must cover the replay depth: the blocks that every writer of the table
// inserts between a batch's intent and its re-insert after a failure, i.e.
// roughly writers x flushes per second x failover seconds, plus the two
// batches a sink may re-insert. Before
// re-inserting a batch whose outcome is unknown, the sink compares the
// table's block counter (system.parts) with the one journaled with the
// intent and, where the table or a view target it feeds is replicated, the
// intent's age with the smallest replicated_deduplication_window_seconds
// among them (a target forgets a token on its own clock); outside the
// window it follows Options.OnOutsideWindow (default: fail loudly with
// *sink.OutsideWindowError). What clickhouse-local, the tests' server, can
// do as a replica, and so what of this is tested, is in docs/replicated.md
// of the repository.
//
// Every materialized view target fed by the table, recursively, needs a
// window too, at least the table's window times the number of views that
// write into it: each block replayed into the table gives the target a
// block through each view, and a target fed by several views (from several
// tables) uses its window up that much faster. New refuses a smaller one
// with ErrNoDedupWindow. The window guard counts the table's own blocks;
// the rule above keeps the targets inside theirs as long as the other
// tables feeding a target do not insert faster than this one.
//
// On a server that is not replicated, the table and every view target must
// also be of a shape whose lost part the sink can tell exactly ("Lost
// parts" below): a plain MergeTree with enable_block_number_column = 1 or
// a ReplacingMergeTree; New refuses a folding engine, a MergeTree without
// block numbers and a cascade of views with ErrUnprovenTarget, and so a
// view target that is a plain MergeTree unless Options.DistinctViewRows
// (another insert can write the same rows there).
//
// ReplacingMergeTree tables deduplicate only when parts merge; read them
// with SelectFinal or SelectLatest (argMax by version).
//
// # Server settings
//
// What a replayed batch does is decided by query settings whose defaults
// changed between ClickHouse releases and which a user's settings profile
// may change, so the sink does not rely on them: New reads them on its own
// connection (Sink.Server returns what it read) and every insert sends,
// besides its token, insert_deduplicate = 1, deduplicate_insert = 'enable'
// (26.2 and later: it overrides insert_deduplicate),
// deduplicate_blocks_in_dependent_materialized_views = 1,
// update_insert_deduplication_token_in_dependent_materialized_views = 1
// (24.x before 24.7 needs it; later releases ignore it), async_insert = 0 and
// materialized_views_ignore_errors = 0, each one the server knows, as
// important (a server that does not know it fails the insert). A user who
// may not set one of them (a CONST or READONLY constraint, a MIN or MAX
// that excludes the value, readonly = 1), or a server without
// insert_deduplication_token, is refused by New with a *SettingError
// (ErrUnsafeSetting) naming the setting and the fix. The inserts of a
// lost-part repair (see Lost parts below) send the same settings: its
// staging and run-id inserts without a token, and the INSERT ... SELECT
// that derives a view's rows again with its token,
// deduplicate_insert_select = 'force_enable' where the server has it
// (25.12 and later: it overrides both switches above for an INSERT ...
// SELECT) and max_threads = 1; New refuses a user who may not set that one
// either. docs/clickhouse-versions.md in the repository says what each
// setting does on each ClickHouse line.
//
// # Connecting
//
// Options.Client is the base of every connection's ch-go options: TLS (a
// *tls.Config for the secure native port, 9440 on ClickHouse Cloud),
// compression, settings, a custom dialer. Run is the flush timer;
// kafkasource runs it for every chain the sink is a participant of, and
// closes the sink when the chain ends.
//
// New connects and reads the table's definition: a table that does not
// meet the requirements above is a *TableCheckError (permanent); a server
// that fails those queries is a *ServerError whose Retryable method tells
// kafkasource to build the chain again later (a server restarting answers
// ABORTED or drops the connection) or to stop (no access, say); a server
// that cannot be reached is a network error, which kafkasource retries.
//
// # Guarantees
//
// Exactly once into the table and its dependent views, given what package
// sink's Guarantees assume, and whatever the server's and the user's
// defaults of the settings above (every insert sends its own, a lost-part
// repair's included; a user who may not is refused by New): deterministic processing (else
// *sink.ContentMismatchError, or Options.OnMismatch: MismatchReinsert
// inserts the new content of a replayed batch under a fresh derived token,
// which New allows only for ReplacingMergeTree tables and view targets, since the table and its views see those rows again),
// no other insert writing all the rows of one of the sink's batches into
// its table when that is a plain MergeTree, nor (with
// Options.DistinctViewRows) the rows a batch's insert wrote into a plain
// MergeTree view target (see Lost parts below; New refuses such a target
// otherwise), a shared
// checkpoint.Storage, a deduplication window deeper than the replay, and a
// chain that cancels the context it passes to Add, Snapshot and Run when its
// consumer-group generation ends (and does not cancel it merely when a call
// returns: it also bounds the insert of the batch that call sealed). Each
// batch is one insert block (MaxRows is
// capped below max_insert_block_size). A checkpoint whose barrier falls
// inside a journaled batch being replayed is declined with
// sink.ErrReplayInProgress, which wraps checkpoint.ErrDeclined: that
// checkpoint is skipped, the chain keeps running and the next barrier after
// the batch succeeds. An insert attempt that runs out of InsertTimeout has
// an unknown outcome and is retried with the same token.
//
// Asynchronous checkpoints (checkpoint.AsyncParticipant) keep all of this:
// SnapshotAsync cuts the barrier's batch, whose goroutine journals its
// intent before its insert starts, exactly as for any flush, so a crash at
// any moment after the intent replays the batch as it was cut, with its
// token, and a crash before it loses nothing that was inserted (nothing
// was) nor anything a checkpoint covers (none does yet); the
// state it hands the coordinator covers the cut batch only, and the
// coordinator writes the checkpoint file only once that insert was
// acknowledged, so a checkpoint never names a row ClickHouse might not
// hold; rows added after the barrier go into the next batch and the next
// checkpoint. A failed insert fails the pending part, and the checkpoint
// writes nothing, and a SIGKILL at any of these steps loses and
// duplicates nothing.
//
// Lost parts: a plain MergeTree writes a block's token to its
// deduplication log before it renames the block's part in, so a server
// killed between the two keeps the token without the rows, and a retry
// with that token is dropped as a duplicate of nothing. An insert attempt
// that may repeat an earlier one (a retry, or a replay after a crash)
// therefore asks the server which part it dropped each block against,
// checks that the table, and each view target the server names, still
// holds what the insert wrote there, and repairs what it does not: the
// batch's rows are put back into the table without firing its views (no
// view counts them twice), and a view's rows of the batch are derived
// again by that view's query over the batch alone, under a token derived
// from the batch's. Both repairs survive a crash at any step, and a
// repeated repair writes nothing twice. A lost part is rare (a few blocks
// in hundreds of kills of the server) and each repair is counted in the
// exactlyonce.sink.lost_parts_repaired metric.
//
// After a restart a part's name proves nothing (the server numbers blocks
// on from its highest surviving part), so the check compares rows, and
// another insert of the same rows that took the lost part's name passes
// for the batch's. A Replacing table does not mind (those rows replace the
// batch's in FINAL anyway); a plain MergeTree does. For the sink's own
// table the sink assumes that no other writer inserts all the rows of one
// of its batches (rows of records: an id, or the record's position, in a
// row makes them its own); a view target's rows are no record's (a count
// per hour of equally sized batches from several partitions is the same
// row), so New refuses a plain MergeTree view target unless
// Options.DistinctViewRows says its rows carry a key only this sink's
// partition writes. Per shape of the table and of each view target, New
// accepts or refuses:
//
//	shape                                  answer after a merge
//	Replicated*, Shared*                   accepted, not checked: token and part commit together in Keeper
//	MergeTree, enable_block_number_column  exact, given that no other insert writes the same rows (see above):
//	                                       the block's rows read out of merged parts by _block_number; as a
//	                                       view target refused (ErrUnprovenTarget) unless
//	                                       Options.DistinctViewRows: a Replicated engine, windowsink into a
//	                                       ReplacingMergeTree, or aggregate the sink's table at read time
//	ReplacingMergeTree [(ver[, deleted])]  exact in FINAL terms: each row's sorting key held at a version >= its
//	                                       own (no version: any row of the key, which replaces it anyway)
//	MergeTree without block numbers        refused (ErrUnprovenTarget): whole rows compared would pass another
//	                                       insert of the same rows; ALTER TABLE ... MODIFY SETTING
//	                                       enable_block_number_column = 1, or a Replicated engine
//	Summing, Aggregating, Collapsing,      refused (ErrUnprovenTarget): merges fold one insert's rows into
//	VersionedCollapsing, Coalescing,       another's; use the Replicated engine of the family, or
//	Graphite                               sink/chsink/windowsink into a ReplacingMergeTree
//	a cascade (a view over a view target)  refused unless both tables are replicated: it cannot be derived
//	                                       from the batch, and a repair upstream would fire it again
//
// While the named part is unmerged every accepted shape is compared
// exactly. A table changed into a refused shape after New (or given a view
// into one), or a view target whose rows cannot be derived from the batch
// alone, stops the sink at such a part with a permanent *LostPartError
// rather than guess. How the check and the repair work, step by step, is
// in docs/design/chsink-repair.md of the repository.
//
// Takeovers and checkpoints: the journal is pruned only through the oldest
// of the newest Options.KeepCheckpoints completed checkpoints (Open sets
// it to the chain's Store's Keep, so the two cannot disagree), so a restore
// that falls back past a corrupt newest checkpoint still finds every batch
// it must replay; a failed delete is logged and retried at the next
// completion. A sink that starts without a checkpoint over a pruned journal
// (every checkpoint lost) fails with sink.ErrPrunedJournal unless
// Options.AllowFreshStart. With MismatchKeepFirst or MismatchReinsert, a
// replay that comes up short (processing that is not byte-for-byte
// deterministic) is finished by Run MaxDelay after its last row, with what
// is buffered, so a quiet partition does not stay in replay. The replay may
// only have stalled (a slow fetch, a broker restarting), so the batch's
// other rows may still come: the batch is cut at its last buffered row (a
// journal entry over that prefix supersedes it, written before the
// prefix's insert like every entry, and naming the batch as an earlier
// version with the table's block counter) and later rows are batches of
// their own. Only when ClickHouse held the journaled batch already (the
// insert is dropped against a part at or below that counter) and
// MismatchKeepFirst keeps it are its later rows dropped, being in it, and
// an ack records that the entry ends where the batch did; a
// replicated table does not say whether it held the batch, so there the
// sink drops them with a warning. Under MismatchFail the sink waits for a
// row past the batch, which reports the mismatch.
//
// Restore refuses a state that does not decode (ErrCorrupt), of another
// format version (ErrUnsupportedVersion) or of another table or partition
// (ErrIncompatible), and then loads nothing; the state's format is kept
// from version to version. docs/design/tests.md names the tests that hold
// each of these promises.
//
// # Errors
//
// Match them with errors.Is (the sentinels) or errors.As (the types);
// errors of every sink (sink.ErrClosed, sink.ErrReplayInProgress,
// *sink.ContentMismatchError, ...) are package sink's:
//
//   - [ErrInvalidOptions] is wrapped by New's error for a nil or
//     inconsistent schema or an invalid option; nothing was connected.
//   - [ErrNoDedupWindow], [ErrTableSchema] and [ErrNotIdempotent] are
//     matched by a *[TableCheckError] from New: a table that does not
//     deduplicate inserted blocks, lacks a column, or (under
//     MismatchReinsert) is not a ReplacingMergeTree.
//   - [ErrUnprovenTarget] is matched by New's error for a table or view
//     target whose lost parts cannot be proven (see the table above); the
//     error's Reason says what to use instead.
//   - [ErrUnsafeSetting] is matched by a *[SettingError] from New or an
//     insert: a server setting, or a setting the sink's user may not
//     change, would let a replayed batch be inserted twice or lost.
//   - [ErrLostPart] is wrapped by a *[LostPartError]: a part ClickHouse
//     deduplicated a block against is gone and cannot be repaired here;
//     the sink stops rather than guess.
//   - [ErrCorrupt], [ErrUnsupportedVersion] and [ErrIncompatible] are
//     wrapped by Restore's error; nothing was loaded.
//   - *[InsertError] and *[ServerError] carry what the server said about
//     a failed insert or connection.
package chsink
