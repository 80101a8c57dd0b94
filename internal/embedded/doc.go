// Package embedded starts the servers the pipeline needs on one machine with
// nothing installed by hand: ClickHouse (clickhouse-local from libchdb.so,
// serving the native TCP protocol), Kafka (Apache Kafka's broker in KRaft
// mode, a java process; or franz-go's kfake, in process, for request hooks),
// Redis (Debian's redis-server) and S3 (versitygw over a directory). The demo uses it directly; tests use it
// through testkit.
//
// A tour:
//
//	ch, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{})
//	defer ch.Stop()
//	ch.Addr()          // 127.0.0.1:port for ch-go
//	ch.Kill()          // kill -9, waits until the process is gone
//	ch.Restart(ctx)    // same directory and port, waits until ready
//
//	ak, err := embedded.StartApacheKafka(ctx, embedded.ApacheKafkaOptions{Nodes: 3}) // 4.4.0; Version: ApacheKafka39
//	defer ak.Close()
//	ak.Node(2).Kill()  // kill -9 one broker; ak.Node(2).Start(ctx) brings it back
//	// Controllers: 1 adds a dedicated KRaft controller (node 4): two brokers
//	// down, the ISR below min.insync.replicas, and the quorum still stands.
//	// Security: KafkaSecurity{Users: ..., CertPEM: ..., KeyPEM: ...} adds
//	// SASL_PLAINTEXT, SSL and SASL_SSL listeners: ak.BrokersOn(embedded.KafkaSASLSSL).
//
//	k, err := embedded.StartKafka(embedded.KafkaOptions{})
//	defer k.Close()
//	err = embedded.CreateTopic(ctx, k.Brokers(), "events", 3)
//
//	kp, err := embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{DataDir: dir})
//	kp.Kill()          // kill -9 the broker; kp.Start(ctx) brings it back
//
//	// wire-level faults, in either broker (package kafkafault):
//	kp.InjectFault(ctx, kafkafault.Fault{Kind: kafkafault.ProduceLostAck}) // written, never acknowledged
//	k.InjectFault(ctx, kafkafault.Fault{Kind: kafkafault.GroupError, Count: 2})
//	kp.FaultStats(ctx) // what each kind hit
//
//	r, err := embedded.StartRedis(ctx, embedded.RedisOptions{})
//	defer r.Stop()
//
//	zk, err := embedded.StartZooKeeper(ctx, embedded.ZooKeeperOptions{})
//	defer zk.Stop()
//	zk.Kill()          // kill -9; zk.Start(ctx) brings it back with its znodes
//	r1, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{
//		ZooKeeper: zk.Addr(), Macros: map[string]string{"shard": "s1", "replica": "r1"}})
//	// ReplicatedMergeTree tables are created there, but stay read-only:
//	// clickhouse-local never activates a replica (docs/replicated.md).
//
//	s3, err := embedded.StartS3(ctx, embedded.S3Options{})
//	defer s3.Stop()
//	s3.Endpoint()      // http://127.0.0.1:port, root credentials S3AccessKey/S3SecretKey
//	s3.Kill()          // kill -9; s3.Start(ctx) brings it back on the same directory
//
// ClickHouse needs libchdb.so (566 MB) from the npm package
// @chdb/lib-linux-x64-gnu. EnsureChDB fetches it with `npm pack` into the
// cache directory (CacheDir: $EXACTLYONCE_CACHE, else
// $HOME/.cache/exactlyonce) once, under a file lock, and extracts it beside
// the tarball. The launcher, a small cgo program that dlopens the library
// (so this module builds and vets without it), is compiled with `go build`
// into the cache the first time, keyed by a hash of its source. The Kafka
// broker process (kfakeserver) is built the same way, from this module, so
// StartKafkaProcess must run with the working directory inside the module.
// Apache Kafka's jars (kafka_2.13 4.4.0, 4.2.2, 4.0.2 and 3.9.2 with their
// dependencies, about 45 MB each) come from Maven (EnsureApacheKafka,
// EnsureMaven) into the cache the first time, and a formatted KRaft
// directory per release, node count and transaction.version beside them
// (kafka-format/), copied for each new cluster. EnsureMavenProject builds a
// Maven project of the tests' own (Kafka's Java clients, internal/kafkajava)
// into the cache, keyed by a hash of its source.
// Apache ZooKeeper 3.9.3's jars (13 MB) come from Maven (EnsureMaven) into
// the cache the first time; it runs on the installed java.
// versitygw v1.8.0 is built with `go install` into the cache (about 100 s
// the first time; `make deps` does it ahead), under the same kind of lock.
//
// # Guarantees
//
// Every child process runs in its own process group with Pdeathsig SIGKILL:
// it dies with the program that started it, even on a crash. Kill sends
// SIGKILL to the group and returns only after the process is reaped, so a
// following Restart never races the old process for the port or the data
// directory. Start functions return only once the server answers its
// protocol (ClickHouse: Ping and SELECT version(); Redis: PING; ZooKeeper:
// srvr reports it serving). ZooKeeper keeps its znodes across Kill and
// Start (it syncs its transaction log before it answers a write). ClickHouse
// keeps its data in its directory across Kill and Restart; a Kafka process
// with a DataDir keeps acknowledged records and committed offsets across
// Kill and Start; S3 keeps every object in its directory across Kill and
// Start (versitygw does not fsync, so a power loss could lose some); Redis
// keeps nothing.
//
// # Where kfake differs from Kafka
//
// A consumer-group member that dies while its JoinGroup waits for the
// rebalance is never expired by kfake (about one time in two): it keeps the
// partitions the leader assigned it, and nobody reads them. Kafka expires
// it after its session timeout. ExpireMembers (KafkaOptions and
// KafkaProcessOptions) restores Kafka's behaviour; the details, and a test
// that fails without it, are in package kafkafault.
//
// # Known issue: clickhouse-local aborts when a client dies
//
// Killing a client with SIGKILL makes clickhouse-local abort now and then
// (measured on 26.7: 6 of 150 kills, after the client's insert had
// completed). Its log says why: the connection's reset escapes the TCP
// handler ("Terminate called for uncaught exception: Code: 210.
// DB::NetException: Connection reset by peer, while reading from socket",
// then "Received signal 6"), a chdb fault; a server would log the broken
// connection and go on. The abort is not instant: the signal handler
// sleeps about three seconds to let the log flush, and the process serves
// the queries already running meanwhile (a new connection's handshake waits)
// before it dies like a kill -9. Crashed reports it with the tail of the
// server's log (errors and worse; clickhouse-local logs nothing unless
// told to), and EnsureRunning starts the server again on the same data,
// which is what the demo's watchdog and testkit do. Tests that kill clients
// must expect it, or keep the reset from the server: testkit's shared
// server sits behind a proxy that turns a dead client's reset into an
// orderly close (measured: 0 aborts in 80 kills during LZ4 inserts behind
// it, 14 in 160 without).
package embedded
