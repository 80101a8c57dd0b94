# Commands for a fresh machine: `make demo`, `make chaos` and `make test`
# (`make bench` for the benchmarks). The three install what they need (Debian
# packages, the chdb npm tarball, Go modules). Set CLICKHOUSE_ADDR,
# KAFKA_BROKERS or REDIS_ADDR to use external servers instead; see README.md.

SHELL := /bin/bash

CACHE_DIR    := $(or $(EXACTLYONCE_CACHE),$(HOME)/.cache/exactlyonce)
CHDB_PACKAGE := @chdb/lib-linux-x64-gnu
CHDB_VERSION := 26.7.3-stable.1
CHDB_TGZ     := $(CACHE_DIR)/chdb/chdb-lib-linux-x64-gnu-$(CHDB_VERSION).tgz
# The S3 server of the tests, built once into the cache (about 100 s); the
# path and the lock match internal/embedded's EnsureVersityGW.
VGW_VERSION  := v1.8.0
VGW_DIR      := $(CACHE_DIR)/versitygw/$(VGW_VERSION)
# GitHub's maintained example payloads and its signer, the test data of
# idempotency (internal/testenv/octokit.go reads them from the same place).
OCTOKIT_DIR  := $(CACHE_DIR)/octokit
OCTOKIT_PKGS := @octokit/webhooks-examples@7.6.1 @octokit/webhooks-methods@6.0.0
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps test demo chaos bench

# deps installs only what is missing: redis-server, npm and a C compiler (for
# the cgo ClickHouse launcher) from Debian, the chdb tarball (178 MB, under
# the same lock the Go code takes), versitygw (unless S3_ENDPOINT is set), and
# Go modules.
deps:
	@pkgs=""; \
	if [ -z "$${REDIS_ADDR:-}" ] && [ ! -x /usr/bin/redis-server ] && ! command -v redis-server >/dev/null; then pkgs="$$pkgs redis-server"; fi; \
	if ! command -v npm >/dev/null; then pkgs="$$pkgs npm"; fi; \
	if [ -z "$${CLICKHOUSE_ADDR:-}" ] && ! command -v gcc >/dev/null; then pkgs="$$pkgs gcc libc6-dev"; fi; \
	if [ -n "$$pkgs" ]; then \
		echo "deps: apt-get install$$pkgs"; \
		$(SUDO) apt-get update && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y $$pkgs; \
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
	go mod download

test: deps
	go vet ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l found unformatted files:"; echo "$$out"; exit 1; fi
	go test -race -count=1 -timeout 25m ./...

# make demo NAIVE=gateway|sink|merge|mv|avg (a comma-separated list, or all)
# runs that joint the naive way
# beside the correct pipeline and prints both figures; DEMO_FLAGS passes more
# flags (go run ./internal/cmd/demo -h).
demo: deps
	go run ./internal/cmd/demo $(if $(NAIVE),-naive=$(NAIVE)) $(DEMO_FLAGS)

# chaos: the pipeline under a long randomized fault schedule (internal/cmd/chaos);
# CHAOS_FLAGS passes flags, e.g. make chaos CHAOS_FLAGS="-events 1000000 -faults-per-kind 200 -json chaos.json".
chaos: deps
	go run ./internal/cmd/chaos $(CHAOS_FLAGS)

# bench includes BenchmarkEndToEnd (examples/processor): E2E_EVENTS events
# (default 2,000,000) through the example's chain beside raw kafka-go, a few
# minutes; E2E_EVENTS=200000 runs it small, E2E_ROUNDS=3 repeats it.
bench:
	go test -run '^$$' -bench . -benchmem -timeout 60m ./...
	cd bench && go test -run '^$$' -bench SinkVsClickHouseGo -benchtime 20x -count 3 .
