// Package peers runs one job on the SDK, Apache Flink 2.2 and Kafka
// Streams 4.4, side by side on the same servers and the same input, and
// checks each system's output against the input's ground truth
// (make bench-peers; docs/bench/REPORT.md has the figures).
//
// The job: N JSON events on 4 partitions of one topic (~5 % of them sent
// again, every tenant on one partition, event times over minutes); keep
// the first sight of each event id (24 h), write it to a MergeTree table
// (events), and count the first sights per tenant and event-time minute
// into a ReplacingMergeTree (tenant_minute, read with FINAL). The SDK's
// job is sdkjob; the peers' are the Maven projects flink/ and kstreams/,
// built into the cache by make bench-peers, never into the tree.
//
// # Modes
//
// PEERS_MODES picks them; each system runs in each, in its own process
// writing to its own database.
//
//   - ckpt: checkpoints every second. Events/s from the start of the
//     process to a complete output, and steady (from the first output row:
//     JVM and Go start-up left out); the job process's CPU-seconds per
//     million input events (utime+stime from /proc), its peak RSS (VmHWM),
//     the time to the first output row.
//   - nockpt: the same without checkpoints; ckpt over nockpt is the
//     checkpoints' overhead. The SDK runs sdkjob -interval -1s: the
//     coordinator takes none, and the chsink sinks insert by size and by
//     their MaxDelay (1 s) as they do between checkpoints. Flink runs
//     without enableCheckpointing; its ClickHouse sink, which otherwise
//     sends its buffer at every checkpoint, sends it at 50,000 rows and a
//     second after its first row (a processing-time timer), as chsink
//     does by its MaxDelay. Kafka Streams cannot stop committing (a commit is its
//     checkpoint: the stores flushed, the offsets committed); the fair
//     analogue is at_least_once with the same one-second commit interval,
//     which drops what exactly_once_v2 adds for the checkpoint's atomicity
//     (a transaction per commit, read_committed fetches), as the other two
//     drop their barrier and snapshot.
//   - recovery: with checkpoints every second, the job process is killed
//     (SIGKILL, no shutdown) once the events table holds half the unique
//     events, and started again the same way: the SDK with the same
//     checkpoint directory and group; Flink, whose local MiniCluster dies
//     with its JVM, from the last completed checkpoint (externalized
//     retention keeps it; the restart passes it as
//     execution.state-recovery.path, as a JobManager's failover would
//     restore it); Kafka Streams with the same application id and state
//     directory (its committed offsets and changelogs). Reported: the time
//     from the kill until the output is complete again, and what it then
//     holds beyond the truth.
//
// # What was tuned
//
// Flink: parallelism 2 (the machine's cores), HashMap state (RocksDB and
// parallelism 1 as variants), checkpoints to the file system (the
// JobManager's memory refuses state over 5 MB), restarts disabled (a
// failure ends the run instead of looping), a ClickHouse sink batching
// 50,000 rows over HTTP (a bridge in the test process forwards to the kit's
// ClickHouse, its CPU not the job's), watermarks that skip a partition
// idle for 10 s (watermarks are not in a checkpoint: after a restore, a
// partition read to its end before it would hold every window back for
// good; the SDK's windows, one per partition, have no such wait). Kafka
// Streams: two stream threads,
// 64 MB of record cache, max.poll.records 2000, one in-flight request per
// producer connection (five left exactly_once_v2 stuck on
// OUT_OF_ORDER_SEQUENCE_NUMBER on the kit's broker), and a 10 s session
// timeout (the SDK's kafkasource default instead of 45 s, which a kill -9
// would otherwise wait out before the restart gets its partitions). A
// Flink engineer would still try object reuse, a larger network buffer
// timeout and unaligned checkpoints; a Kafka Streams one static membership
// (group.instance.id) for restarts and more threads per partition.
//
// # Guarantees
//
// A figure is reported only for an output that matches the ground truth:
// every event id once in events, every (tenant, minute) count exact. A
// mismatch fails TestPeers and gives no figure. After a kill the SDK's
// output must still be exact: a duplicate or a missing row fails the run.
// The peers' ClickHouse outputs are at-least-once (neither ships an
// exactly-once ClickHouse sink): after their recovery, extra events rows
// and over-counted windows are counted and reported, and only a missing
// event or an under-counted window fails. Kafka Streams' output topics
// are exactly-once and its loader (a plain consumer in the test process,
// never killed) reads them read_committed, so its duplicates stay at 0
// unless a commit is lost.
package peers
