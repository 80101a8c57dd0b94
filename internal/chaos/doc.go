// Package chaos is the chaos run: the demo's pipeline under a long
// randomized fault schedule, checked against the ground truth.
//
// Run (make chaos, command internal/cmd/chaos) is the demo's pipeline
// (package internal/demo) under a long randomized schedule drawn from a
// seed, with the faults the demo does not inject (Kinds): processors killed at random,
// while they write a checkpoint (frozen with SIGSTOP until a checkpoint
// file is being written), right after a restart while they restore and
// replay their sink journals, and while their consumer group rebalances;
// the gateway killed between claim and complete (Kafka's answers held
// back until its metrics show claims whose publish has not returned);
// Redis restarted, and down for 2.5 to 4 s; the broker killed, and failing
// single produce, fetch, offset-commit and group requests, losing produce
// acknowledgements after the write, dropping connections and answering
// slowly (package kafkafault); ClickHouse killed during an insert; the S3
// server killed with checkpoints on S3. The deliveries advance with the
// schedule, so faults land while data flows. It prints a live progress
// line and a closing table: faults by kind (and how many landed on the
// moment they aim at), SIGKILLs by service, events sent and accepted, rows
// per table, lost and duplicated events, every metric against the ground
// truth, and the latency from a webhook's first send to its row (p50,
// p99); it writes the same as JSON and fails, printing the seed, on any
// difference. The seed replays the events and the order of the faults,
// not their exact timing. TestChaos is its short version in make test.
// With a server of your own named in the environment (CLICKHOUSE_ADDR,
// KAFKA_BROKERS, REDIS_ADDR, S3_ENDPOINT) the run uses it and leaves out
// the kinds that would kill or instrument it; the other kinds still run.
// The wire-level kinds (kafka- and a kafkafault kind) need kfake, the
// default broker; Config.Kafka demo.KafkaApache (make chaos KAFKA=apache)
// runs every other kind on Apache Kafka, kafka-kill killing its JVM.
//
// # Guarantees
//
// A run passes only when ClickHouse holds every event the providers sent
// exactly once and every metric equals the ground truth; otherwise Run's
// error wraps ErrMismatch and names the seed, which replays the events and
// the order of the faults.
package chaos
