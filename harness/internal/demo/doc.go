// Package demo is the harness of the all-in-one demo (make demo, command
// harness/cmd/demo) and of TestPipelineUnderFaults: it runs the deployable
// binaries examples/gateway and examples/processor with -pipeline
// devmetrics as child processes, exactly as users run them, and proves
// their result: simulated GitHub and Jira Cloud webhooks → the gateway →
// Kafka → the checkpointed processors (normalize, dedup, hourly
// per-employee windows with early firings, a dead-letter topic) →
// ClickHouse, with faults injected at every joint, then every per-employee
// metric in ClickHouse compared with the ground truth.
//
//	go run ./harness/cmd/demo            # embedded ClickHouse and Kafka (kfake)
//	go run ./harness/cmd/demo -kafka apache  # on Apache Kafka 4.4 (make demo KAFKA=apache)
//	go run ./harness/cmd/demo -events 20000 -kills 5
//
// Its pieces are usable on their own (the chaos run, package
// harness/internal/chaos, drives them): StartServers (embedded ClickHouse with a
// watchdog, Kafka in its own process: kfake, or Apache Kafka with -kafka
// apache), BuildBinaries and StartGateway,
// Supervisor (keeps processor processes running, kills one with SIGKILL on
// request), Pipeline (one run's servers, gateway, processors and
// providers), FaultPlan (what to kill at which delivery), and Run, the
// whole demo from a Config.
//
// Providers behave like the real ones. GitHub sends payloads built from
// GitHub's own examples (@octokit/webhooks-examples, fetched into the cache)
// with ids, times and people varied, 30% of them form-encoded, plus pings;
// it sends each delivery once and never retries: a fake GitHub REST API
// records every delivery and its status code, and a
// githubredeliver.Redeliverer lists the failed ones and requests their
// redelivery. Jira Cloud sends issue payloads shaped as Atlassian documents
// them and retries 408, 409, 425, 429, 5xx and timeouts (its 30 minutes
// compressed into seconds), with X-Atlassian-Webhook-Retry. The generator
// builds each delivery's expected event independently of the normalizer
// (examples/devmetrics), which the verdict compares against.
//
// While the webhooks are delivered, a dashboard (dashboard.go) polls
// employee_metrics_window and the run fails unless it saw partial rows of
// hours that had not closed yet; the verdict then requires the FINAL rows
// to be exact, the materialized-view rollup and the deployments and
// incidents tables too, and each poison record once in the dead-letter
// topic.
//
// Faults: Kafka publishes that fail before the write (the gateway's
// -inject-publish-failures), produce acknowledgements lost at the wire
// after the broker wrote the batch (kafkafault.ProduceLostAck, on kfake;
// the gateway's idempotent producer must write no duplicate; on Apache
// Kafka, which has no such hook, the gateway loses them itself), duplicate
// deliveries, the processor killed with SIGKILL, ClickHouse killed with
// SIGKILL and restarted, the Kafka broker likewise, a gateway restart
// (SIGTERM) with manual redeliveries, two poison records written straight
// to Kafka. CLICKHOUSE_ADDR and KAFKA_BROKERS point it at your own servers
// instead (which are then not killed).
//
// kfake runs with ExpireMembers: kfake alone keeps a processor killed
// while its group rebalances as a member for good (see package
// internal/embedded/kafkafault), which Kafka expires after its session
// timeout.
package demo
