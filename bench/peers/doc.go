// Package peers runs one job on the SDK, Apache Flink 2.2 and Kafka
// Streams 4.4, side by side on the same servers and the same input, and
// checks each system's output against the input's ground truth
// (make bench-peers; BENCHMARKS.md has the figures).
//
// The job: N JSON events on 4 partitions of one topic (~5 % of them sent
// again, every tenant on one partition, event times over minutes); keep
// the first sight of each event id (24 h), write it to a MergeTree table
// (events), and count the first sights per tenant and event-time minute
// into a ReplacingMergeTree (tenant_minute, read with FINAL). The SDK's
// job is sdkjob; the peers' are the Maven projects flink/ and kstreams/,
// built into the cache by make bench-peers, never into the tree.
//
// # Guarantees
//
// A figure is reported only for an output that matches the ground truth:
// every event id once in events, every (tenant, minute) count exact. A
// mismatch fails TestPeers and gives no figure. The peers' ClickHouse
// outputs are at-least-once (neither ships an exactly-once ClickHouse
// sink); without failures they are exact, which is all this run checks.
package peers
