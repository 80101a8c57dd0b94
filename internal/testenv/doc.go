// Package testenv gives every test in the module real servers: ClickHouse
// 26.7, Kafka and Redis. Tests never talk to mocks.
//
// A tour:
//
//	addr, db := testenv.ClickHouse(t)   // shared server, fresh database per test
//	srv := testenv.StartClickHouse(t)   // dedicated server: Kill, Restart, Stop
//	brokers := testenv.Kafka(t)         // in-process kfake cluster per test
//	testenv.CreateTopic(t, brokers, topic, 3)
//	ks := testenv.StartKafkaProcess(t)  // broker in its own process: Kill, Start
//	addr := testenv.Redis(t)            // fresh redis-server per test
//	rs := testenv.StartRedis(t)         // dedicated: Stop, Start, Kill
//	cfg := testenv.S3(t)                // fresh bucket; cfg.Client() is an S3 client
//	ss := testenv.StartS3(t)            // dedicated versitygw: Kill, Start; ss.NewBucket(t)
//	topic := testenv.Name(t, "events")  // unique names for shared servers
//
// Every server started here is stopped at the test's cleanup; processes are
// also killed by the kernel if the test binary dies (Pdeathsig). It is a
// thin layer over the public test kit (package testkit), which users import
// from their own modules: the shared ClickHouse, Kafka, Redis, CreateTopic
// and Name are the kit's. What stays here hands tests the internal/embedded
// handles for fault injection (StartClickHouse's Server, StartKafka's kfake
// cluster, StartKafkaProcess).
//
// # External servers
//
// CLICKHOUSE_ADDR, KAFKA_BROKERS, REDIS_ADDR and S3_ENDPOINT (with
// S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, S3_REGION and optionally S3_BUCKET)
// point ClickHouse, Kafka, Redis and S3 at existing servers; nothing is
// downloaded, built or started for them.
// Such servers are shared by every test, so tests name their topics, groups
// and keys with Name. ClickHouse still gets a fresh database per test. The
// Start* functions always start a dedicated local server, since they hand
// the test a process to kill; StartClickHouse skips when CLICKHOUSE_ADDR is
// set.
//
// # Guarantees
//
// A service that cannot start skips the test with the reason, unless
// CI=true, where it fails the test: CI never passes by skipping. Servers are
// real: ClickHouse is clickhouse-local from libchdb.so serving the native
// protocol; Kafka is franz-go's kfake, which implements the broker protocol
// (acks=all produce, classic consumer groups, offset commits); Redis is
// Debian's redis-server without persistence; S3 is versitygw v1.8.0 over a
// temporary directory. Kill is SIGKILL and waits for
// the process to be gone; Restart reuses the data directory and port.
package testenv
