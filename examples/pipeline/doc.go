// Command pipeline runs the whole exactly-once pipeline on one machine and
// proves its result: simulated GitHub and Jira webhooks → the idempotent
// gateway → Kafka → a checkpointed stream processor (dedup, one-minute
// windows) → ClickHouse, with faults injected at every joint, then compares
// ClickHouse with the events the providers sent.
//
//	go run ./examples/pipeline            # embedded ClickHouse and Kafka
//	go run ./examples/pipeline -events 20000 -kills 5
//
// Faults: Kafka publishes that fail before or after the write, duplicate
// deliveries, the stream processor killed with SIGKILL, ClickHouse killed with
// SIGKILL and restarted, the Kafka broker likewise. CLICKHOUSE_ADDR and
// KAFKA_BROKERS point it at your own servers instead (which are then not
// killed).
package main
