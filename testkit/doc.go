// Package testkit starts the servers an exactly-once pipeline needs, for
// tests in your own module: ClickHouse 26.7, Kafka and Redis, real servers
// on loopback ports, stopped at the test's cleanup. It also creates topics
// and reads tables back, FINAL included.
//
// # Tour
//
//	func TestPipeline(t *testing.T) {
//		chAddr, db := testkit.ClickHouse(t)   // shared server, fresh database per test
//		brokers := testkit.Kafka(t)           // Apache Kafka 4.4, one broker per test binary
//		redisAddr := testkit.Redis(t)         // redis-server per test
//		topic := testkit.Name(t, "events")    // unique, so shared servers never collide
//		testkit.CreateTopic(t, brokers, topic, 3)
//		// ... run the pipeline ...
//		rows := testkit.Table(t, chAddr, db, "org_minute", testkit.Final)
//	}
//
// StartClickHouse, StartRedis and StartApacheKafka give a test a dedicated
// server it may kill and restart (Kill, Restart, Stop, Start), for failure
// tests; StartApacheKafka with Nodes 3 gives a three-broker Apache Kafka
// cluster (replication factor 3, min.insync.replicas 2) whose brokers are
// killed or stopped one at a time (KillNode, StopNode, StartNode), and with
// Controllers 1 a dedicated KRaft controller beside them, so that two
// brokers down leave the cluster answering; those tests run under
// SkipUnlessKafkaCluster (make test-cluster). StartKfake gives a test an
// in-process kfake cluster whose requests it may intercept
// (Cluster().ControlKey), and StartKfakeProcess a kfake broker process.
// StandaloneClickHouse and StandaloneRedis start a server without a test,
// for runnable examples.
//
// ReplicatedClickHouse gives a test a server that knows a ZooKeeper (one
// embedded Apache ZooKeeper per test binary), where ReplicatedMergeTree
// tables can be created and checked; clickhouse-local keeps them
// read-only (docs/replicated.md says why). TLS and TLSFor make a
// certificate that is its own CA, TLSProxy puts a TLS terminator in front
// of any server the kit started (clickhouse-local listens in plaintext
// only), and WriteCA writes the CA file a -clickhouse-ca flag reads.
//
// Your own service runs under the test's supervision as a Process:
// Command starts a binary, Func a func(ctx) error in a process of its own
// (the test binary again), so that the test can Kill it (SIGKILL), Stop and
// Continue it (SIGSTOP, SIGCONT), Restart it, Terminate it gracefully and
// notice when it exits on its own (Exited, Wait); its output is kept (Logs)
// and printed when the test fails:
//
//	cfg := testkit.Setup(t, "config", func() Config { // runs in the test process only
//		addr, db := testkit.ClickHouse(t)
//		return Config{Brokers: testkit.Kafka(t), ClickHouse: addr, Database: db}
//	})
//	svc := testkit.Func(t, "aggregator", func(ctx context.Context) error { return run(ctx, cfg) })
//	// ... input arriving from a goroutine of the test ...
//	rows := func() (uint64, error) { return testkit.QueryCount(ctx, cfg.ClickHouse, cfg.Database, "SELECT count() FROM events") }
//	svc.KillWhileGrowing(ctx, rows) // SIGKILL while it writes rows
//	svc.Start()
//	testkit.EventuallyRows(t, cfg.ClickHouse, cfg.Database, "SELECT ... FINAL ORDER BY ...", want)
//
// The Func child runs the test again from its start, so servers reach it
// through Setup, never through the closure alone: in a Func child the
// kit's server functions refuse to start a server, and Func fails the test
// with a message that says so.
//
// Two subpackages keep this one light: testkit/s3kit gives a test an S3
// bucket (versitygw) and imports the AWS SDK; testkit/webhookkit hands out
// GitHub's own example webhooks and signatures and Jira issue events, and
// sends deliveries as each idempotency preset's provider does (Delivery:
// delivery id, event type, signature and retry headers; Send, from any
// goroutine, returns the whole answer) to a real idempotency.Handler, to
// your gateway or to one it starts in one call (Gateway). Importing
// testkit alone adds no AWS module to your go.mod.
//
// # What it needs
//
// ClickHouse is clickhouse-local from libchdb.so (the npm package
// @chdb/lib-linux-x64-gnu 26.7.3-stable.1, 178 MB compressed, 566 MB
// unpacked), served on the native TCP protocol by a small cgo launcher. On
// first use the kit fetches the package with `npm pack`, unpacks it and
// builds the launcher, once per machine, under a file lock, into
// $EXACTLYONCE_CACHE (default ~/.cache/exactlyonce); a progress line goes
// to standard error meanwhile (the first start takes a minute or two, later
// ones half a second). $EXACTLYONCE_CLICKHOUSE names another version of the
// package, fetched the same way: of those published, only the 26.7 line's
// clickhouse-local serves TCP (docs/clickhouse-versions.md of the
// repository). So the machine needs npm, a C compiler (cgo) and the
// Go toolchain, on linux/amd64. Redis needs redis-server on the PATH or at
// /usr/bin/redis-server (Debian: apt-get install redis-server). Kafka is
// Apache Kafka's own broker in KRaft mode, a java process: on first use the
// kit fetches its jars (org.apache.kafka:kafka_2.13 and dependencies, about
// 45 MB per release) with Maven into the cache, so the machine needs java
// 17 or later and mvn (Debian: apt-get install maven default-jre-headless).
// $EXACTLYONCE_KAFKA chooses the release: apache-4 (4.4.0, the default),
// apache-3.9 (3.9.2), or kfake (franz-go's fake broker, in process, a fresh
// one per test, nothing to fetch). The brokers run with test timing
// (group.initial.rebalance.delay.ms 0, group.min.session.timeout.ms 100
// ms); ApacheKafkaOptions.KafkaDefaults keeps Kafka's own.
// ZooKeeper (for ReplicatedClickHouse) needs java and mvn too: its jars
// come from Maven into the same cache on first use (about 13 MB).
//
// # Servers you already run
//
// CLICKHOUSE_ADDR (host:port, native protocol), KAFKA_BROKERS
// (comma-separated), REDIS_ADDR and S3_ENDPOINT (with S3_ACCESS_KEY_ID,
// S3_SECRET_ACCESS_KEY, S3_REGION, S3_BUCKET) point the kit at existing servers;
// nothing is downloaded or started for them. Tests share them, so name
// topics, groups and keys with Name; ClickHouse still gets a fresh database
// per test. StartClickHouse skips the test when CLICKHOUSE_ADDR is set: it
// hands out a process to kill.
//
// Outside tests, `go run github.com/exactlyonce/exactlyonce/cmd/embedded-clickhouse`
// serves the same embedded ClickHouse on a port.
//
// # Guarantees
//
// A server that cannot start skips the test with the reason, unless
// CI=true, where it fails the test: CI never passes by skipping. Every
// process the kit starts runs in its own process group, is stopped at
// cleanup and is killed by the kernel if the test binary dies. Kill is
// SIGKILL and returns once the process is gone; Restart reuses the data
// directory and port, so data survives it.
//
// ClickHouse hands out the address of a proxy in the test process in
// front of the shared server, which turns a killed client's reset into an
// orderly close: clickhouse-local 26.7 aborts on such a reset, behind the
// proxy it never sees one (docs/testing.md has the measurement). Should
// the shared server exit all the same, the kit starts it again on the
// same data and port and says so in one line; its log goes to a file.
//
// A process Func starts never gets servers of its own from the kit: asked
// for one, it exits before starting anything, and Func (or Start) fails
// the test with the reason instead of returning. Func and Start return once
// fn runs.
package testkit
