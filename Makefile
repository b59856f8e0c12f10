# The platform's commands. `make help` lists them. Every target installs what it needs first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

UV_VERSION := 0.13.8
UV := uv
KAPPA := $(UV) run --frozen kappa
PYTEST := $(UV) run --frozen pytest
# Three workers on two cores, whole test files each (a module's shared fixtures stay in one process), longest
# files first: the suite waits on Kafka, Spark triggers, JVM starts and two-minute broker outages much of the
# time, so a third file at once fills what the other two leave idle.
WORKERS := -n 3 --dist loadfile --no-loadscope-reorder
# Never download a Python: the machine's 3.11 is the one the lock was made for.
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := 3.11
# Installed packages as bytecode, once: where PYTHONDONTWRITEBYTECODE is set (as on the CI machines), every
# Python process would otherwise compile pyspark, pandas and dagster from source again (~1.2 s per `kappa`
# command, and the tests start hundreds of processes).
export UV_COMPILE_BYTECODE := 1
# Dagster's runs, event log and schedules persist here (a folder of the state, like the stack's data).
DAGSTER_HOME ?= $(CURDIR)/.state/dagster
DAGSTER_PORT ?= 3000

.PHONY: help setup system-packages demo test test-quick test-unit test-integration test-e2e soak soak-live lint docs format up down status topics dagster bench-avro bench-pipeline bench-contracts bench-live bench-cluster bench-security bench-replay bench-cascade ci clean

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  make %-18s %s\n", $$1, $$2}'

system-packages: ## Debian packages: Java 17 for Spark, Maven, chromium for the Dagster UI test, Prometheus; only if missing
	@command -v java >/dev/null && command -v mvn >/dev/null || { \
	  echo "installing Java 17 and Maven with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven; }
	@# Debian's chromium, driven headless by Playwright in tests/e2e/test_replay_lifecycle.py (the Dagster UI test) (Playwright downloads no browser).
	@test -x /usr/bin/chromium || { \
	  echo "installing chromium with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@# Debian's Prometheus (and promtool), started by `kappa up --monitoring` and by tests/integration/test_monitoring.py.
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  echo "installing prometheus with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

setup: system-packages ## install Python packages (uv, locked, as bytecode), fetch the JVM artifacts and build Spark's class archive (once)
	@command -v $(UV) >/dev/null || python3 -m pip install --quiet "uv==$(UV_VERSION)"
	$(UV) sync --frozen
	@$(UV) run --frozen python -m compileall -q platform jobs dagster_project tests
	$(KAPPA) setup

demo: setup ## run the demo pipeline on a fresh embedded stack and print what landed in Delta
	$(KAPPA) demo

test: setup ## run every test: unit, integration (real Kafka, registry, Spark, Delta) and end-to-end
	$(PYTEST) $(WORKERS)

test-quick: setup ## the developer's loop, under 5 minutes: unit tests and the integration tests under 10 s each
	$(PYTEST) $(WORKERS) -m "unit or (integration and not slow)"

test-unit: setup ## pure logic and pure transforms only (no services)
	$(PYTEST) $(WORKERS) -m unit

test-integration: setup ## against one real stack started for the session
	$(PYTEST) $(WORKERS) -m integration

test-e2e: setup ## the CLI and whole flows, each stack on its own ports
	$(PYTEST) $(WORKERS) -m e2e

soak: setup ## the Kappa-promise test at 200,000 events (CI runs it at 8,000): live with kills = replay = the independent answer
	KAPPA_TEST_PROMISE_EVENTS=$(or $(EVENTS),200000) $(PYTEST) tests/integration/test_kappa_promise.py

soak-live: setup ## day two: the deployed pipeline at 1,000 clicks/s for 60 min, tables maintained: batch p99, files, checkpoints, RSS every 5 min
	$(UV) run --frozen python -m tests.benchmarks.bench_soak $(BENCH_ARGS)

lint: setup ## ruff, ruff format --check, mypy, the import layers (no cycle), and the schemas against their git history
	$(UV) run --frozen ruff check .
	$(UV) run --frozen ruff format --check .
	$(UV) run --frozen mypy
	$(UV) run --frozen lint-imports --no-cache
	$(KAPPA) schemas check --offline
	$(UV) run --frozen python docs/api_reference.py --check

docs: setup ## regenerate docs/job_api.md, the job API's reference page, from the code's docstrings and field comments
	$(UV) run --frozen python docs/api_reference.py

format: setup ## apply ruff's fixes and formatting
	$(UV) run --frozen ruff check --fix .
	$(UV) run --frozen ruff format .

up: setup ## start the local stack (Kafka KRaft + schema registry) on loopback
	$(KAPPA) up
	$(KAPPA) topics apply

down: ## stop the local stack
	$(KAPPA) down

status: ## show the local stack's components and their health
	$(KAPPA) status

dagster: setup ## the Dagster UI on 127.0.0.1:3000 (DAGSTER_PORT): the jobs' assets, materialized as catch-up runs
	mkdir -p "$(DAGSTER_HOME)"
	DAGSTER_HOME="$(DAGSTER_HOME)" $(UV) run --frozen dagster dev -h 127.0.0.1 -p $(DAGSTER_PORT) -m dagster_project.definitions

bench-avro: setup ## benchmark: Spark decoding Confluent Avro from Kafka (1 vs 3 writer schemas vs plain from_avro)
	$(UV) run --frozen python -m tests.benchmarks.bench_avro_decode

bench-pipeline: setup ## benchmark: replay throughput of every job (5M events) vs Kafka's ceiling, profiles
	$(UV) run --frozen python -m tests.benchmarks.bench_pipeline $(BENCH_ARGS)

bench-live: setup ## benchmark: the whole pipeline deployed, 10 min at 1,000 clicks/s and the highest rate it sustains: lag, latency per path, cores
	$(UV) run --frozen python -m tests.benchmarks.bench_live $(BENCH_ARGS)

bench-cluster: setup ## benchmark: the Spark cluster's overhead on the same cores: replay and live pipeline on local[2] vs 2 workers, side by side, and a projection
	$(UV) run --frozen python -m tests.benchmarks.bench_cluster $(BENCH_ARGS)

bench-security: setup ## benchmark: what TLS, SCRAM and the ACLs cost: replay (enrich_clicks, raw_clicks) and live pipeline, plaintext vs secured, side by side
	$(UV) run --frozen python -m tests.benchmarks.bench_security $(BENCH_ARGS)

bench-contracts: setup ## benchmark: raw_clicks replay throughput with and without the row-level data contract
	$(UV) run --frozen python -m tests.benchmarks.bench_contracts $(BENCH_ARGS)

bench-replay: setup ## benchmark: a replay of enrich_clicks on the demo data set (wall, events/s, checks' overhead, cutover)
	$(UV) run --frozen python -m tests.benchmarks.bench_replay $(BENCH_ARGS)

bench-cascade: setup ## benchmark: a cascade replay of enrich_clicks and the datasets below it (wall, events/s, the set's cutover)
	$(UV) run --frozen python -m tests.benchmarks.bench_cascade $(BENCH_ARGS)

ci: lint test ## exactly what CI runs (.ci/run)

clean: ## stop the stack and delete all state (jars, data, checkpoints)
	-$(KAPPA) down --purge
	rm -rf .state .venv
