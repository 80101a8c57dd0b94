// Package devmetrics is the articles' pipeline as a library the example
// binaries run: GitHub and Jira Cloud webhooks normalized into one
// employee event, hourly per-employee metrics (merged pull requests,
// review comments, reviews and their average latency, deployments,
// incidents), and the ClickHouse schema that stores them. The gateway
// (examples/gateway -pipeline devmetrics) and the processor
// (examples/processor -pipeline devmetrics) take their domain from here;
// the all-in-one demo (make demo) runs those binaries.
//
// # Tour
//
// Normalize turns one delivery into an Event and says which person is its
// employee (see Event). On the gateway, Check answers an activity the
// metrics do not count 200 without publishing it, and a payload that
// cannot be normalized 422 with the reason; PartitionKey keys the Kafka
// record by organisation, so each employee's hour lives in one partition.
//
// On the processor, BuildChain builds one partition's chain for
// kafkasource.Chains: Decode, dedup by organisation, source and delivery id, the
// events into normalized_events, and hourly windows (Agg) that fire early
// (a partial row every Config.EarlyEvery events, replaced by the final
// row) into employee_metrics_window. A record Decode cannot read goes to
// Config.DeadLetterTopic once.
//
// DDL and CreateTables make the schema: normalized_events, the
// materialized view mv_employee_metrics_hourly into employee_metrics_hourly
// (a MergeTree of aggregate states that keeps each row's block number),
// the deployments and incidents ReplacingMergeTree tables fed by views, and
// employee_metrics_window. EventSchema and WindowSchema map the rows for
// chsink.
//
// # Guarantees
//
// Given a gateway that publishes every accepted delivery at least once
// (package idempotency) and a kafkasource.Source with checkpoints, every
// normalizable delivery is counted exactly once in every table, across
// kills of the processor, of Kafka and of ClickHouse:
//   - dedup drops a delivery id seen before (lost acks, restarted
//     gateways, providers' redeliveries), inside the checkpoint;
//   - both sinks flush at every checkpoint and replay their journal with
//     the same insert_deduplication_token, and the tables keep a
//     non_replicated_deduplication_window, so a replayed batch is dropped
//     before the views see it (deduplicate_blocks_in_dependent_materialized_views);
//   - the average review latency is avgStateIf over reviews only: a row that
//     is no review adds the empty state, never a sample of 0;
//   - deployments, incidents and employee_metrics_window are
//     ReplacingMergeTree tables: read them with FINAL (or argMax by
//     version), since a row written again is collapsed only by a merge.
//
// Exact per-employee hours need each organisation's events in one
// partition: use PartitionKey on the gateway.
//
// # Naive joints
//
// Naive names the five joints of the articles done the naive way (naive.go),
// for the demo to run one beside the correct pipeline and print both
// figures (make demo NAIVE=gateway|sink|merge|mv|avg). They are the bugs
// this package's Guarantees rule out; never use them for real data.
package devmetrics
