// Package exactlyonce is a set of building blocks for event pipelines whose
// results stay exact when any step runs again or dies halfway: webhooks from
// GitHub and Jira → an HTTP gateway → Kafka → a stream processor that
// deduplicates and aggregates in windows → ClickHouse.
//
// # The principle
//
// End-to-end exactly-once is at-least-once delivery plus idempotent,
// deterministic destinations. No single tool provides it: every joint
// between two tools must answer "if this step runs again, or dies halfway,
// does the result stay the same?". Each package answers it for one joint.
//
// # The packages, stage by stage
//
//   - idempotency: the gateway. A delivery id is claimed as pending, marked
//     done only after Kafka acknowledged the event, and released on
//     failure, so a retry is never taken for a duplicate. Jira Cloud
//     retries failures for about 30 minutes; GitHub never does, and
//     idempotency/githubredeliver redelivers its failed deliveries through
//     the REST API within GitHub's 3 days. Memory and Redis
//     stores (idempotency/redisstore); the acks=all Kafka publisher is
//     idempotency/kafkapub.
//   - checkpoint: the spine. A Participant (Snapshot, Restore,
//     CheckpointCompleted) is an operator whose state is part of every
//     checkpoint; the Coordinator takes barrier-aligned checkpoints of every
//     partition's chain together with the Kafka offset they match, writes
//     them atomically to a Storage, and only then commits offsets.
//     checkpoint/kafkasource runs one chain per partition of a kafka-go
//     consumer group and restores it wherever the partition moves.
//   - dedup: keyed state that remembers event keys for a TTL with Flink's
//     semantics, in 20 to 37 bytes per key, snapshotted in every checkpoint;
//     with Options.Incremental a checkpoint writes only the keys changed
//     since the last one (a base and deltas, compacted in the background).
//   - window: event-time windows with watermarks and aggregators whose
//     neutral element is right (an average of nothing is absent, not 0).
//     Rows are keyed by window and versioned, for a ReplacingMergeTree.
//   - sink: a write-ahead journal that makes a replay cut rows into exactly
//     the batches it inserted before; sink/chsink inserts them into
//     ClickHouse with the same insert_deduplication_token, so a table and its
//     materialized views see every row once. sink/kafkasink writes Kafka
//     topics instead, in one transaction per checkpoint (a two-phase commit
//     on kafkatxn, Kafka's idempotent and transactional producers and a
//     read_committed reader on kafka-go's protocol layer).
//
// examples/gateway and examples/processor are the binaries that wire them
// together; examples/devmetrics is the articles' pipeline they run with
// -pipeline devmetrics. `make demo` runs those binaries, injects faults at
// every joint (lost Kafka acks, duplicate deliveries, kill -9 of the
// processor, of Kafka and of ClickHouse) and checks the result in
// ClickHouse.
//
// # Guarantees
//
// Each package's doc states its own, with the test that breaks when it
// does not hold. Together, under the assumptions below: every webhook the
// gateway answered with a 2xx reaches Kafka, and every Kafka record
// counts once in ClickHouse (or in the output topics of sink/kafkasink),
// or reaches the dead-letter topic once if it cannot be decoded, through
// kill -9 of any process, lost acknowledgements, redeliveries and
// rebalances; `make demo` and `make chaos` check it end to end against the
// ground truth.
//
// # What the packages assume of each other
//
// Processing must depend only on restored state and the records in offset
// order (event time, never the wall clock), so that a replay after a restore
// produces the same rows at the same positions; the sink detects and refuses
// a replay that does not. Every instance of a consumer group shares one
// checkpoint.Storage. ClickHouse tables deduplicate inserted blocks over a
// window deeper than the replay.
package exactlyonce
