// Package audit counts events at every stage of a pipeline per tenant and
// event-time bucket, exactly once, and compares the stages, so a pipeline
// running on its own Kafka and ClickHouse can show that it lost or doubled
// nothing without anyone knowing the ground truth. It is Uber's Chaperone
// idea (every tier counts messages per tumbling window of event time, a
// collector compares the tiers) made exact by this SDK's checkpoints.
//
// # Tour
//
// Each stage counts under a stage name (Stage…, or TableStage for rows found
// in a table):
//
//   - the gateway counts the deliveries it accepted (answered 2xx after the
//     side effect) per tenant and bucket, and sends the counts as Deltas to
//     an audit topic (package audit/kafkaaudit), each delta numbered, so a
//     delta sent twice is folded once;
//
//   - the processor counts the records it read, first sights and duplicates
//     in a Counter, a checkpoint.Participant of its chain: the counts are
//     checkpointed state, restored with the offsets, so a replay after a
//     crash counts every record once;
//
//   - the chain counts each row a sink took under SinkStage(table), in the
//     same Counter once the sink's Add returned: a completed checkpoint's
//     count is what ClickHouse acknowledged (SinkCheck compares it with
//     the table);
//
//   - the Counter's rows go to ClickHouse through the SDK's own sink
//     (audit/chaudit: chsink with its journal and insert tokens) into a
//     ReplacingMergeTree keyed by stage, tenant, bucket and counter,
//     versioned by the count, so a row written again replaces itself;
//
//   - the verifier (cmd/exactlyonce audit) reads the totals, counts the rows
//     of the user's tables per bucket, and Compare flags the buckets where
//     the stages disagree.
//
//     c, _ := audit.NewCounter("webhooks/3", audit.Options{Bucket: time.Minute})
//     // per record: c.At(m.Offset); c.Add(audit.StageRead, tenant, at, 1) ...
//     // per tick:   rows, pos = c.Flush(rows[:0], pos[:0]); auditSink.AddBatch(ctx, pos, rows)
//
// # Errors
//
// Match them with errors.Is:
//
//   - [ErrCorrupt] is wrapped by Restore's error for a state it cannot read.
//   - [ErrUnsupportedVersion] is wrapped by Restore's error for a state of a
//     newer format.
//   - [ErrBucketChanged] is wrapped by Restore's error for a state counted
//     in buckets of another width: its counts cannot be folded into these.
//   - [ErrInvalidOptions] is wrapped by NewCounter's error for bad options.
//
// # Guarantees
//
//   - A Counter's counts reflect exactly the records before its last
//     checkpoint's barrier plus those processed since: with the replay rule
//     of package checkpoint (processing depends only on restored state and
//     the records in offset order), a restored chain counts every record
//     once.
//   - A count only grows, so the newest row of a key is the one with the
//     largest count; a row written again (a replay) is harmless in the
//     ReplacingMergeTree.
//   - Compare flags a bucket as lost or duplicated only once it is settled:
//     its end and the last change of its counts are older than
//     CompareOptions.Settle (the allowed lateness plus the checkpoint
//     interval). Before that, a difference is pending (the bucket is young)
//     or late (the bucket is old but its counts still move: late events,
//     retries, redeliveries).
//
// What it assumes: the gateway's counts are at least once, never more than
// what it published: a gateway killed between a publish and the delta's
// send loses the count, which can only hide a loss, never show one that did
// not happen (see audit/kafkaaudit). Buckets are kept in a Counter for
// Options.Retention of event time behind the newest bucket: an event later
// than that starts its bucket over, and the verifier then reports that
// bucket short.
package audit
