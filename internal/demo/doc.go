// Package demo is the harness of the all-in-one demo (make demo, command
// internal/cmd/demo) and of TestPipelineUnderFaults: it runs the deployable
// binaries examples/gateway and examples/processor with -pipeline
// devmetrics as child processes, exactly as users run them, and proves
// their result: simulated GitHub and Jira Cloud webhooks → the gateway →
// Kafka → the checkpointed processors (normalize, dedup, hourly
// per-employee windows with early firings, a dead-letter topic) →
// ClickHouse, with faults injected at every joint, then every per-employee
// metric in ClickHouse compared with the ground truth.
//
//	go run ./internal/cmd/demo            # embedded ClickHouse and Kafka
//	go run ./internal/cmd/demo -events 20000 -kills 5
//
// Its pieces are usable on their own (the chaos runner reuses them):
// StartServers (embedded ClickHouse with a watchdog, Kafka in its own
// process), BuildBinaries and StartGateway, Supervisor (keeps processor
// processes running, kills one with SIGKILL on request), FaultPlan (what
// to kill at which delivery), and Run, the whole demo from a Config.
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
// after the broker wrote the batch (kafkafault.ProduceLostAck; the
// gateway's idempotent producer must write no duplicate), duplicate
// deliveries, the processor killed with SIGKILL, ClickHouse killed with
// SIGKILL and restarted, the Kafka broker likewise, a gateway restart
// (SIGTERM) with manual redeliveries, two poison records written straight
// to Kafka. CLICKHOUSE_ADDR and KAFKA_BROKERS point it at your own servers
// instead (which are then not killed).
//
// # The chaos run
//
// RunChaos (make chaos, command internal/cmd/chaos; chaos*.go) is the same
// pipeline under a long randomized schedule drawn from a seed, with the
// faults the demo does not inject (ChaosKinds): processors killed at random,
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
//
// The broker runs with ExpireMembers: kfake alone keeps a processor killed
// while its group rebalances as a member for good (see package
// internal/embedded/kafkafault), which Kafka expires after its session
// timeout.
package demo
