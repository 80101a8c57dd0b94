// Package chaos is the chaos run: the demo's pipeline under a long
// randomized fault schedule, checked against the ground truth and by
// history checkers.
//
// Run (make chaos, command harness/cmd/chaos) is the demo's pipeline
// (package harness/internal/demo) under a long randomized schedule drawn from a
// seed, with the faults the demo does not inject (Kinds): processors killed at random,
// while they write a checkpoint (frozen with SIGSTOP until a checkpoint
// file is being written), right after a restart while they restore and
// replay their sink journals, and while their consumer group rebalances;
// processors frozen (SIGSTOP) longer than the group's session timeout,
// at random and while they write a checkpoint, then continued (SIGCONT);
// the gateway killed between claim and complete (Kafka's answers held
// back until its metrics show claims whose publish has not returned);
// Redis restarted, and down for 2.5 to 4 s; the broker killed, and failing
// single produce, fetch, offset-commit and group requests, losing produce
// acknowledgements after the write, dropping connections and answering
// slowly (package kafkafault); ClickHouse killed during an insert, slowed
// (the processors reach it through a proxy that delays every chunk), and
// written to by another writer beside the processors (rows of
// organisations demo.OtherWriterOrg, which the verdict leaves out); the
// processors' wall clock jumping by up to 10 minutes either way (the demo
// build's -clock-offset-file); the S3 server killed with checkpoints on
// S3. The demo's pipeline writes no Kafka transaction (no kafkasink), so
// the run adds a transactional writer of its own (kafkatxn.TxProducer,
// committing four transactions in five, aborting the rest) under the same
// faults, and two kinds aimed at it: held past its transaction timeout
// between its last produce and its commit, and its transactional id
// expired by the broker (kfake only). Config.KafkaSink adds a
// transactional leg to the processors instead (on Apache Kafka): every
// record they process is written again through a kafkasink.Sink, and
// processor-pause-checkpoint freezes them past its transaction timeout.
//
// The run records its history (package history): every send of a webhook
// and its answer, every transaction of the writer and its outcome, the
// polls of read_committed consumers of the pipeline's topic and of the
// writer's, the consumer group's committed offsets, and the final reads of
// ClickHouse and of both topics. Config.History keeps it as JSON lines.
//
// The deliveries advance with the
// schedule, so faults land while data flows. It prints a live progress
// line and a closing table: faults by kind (and how many landed on the
// moment they aim at), SIGKILLs by service, events sent and accepted, rows
// per table, lost and duplicated events, every metric against the ground
// truth, what the history checkers found, and the latency from a
// webhook's first send to its row (p50, p99); it writes the same as JSON
// and fails, printing the seed, on any difference. The seed replays the
// events and the order of the faults, not their exact timing. TestChaos is
// its short version in make test.
// With a server of your own named in the environment (CLICKHOUSE_ADDR,
// KAFKA_BROKERS, REDIS_ADDR, S3_ENDPOINT) the run uses it and leaves out
// the kinds that would kill or instrument it; the other kinds still run.
// The wire-level kinds (kafka- and a kafkafault kind) and txn-id-expiry
// need kfake, the default broker; Config.Kafka demo.KafkaApache (make
// chaos KAFKA=apache) runs every other kind on Apache Kafka, kafka-kill
// killing its JVM.
//
// # Guarantees
//
// A run passes only when ClickHouse holds every event the providers sent
// exactly once, every metric equals the ground truth, and the history
// checkers find nothing: no acknowledged webhook missing from the topic or
// from ClickHouse, none twice in ClickHouse, no committed transaction's
// record missing or read twice, with Config.KafkaSink no record of the
// pipeline's topic (the poison ones aside) missing from the processors'
// output or there twice, no aborted transaction's record read, no
// record read that nobody wrote, no consumer poll that goes backwards,
// skips a record of the final read or disagrees with it, and no committed
// offset that goes backwards. Otherwise Run's error wraps ErrMismatch and
// names the seed, which replays the events and the order of the faults; a
// failing run's history is written to a file it names.
package chaos
