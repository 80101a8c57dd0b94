# Commands for a fresh machine: `make demo`, `make chaos`, `make test` and
# `make bench` (the benchmarks and their report). All four install what they need (Debian
# packages, the chdb npm tarball, Go modules). Set CLICKHOUSE_ADDR,
# KAFKA_BROKERS or REDIS_ADDR to use external servers instead; see README.md.

SHELL := /bin/bash

CACHE_DIR    := $(or $(EXACTLYONCE_CACHE),$(HOME)/.cache/exactlyonce)
CHDB_PACKAGE := @chdb/lib-linux-x64-gnu
# EXACTLYONCE_CLICKHOUSE picks another version of the package (the Go code
# honours it too); docs/clickhouse-versions.md says which serve TCP.
CHDB_VERSION := $(or $(EXACTLYONCE_CLICKHOUSE),26.7.3-stable.1)
CHDB_TGZ     := $(CACHE_DIR)/chdb/chdb-lib-linux-x64-gnu-$(CHDB_VERSION).tgz
# The S3 server of the tests, built once into the cache (about 100 s); the
# path and the lock match internal/embedded's EnsureVersityGW.
VGW_VERSION  := v1.8.0
VGW_DIR      := $(CACHE_DIR)/versitygw/$(VGW_VERSION)
# GitHub's maintained example payloads and its signer, the test data of
# idempotency (testkit/webhookkit/github.go reads them from the same place).
OCTOKIT_DIR  := $(CACHE_DIR)/octokit
OCTOKIT_PKGS := @octokit/webhooks-examples@7.6.1 @octokit/webhooks-methods@6.0.0
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps check test-short test test-compat test-consumer-protocol test-classic-protocol test-cluster lint demo chaos sim bench bench-peers

# deps installs only what is missing: redis-server, npm, a C compiler (for
# the cgo ClickHouse launcher), java and maven (for Apache Kafka and
# ZooKeeper) and promtool (package prometheus, for the alert rules' tests)
# from Debian, the chdb tarball (178 MB, under the same lock the Go code
# takes), versitygw (unless S3_ENDPOINT is set), Go modules, Apache
# ZooKeeper's jars (about 13 MB, with Maven, for the replicated ClickHouse
# tests; unless CLICKHOUSE_ADDR is set), Apache Kafka 4.4.0, 4.2.2, 4.0.2
# and 3.9.2's jars (about 45 MB each, with Maven) and the Java clients
# program of the interop tests (internal/kafkajava, built with Maven;
# both unless KAFKA_BROKERS is set or EXACTLYONCE_KAFKA=kfake).
deps:
	@pkgs=""; \
	if [ -z "$${REDIS_ADDR:-}" ] && [ ! -x /usr/bin/redis-server ] && ! command -v redis-server >/dev/null; then pkgs="$$pkgs redis-server"; fi; \
	if ! command -v npm >/dev/null; then pkgs="$$pkgs npm"; fi; \
	if [ -z "$${CLICKHOUSE_ADDR:-}" ] && ! command -v gcc >/dev/null; then pkgs="$$pkgs gcc libc6-dev"; fi; \
	if { [ -z "$${KAFKA_BROKERS:-}" ] && [ "$${EXACTLYONCE_KAFKA:-}" != kfake ]; } || [ -z "$${CLICKHOUSE_ADDR:-}" ]; then \
		command -v java >/dev/null || pkgs="$$pkgs default-jre-headless"; \
		command -v mvn >/dev/null || pkgs="$$pkgs maven"; \
	fi; \
	if [ -n "$$pkgs" ]; then \
		echo "deps: apt-get install$$pkgs"; \
		$(SUDO) apt-get update && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y $$pkgs; \
	fi
	@# promtool checks and tests deploy/prometheus's alert rules (TestAlertRules);
	@# it comes with Debian's prometheus package, without its recommends.
	@if ! command -v promtool >/dev/null; then \
		echo "deps: apt-get install --no-install-recommends prometheus (for promtool)"; \
		$(SUDO) apt-get update && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; \
	fi
	@if [ -z "$${CLICKHOUSE_ADDR:-}" ] && [ ! -f "$(CHDB_TGZ)" ]; then \
		mkdir -p "$(CACHE_DIR)/chdb" && \
		flock "$(CACHE_DIR)/chdb/.lock" bash -euo pipefail -c ' \
			if [ ! -f "$(CHDB_TGZ)" ]; then \
				echo "deps: npm pack $(CHDB_PACKAGE)@$(CHDB_VERSION) into $(CACHE_DIR)/chdb"; \
				tmp=$$(mktemp -d "$(CACHE_DIR)/chdb/npm-pack-XXXXXX"); \
				trap "rm -rf $$tmp" EXIT; \
				(cd "$$tmp" && npm pack --silent "$(CHDB_PACKAGE)@$(CHDB_VERSION)" >/dev/null); \
				mv "$$tmp/$$(basename "$(CHDB_TGZ)")" "$(CHDB_TGZ)"; \
			fi'; \
	fi
	@for spec in $(OCTOKIT_PKGS); do \
		name=$${spec%@*}; version=$${spec##*@}; \
		tgz="$(OCTOKIT_DIR)/$$(echo "$${name#@}" | tr / -)-$$version.tgz"; \
		if [ ! -f "$$tgz" ]; then \
			mkdir -p "$(OCTOKIT_DIR)" && \
			flock "$(OCTOKIT_DIR)/.lock" bash -euo pipefail -c ' \
				if [ ! -f "'"$$tgz"'" ]; then \
					echo "deps: npm pack '"$$spec"' into $(OCTOKIT_DIR)"; \
					tmp=$$(mktemp -d "$(OCTOKIT_DIR)/npm-pack-XXXXXX"); \
					trap "rm -rf $$tmp" EXIT; \
					(cd "$$tmp" && npm pack --silent "'"$$spec"'" >/dev/null); \
					mv "$$tmp/$$(basename "'"$$tgz"'")" "'"$$tgz"'"; \
				fi' || exit 1; \
		fi; \
	done
	@if [ -z "$${S3_ENDPOINT:-}" ] && [ ! -x "$(VGW_DIR)/versitygw" ]; then \
		mkdir -p "$(VGW_DIR)" && \
		flock "$(VGW_DIR)/.lock" bash -euo pipefail -c ' \
			if [ ! -x "$(VGW_DIR)/versitygw" ]; then \
				echo "deps: go install github.com/versity/versitygw/cmd/versitygw@$(VGW_VERSION) into $(VGW_DIR)"; \
				tmp=$$(mktemp -d "$(VGW_DIR)/gobin-XXXXXX"); \
				trap "rm -rf $$tmp" EXIT; \
				(cd "$(VGW_DIR)" && GOBIN="$$tmp" GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 go install github.com/versity/versitygw/cmd/versitygw@$(VGW_VERSION)); \
				mv "$$tmp/versitygw" "$(VGW_DIR)/versitygw"; \
			fi'; \
	fi
	@if [ -z "$${CLICKHOUSE_ADDR:-}" ] && { ! command -v java >/dev/null || ! command -v mvn >/dev/null; }; then \
		echo "deps: apt-get install default-jre-headless maven (for ZooKeeper)"; \
		$(SUDO) apt-get update && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y default-jre-headless maven; \
	fi
	go mod download
	@if [ -z "$${CLICKHOUSE_ADDR:-}" ]; then go run ./harness/cmd/fetchzookeeper; fi
	@if [ -z "$${KAFKA_BROKERS:-}" ] && [ "$${EXACTLYONCE_KAFKA:-}" != kfake ]; then go run ./harness/cmd/fetchkafka; fi

# lint runs staticcheck, pinned by the tool directive in go.mod (go tool
# staticcheck: no install, the version is the module's), with its default
# checks; make test runs it after go vet.
lint:
	go tool staticcheck ./...

# check: what needs no server, in seconds: go vet (with and without the
# demo tag), staticcheck and gofmt.
check:
	go vet ./...
	go vet -tags demo ./examples/... ./harness/...
	go tool staticcheck ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l found unformatted files:"; echo "$$out"; exit 1; fi

# test-short: the tier without servers (go test -short: internal/embedded
# starts nothing and testkit skips what needs a server; examples, whose
# output needs servers, are left out). About a minute, nothing to install
# but Go.
test-short:
	go test -short -count=1 -timeout 10m -run '^(Test|Fuzz)' ./...

# test: everything, on real servers, with the race detector.
test: deps check
	@# .ci/unchanged-tree fails the run if the tests left a file in the checkout.
	.ci/unchanged-tree go test -race -count=1 -timeout 25m ./...

# test-compat runs the Kafka packages' suites across the version matrix
# (docs/kafka-versions.md); make test runs everything on 4.4.0 with
# transaction.version 2. On 3.9.2 (the last 3.x line: transactions v1, the
# protocol versions 4.0 removed still there) the four packages' suites;
# on 4.0.2, 4.2.2, and 4.4.0 formatted with transaction.version 1 (as a
# cluster upgraded from 3.x keeps it) the transaction packages' suites,
# kafkatxn and kafkasink; on every line, Kafka's own Java clients and tools
# against the SDK (internal/kafkajava). Every line runs, a failed one
# fails the target at the end. Without -race: the race detector runs in
# make test, on the same code.
KAFKA_PKGS        := ./checkpoint/kafkasource/... ./idempotency/kafkapub/... ./kafkatxn/... ./sink/kafkasink/...
KAFKA_MATRIX_PKGS := ./kafkatxn/... ./sink/kafkasink/... ./internal/kafkajava/
test-compat: deps
	@rc=0; \
	line() { echo "test-compat: $$1"; shift; env "$$@" || { echo "test-compat: FAILED on that line"; rc=1; }; }; \
	line "Apache Kafka 3.9.2" EXACTLYONCE_KAFKA=apache-3.9 go test -count=1 -timeout 25m $(KAFKA_PKGS) ./internal/kafkajava/; \
	line "Apache Kafka 4.0.2" EXACTLYONCE_KAFKA=apache-4.0 go test -count=1 -timeout 15m $(KAFKA_MATRIX_PKGS); \
	line "Apache Kafka 4.2.2" EXACTLYONCE_KAFKA=apache-4.2 go test -count=1 -timeout 15m $(KAFKA_MATRIX_PKGS); \
	line "Apache Kafka 4.4.0, transaction.version=1" EXACTLYONCE_KAFKA=apache-4 EXACTLYONCE_KAFKA_TRANSACTION_VERSION=1 \
		go test -count=1 -timeout 15m $(KAFKA_MATRIX_PKGS); \
	exit $$rc

# test-consumer-protocol and test-classic-protocol run kafkasource's and
# kafkasink's suites (and examples/processor's) with every Source of the
# tests forced to one group protocol on Apache Kafka 4.4: Kafka's consumer
# group protocol (KIP-848, ProtocolConsumer) or the classic one. make test
# runs them under the default, ProtocolAuto (the consumer protocol on
# 4.4), and make test-compat on 3.9.2 (the classic one). Not in make
# test: they are the suites once more (CI time).
test-consumer-protocol: deps
	EXACTLYONCE_GROUP_PROTOCOL=consumer go test -count=1 -p 1 -timeout 30m ./checkpoint/kafkasource/ ./sink/kafkasink/ ./examples/processor/

test-classic-protocol: deps
	EXACTLYONCE_GROUP_PROTOCOL=classic go test -count=1 -p 1 -timeout 30m ./checkpoint/kafkasource/ ./sink/kafkasink/ ./examples/processor/

# test-cluster runs the tests of a three-broker Apache Kafka cluster under
# faults (testkit.EnvKafkaCluster): the gateway answering 503 while the ISR
# is below min.insync.replicas (brokers beside a dedicated KRaft
# controller), leader and transaction-coordinator kills mid-transaction, a
# rolling restart under a running pipeline. Not in make test: each starts
# three or four JVMs and restarts brokers (about 7 minutes at load 20-40).
CLUSTER_TESTS := TestGatewayISRBelowMinInsyncReplicas|TestPublisherRecoversAfterClusterFaults|TestTxProducerClusterFailover|TestRollingRestart
test-cluster: deps
	EXACTLYONCE_KAFKA_CLUSTER=1 go test -count=1 -p 1 -timeout 30m -run '$(CLUSTER_TESTS)' ./idempotency/kafkapub/ ./kafkatxn/ ./sink/kafkasink/

# make demo NAIVE=gateway|sink|merge|mv|avg (a comma-separated list, or all)
# runs that joint the naive way
# beside the correct pipeline and prints both figures; KAFKA=apache (or
# apache-3.9) runs demo and chaos on Apache Kafka instead of kfake (the
# default: quicker, and with wire-level faults), KAFKA=cluster on three
# brokers and a controller (chaos adds kafka-broker-kill, kafka-isr-down
# and kafka-rolling-restart); DEMO_FLAGS passes more
# flags (go run ./harness/cmd/demo -h).
demo: deps
	.ci/unchanged-tree go run ./harness/cmd/demo $(if $(NAIVE),-naive=$(NAIVE)) $(if $(KAFKA),-kafka=$(KAFKA)) $(DEMO_FLAGS)

# chaos: the pipeline under a long randomized fault schedule (harness/cmd/chaos);
# CHAOS_FLAGS passes flags, e.g. make chaos CHAOS_FLAGS="-events 1000000 -faults-per-kind 200 -json chaos.json".
chaos: deps
	go run ./harness/cmd/chaos $(if $(KAFKA),-kafka=$(KAFKA)) $(CHAOS_FLAGS)

# sim: the deterministic simulation of the checkpoint protocol
# (harness/internal/sim) in its long mode, SIM_SEEDS seeds per scenario; a failing
# seed prints its trace and the command that replays it.
SIM_SEEDS ?= 100000
sim:
	SIM_SEEDS=$(SIM_SEEDS) go test -count=1 -timeout 0 -run 'TestSimulation' ./harness/internal/sim/

# bench runs every benchmark BENCH_COUNT times (default 3), keeps the output
# in docs/bench/bench.txt and writes docs/bench/REPORT.md with its SVG charts
# (harness/cmd/benchreport: medians, [min-max], ratios to baselines). At the
# default sizes it takes about 35 minutes on 2 cores; the sizes are environment variables
# (E2E_EVENTS, default 2,000,000, E2E_ROUNDS; DEDUP_BENCH_KEYS; RECOVERY_KEYS,
# default 1000000,10000000, RECOVERY_STORAGES; BENCH_BATCH_ROWS; see
# BENCHMARKS.md), and the report lists those set. BENCH_PKGS and BENCH_RUN
# narrow the run, BENCH_VS= leaves out the clickhouse-go comparison (bench/).
# TestReportCurrent (harness/cmd/benchreport) fails when REPORT.md is not
# what benchreport writes from bench.txt, or bench.txt lacks a benchmark of
# the tree (its notYetRun list names those added since the last run).
BENCH_COUNT ?= 3
BENCH_PKGS  ?= ./...
BENCH_RUN   ?= .
BENCH_VS    ?= SinkVsClickHouseGo
BENCH_OUT   ?= docs/bench
BENCH_TXT   := $(abspath $(BENCH_OUT))/bench.txt
LOADAVG      = $$(uptime | sed 's/.*load average/load average/')

bench: deps
	@mkdir -p $(BENCH_OUT)
	@{ echo "# make bench, $$(date -u '+%Y-%m-%d %H:%M UTC'), commit $$(git rev-parse --short HEAD 2>/dev/null || echo unknown), -count $(BENCH_COUNT), packages $(BENCH_PKGS), -bench '$(BENCH_RUN)'"; \
	  sizes=$$(env | grep -E '^(E2E_|DEDUP_BENCH_|RECOVERY_|BENCH_BATCH_ROWS|CHSINK_POLICY_)' | sort | tr '\n' ' '); \
	  echo "# sizes set: $${sizes:-none, all at their defaults} $${sizes:+(others at their defaults)}"; \
	  echo "# machine: $$(nproc) cores, $$(free -g | awk '/^Mem:/{print $$2}') GiB; at the start: $(LOADAVG)"; } > $(BENCH_TXT)
	@status=0; \
	go test -run '^$$' -bench '$(BENCH_RUN)' -benchmem -count $(BENCH_COUNT) -timeout 300m $(BENCH_PKGS) 2>&1 | tee -a $(BENCH_TXT); \
	status=$${PIPESTATUS[0]}; \
	echo "# after the SDK's benchmarks ($$(date -u '+%H:%M UTC')): $(LOADAVG)" >> $(BENCH_TXT); \
	if [ -n "$(BENCH_VS)" ]; then \
		(cd bench && go test -run '^$$' -bench '$(BENCH_VS)' -benchtime 20x -count $(BENCH_COUNT) . 2>&1) | tee -a $(BENCH_TXT); \
		s=$${PIPESTATUS[0]}; [ $$s = 0 ] || status=$$s; \
		echo "# after bench/ ($$(date -u '+%H:%M UTC')): $(LOADAVG)" >> $(BENCH_TXT); \
	fi; \
	(cd bench && go test -run '^$$' -bench 'DecodeEvent' -benchmem -count $(BENCH_COUNT) ./peers/sdkjob/ 2>&1) | tee -a $(BENCH_TXT); \
	s=$${PIPESTATUS[0]}; [ $$s = 0 ] || status=$$s; \
	go run ./harness/cmd/benchreport -o $(BENCH_OUT) -peers $(BENCH_OUT)/peers.txt $(BENCH_OUT)/bench.txt || status=1; \
	echo "make bench: $(BENCH_OUT)/REPORT.md"; \
	exit $$status

# bench-peers runs one job on the SDK, Flink 2.2.1 and Kafka Streams 4.4,
# side by side on the kit's Apache Kafka 4.4 and ClickHouse 26.7, from one
# generated input whose ground truth every output is checked against
# (bench/peers/doc.go): with checkpoints every second, without, and killed
# -9 at half the output and restarted. Maven builds the Java jobs from
# Maven Central into $(PEERS_DIR) (its own local repository there, about
# 200 MB the first time), never into the tree. PEERS_EVENTS (default
# 200000), PEERS_MINUTES (30), PEERS_ROUNDS (1; the order is reversed
# every other round), PEERS_SYSTEMS (sdk,flink,kstreams) and PEERS_MODES
# (ckpt,nockpt,recovery) size and narrow the run. The results go to
# $(BENCH_OUT)/peers.txt and REPORT.md's side-by-side section, the rest of
# the report rewritten from the last make bench's bench.txt as it was.
PEERS_DIR := $(CACHE_DIR)/peers
bench-peers: deps
	@for job in flink kstreams; do \
		echo "bench-peers: mvn package bench/peers/$$job into $(PEERS_DIR)/$$job"; \
		mvn -B -q -Dmaven.repo.local=$(PEERS_DIR)/m2 -Dpeers.out=$(PEERS_DIR)/$$job -f bench/peers/$$job/pom.xml package || exit 1; \
	done
	@mkdir -p $(BENCH_OUT) && rm -f $(BENCH_OUT)/peers.txt
	@status=0; \
	(cd bench && PEERS=1 PEERS_CACHE=$(PEERS_DIR) PEERS_OUT=$(abspath $(BENCH_OUT))/peers.txt go test -count=1 -run '^TestPeers$$' -v -timeout 300m ./peers/) || status=1; \
	bench=; [ -f $(BENCH_OUT)/bench.txt ] && bench=$(BENCH_OUT)/bench.txt; \
	go run ./harness/cmd/benchreport -o $(BENCH_OUT) -peers $(BENCH_OUT)/peers.txt $$bench || status=1; \
	echo "make bench-peers: $(BENCH_OUT)/REPORT.md"; \
	exit $$status
