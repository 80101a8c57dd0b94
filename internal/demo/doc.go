// Command pipeline runs the whole exactly-once pipeline on one machine and
// proves its result: simulated GitHub and Jira Cloud webhooks → the
// idempotent gateway → Kafka → a checkpointed stream processor (normalize,
// dedup, hourly per-employee windows) → ClickHouse, with faults injected at
// every joint, then compares every per-employee metric in ClickHouse with
// the ground truth.
//
//	go run ./examples/pipeline            # embedded ClickHouse and Kafka
//	go run ./examples/pipeline -events 20000 -kills 5
//
// Providers behave like the real ones. GitHub sends payloads built from
// GitHub's own examples (@octokit/webhooks-examples, fetched into the cache)
// with ids, times and people varied, 30% of them form-encoded, plus pings;
// it sends each delivery once and never retries: a fake GitHub REST API
// records every delivery and its status code, and a
// githubredeliver.Redeliverer lists the failed ones and requests their
// redelivery. Jira Cloud sends issue payloads shaped as Atlassian documents
// them and retries 408, 409, 425, 429, 5xx and timeouts (its 30 minutes
// compressed into seconds), with X-Atlassian-Webhook-Retry.
//
// The gateway normalizes every delivery before it claims anything
// (normalize.go says which person is the employee of each event): an
// activity the metrics do not count, or a ping, is answered 200 and not
// published; a payload that cannot be normalized is answered 422 with the
// reason. The processor normalizes the published payload again; a record it
// cannot normalize (the demo writes two such records straight to Kafka) goes
// to a dead-letter topic exactly once.
//
// ClickHouse holds the articles' schema (tables.go): normalized_events, the
// hourly rollup mv_employee_metrics_hourly → employee_metrics_hourly,
// deployments and incidents as ReplacingMergeTree read with FINAL, and
// employee_metrics_window, the same metrics computed by the window operator,
// whose hourly windows fire early: a partial row every few events, replaced
// by the final row (ReplacingMergeTree by version, read with FINAL). While
// the webhooks are delivered, a dashboard (dashboard.go) polls that table
// and the run fails unless it saw partial rows of hours that had not closed
// yet; the verdict then requires the FINAL rows to be exact.
//
// Faults: Kafka publishes that fail before or after the write, duplicate
// deliveries, the stream processor killed with SIGKILL, ClickHouse killed
// with SIGKILL and restarted, the Kafka broker likewise, a gateway restart
// with manual redeliveries. CLICKHOUSE_ADDR and KAFKA_BROKERS point it at
// your own servers instead (which are then not killed).
package demo
