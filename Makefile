# kcompat — the two set-up commands are `make run` and `make test`; each bootstraps .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test bytecode test-bytecode test-secured-link test-apps screenshots lint unit compat bench bench-cores bench-share bench-ext bench-compaction bench-scale bench-simple soak fuzz rdkafka-suite kafka-python-suite clean tools sim java-deps kafka-reference demo

# setup.py compiles kcompat's one C module (kcompat/ext/_native.c) in place: an edit
# of it installs again
$(STAMP): pyproject.toml setup.py kcompat/ext/_native.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# System tools the compatibility tests drive (kcat, a JDK and Maven, chromium and
# chromedriver, from Debian; cached once installed).
tools:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat from apt"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat >/dev/null; }
	@command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || { \
	  echo "installing maven and a JDK from apt"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq maven openjdk-17-jdk-headless >/dev/null; }
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	  echo "installing chromium and its driver from apt (the console's browser tests)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; }

# Jars for the Java suites, from Maven Central into ~/.cache/kcompat (reused after the first run),
# and the class-data archive the suite's Java client JVMs map (compat_tests/java/_jvm.py).
java-deps: $(STAMP) tools
	$(PY) -m compat_tests.java._jvm

# A reference Apache Kafka (KRaft, single node) on a free port, until ^C.
kafka-reference: java-deps
	$(PY) -m compat_tests.java.kafka_reference run

# The PySpark pipeline against an embedded kcompat broker.
demo: $(STAMP) tools
	$(PY) -m spark_demo.run

# The project's own bytecode, written ahead. Where PYTHONDONTWRITEBYTECODE is
# set (as this machine's environment does) no process writes a .pyc: each broker, CLI
# command and client script compiled kcompat's 240 modules again as it started:
# about 0.9 s of CPU each, and the test suite starts over 600 of them (pip
# compiles what it installs; an editable install's source is ours to compile).
# Nothing to do when up to date (< 1 s); an edited file is compiled again.
PYC_PATHS := kcompat compat_tests tests bench tools examples spark_demo conftest.py
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 $(PYC_PATHS) >/dev/null

# pytest's rewritten test modules (their asserts), written ahead as well: with no
# bytecode written, each pytest process rewrote all ~280 test modules as it collected
# (10 of a collection's 15 CPU-s), and `make test` starts four workers, the simulators'
# run and the secured-link run. conftest.py lets the suite's own processes keep them;
# this collects once, the two halves side by side (about 10 s; 5 s when up to date).
test-bytecode: bytecode
	@$(PY) -m pytest -q -p no:cacheprovider --collect-only tests >/dev/null 2>&1 & half=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider --collect-only compat_tests >/dev/null 2>&1; \
	wait $$half; true

run: $(STAMP) bytecode
	$(VENV)/bin/kcompat broker

lint: $(STAMP)
	$(VENV)/bin/ruff check conftest.py kcompat tests compat_tests bench spark_demo tools examples
	$(VENV)/bin/mypy kcompat
	$(VENV)/bin/lint-imports --no-cache
	$(PY) tools/import_cycles.py kcompat

# The simulators (tests/sim: pure CPU, a few minutes) run beside the rest of the
# suite, which mostly waits on broker and client processes, at a lower priority
# and with PYTHONHASHSEED=0 (a set of strings iterates in the order of the
# process's hash seed: a seed replays exactly only under the same one, as the
# broker simulator's replay command says);
# both runs must pass, and the cluster suite again over a secured link (test-secured-link). The rest runs in TEST_WORKERS pytest-xdist workers, a test
# module each at a time, each worker with its own port slice
# (compat_tests._broker.free_port); the modules that use the reference Apache
# Kafka, and the Spark suites, are one unit each (conftest.py, --dist loadgroup).
# Four workers on 2 cores, as the tests mostly wait: with two the cores were
# busy two thirds of the time, with four over nine tenths (bench/RESULTS.md,
# "make test's budget"); TEST_WORKERS=1 runs it serially.
TEST_WORKERS ?= 4
XDIST = $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)
test: $(STAMP) tools java-deps lint test-bytecode
	@PYTHONHASHSEED=0 nice -n 10 $(PY) -m pytest -q -p no:cacheprovider tests/sim > .sim-tests.log 2>&1 & sim=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) --durations=25 --ignore=tests/sim $(PYTEST_ARGS); rest=$$?; \
	echo "--- the cluster suite again, its brokers linked over SASL_SSL ---"; \
	$(MAKE) --no-print-directory test-secured-link; link=$$?; \
	wait $$sim; sim_rc=$$?; echo "--- tests/sim (run beside the rest, exit $$sim_rc) ---"; \
	cat .sim-tests.log; test $$rest -eq 0 -a $$link -eq 0 -a $$sim_rc -eq 0

# The 3-broker cluster suite with every cluster's inter-broker listener secured
# (SASL PLAIN over TLS, a test CA: compat_tests/_cluster.py COMPAT_TEST_LINK) while the
# harness and clients keep PLAINTEXT; part of `make test`.
test-secured-link: $(STAMP)
	COMPAT_TEST_LINK=SASL_SSL $(PY) -m pytest -q -p no:cacheprovider $(XDIST) \
	  tests/integration/test_cluster*.py $(PYTEST_ARGS)

# Unmodified applications in long runs (compat_tests/apps, marker `apps`): Kafka Streams,
# Kafka Connect, Faust, Spark restarted as a new process; each against kcompat and
# against Apache Kafka 4.4.0. Kept out of `make test` for its 20-minute budget.
APPS_STAMP := $(VENV)/.apps-installed
$(APPS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,apps]'
	touch $(APPS_STAMP)

test-apps: $(APPS_STAMP) tools java-deps
	$(PY) -m pytest -q -p no:cacheprovider -m apps compat_tests/apps $(PYTEST_ARGS)

# The console's pictures in docs/images, taken in headless chromium from a live broker.
screenshots: $(STAMP) tools
	$(PY) -m pytest -q -p no:cacheprovider -m screenshots compat_tests/http/test_console.py

# Apache Kafka vs kcompat on this machine with Kafka's perf tools (bench/compare.py);
# BENCH_QUICK=1 keeps the headline ratios only (< 5 min). The full run also compares
# 3-broker clusters at replication factor 3 (BENCH_ARGS=--cluster-only: only that).
# Appends to bench/RESULTS.md.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) tools java-deps
	$(PY) bench/compare.py $(if $(BENCH_QUICK),--quick) $(BENCH_ARGS)

# Share groups (KIP-932), bench/share.py: share vs classic consume throughput with 1 and 4
# members, kcompat vs Apache Kafka, and kcompat's FIFO message groups. BENCH_QUICK=1 for
# < 2 min. Appends to bench/RESULTS.md.
bench-share: $(BENCH_STAMP) tools java-deps
	$(PY) bench/share.py $(if $(BENCH_QUICK),--quick) $(BENCH_ARGS)

# Filtered views and dedup windows (issue 15), bench/ext15.py: view consume (10 % / 90 %,
# cold and cached) vs the source, produce with kc.dedup.by=header/content vs off, dedup
# memory per id (tracemalloc and broker RSS). kcompat only (Kafka has neither feature);
# ~3 min, BENCH_QUICK=1 for < 1 min. Appends to bench/RESULTS.md.
bench-ext: $(STAMP)
	$(PY) bench/ext15.py $(if $(BENCH_QUICK),--quick) $(BENCH_ARGS)

# Log compaction (issue 18), bench/compaction.py: cleaner throughput (MiB/s of a 200 MiB
# backlog over 10k keys) and produce p99 while the cleaner runs vs idle, kcompat and
# Apache Kafka 4.4.0 in the same run; ~2.5 min, BENCH_QUICK=1 for < 2 min (40 MiB).
# Appends to bench/RESULTS.md.
bench-compaction: $(STAMP) tools java-deps
	$(PY) bench/compaction.py $(if $(BENCH_QUICK),--quick) $(BENCH_ARGS)

# Multi-Raft scale (issue 16 item 2), bench/scale.py: idle CPU and RSS of 3 brokers (RF 3)
# at 0 / 1,000 / 5,000 / 10,000 partitions, time to create 1,000, leader moves after a
# kill -9 at 5,000, produce to 1,000 partitions; kcompat and a 3-node Apache Kafka 4.4.0 in
# the same run (BENCH_ARGS=--side kcompat: one side). BENCH_QUICK=1: 0 / 500 / 1,000
# (< 5 min). Appends to bench/RESULTS.md.
# Every core of a node (issue 35): Kafka, kcompat with one shard and with two, a
# librdkafka producer (bench/c/rdperf.c) as the client; figures to bench/RESULTS.md.
bench-cores: $(BENCH_STAMP) tools java-deps
	$(PY) bench/cores.py $(BENCH_ARGS)

bench-scale: $(STAMP) tools java-deps
	$(PY) bench/scale.py $(if $(BENCH_QUICK),--quick) $(BENCH_ARGS)

# Soak at volume (issue 31), bench/soak.py: 1M delayed records (kc-delay-ms 5-60 s, 1 %
# cancelled), then dedup (10 % repeated ids), retry to dead letter, a share group of 4 and a
# filtered view, each on one node and on 3 brokers at RF 3 (SOAK_ARGS="--side single|cluster
# --scenario delayed|dedup|retry|share|view"), with a control-plane probe every second
# (Metadata, CreateTopics, a new group's join, an acks=all produce), /metrics loop lag, then
# kill -9 and restart of the busiest broker with the backlog pending; bounded by
# --max-seconds (default 1 h for all). SOAK_QUICK=1: delayed only, 50k records, 2-15 s
# delays, ~2.5 min. Not part of `make test`. Appends to bench/RESULTS.md.
soak: $(STAMP)
	$(PY) bench/soak.py $(if $(SOAK_QUICK),--quick) $(SOAK_ARGS)

# The differential fuzzer against Apache Kafka 4.4.0 (issue 32, compat_tests/fuzz): random
# sequences of client operations done to both, for FUZZ_SECONDS per side (default 1800) on
# one node and on 3 brokers (FUZZ_SIDE=single|cluster|both; acls: one broker of each with an
# authorizer, the sequences changing ACLs); a difference fails with its
# shrunk sequence. make test runs a short derandomized pass on one node.
fuzz: $(STAMP) tools java-deps
	FUZZ_SECONDS=$${FUZZ_SECONDS:-1800} FUZZ_SIDE=$${FUZZ_SIDE:-both} $(PY) -m pytest -q -s \
		-p no:cacheprovider compat_tests/fuzz/test_fuzz_differential.py

# librdkafka 2.15.1's own test suite (tests/0nnn, quick mode, one test at a time) against
# one kcompat broker, 3 kcompat brokers at RF 3 and Apache Kafka 4.4.0, one side after the
# other (compat_tests/rdkafka_suite/run.py). The first run fetches
# @confluentinc/kafka-javascript@1.10.1 with npm (sha512 pinned) and builds its
# deps/librdkafka into $COMPAT_CACHE (~/.cache/kcompat, beside the Java jars; a built tree
# of your own: RDKAFKA_SUITE_TREE=dir). RDKAFKA_ARGS="--sides single --tests 0001,0012"
# narrows it; results merge into build/rdkafka-suite/results.json and the table into
# compat_tests/FINDINGS.md. Not part of `make test` (about an hour per side).
rdkafka-suite: $(STAMP) java-deps
	$(PY) -m compat_tests.rdkafka_suite.run --findings $(RDKAFKA_ARGS)

# kafka-python's own integration suite (the sdist of the kafka-python installed here,
# sha256 pinned, into $COMPAT_CACHE) against one kcompat broker, 3 at RF 3 and Apache
# Kafka 4.4.0, set up as the suite sets up its brokers; KP_SUITE_ARGS="--sides single"
# narrows it (sides: single, cluster, kafka, kafka-cluster). Results merge into build/kafka-python-suite/results.json and the table into
# compat_tests/kafka_python/FINDINGS.md. Not part of `make test` (about 3 min per side).
kafka-python-suite: $(STAMP) java-deps
	$(PY) -m compat_tests.kafka_python_suite.run --findings $(KP_SUITE_ARGS)

# The older single-broker confluent-kafka produce/consume benchmark.
bench-simple: $(STAMP)
	$(PY) bench/produce_consume.py $(BENCH_ARGS)

# Long simulator runs from SEED_BASE: SEEDS Raft schedules (default 50000), BROKER_SEEDS
# broker-level ones (default 5000) and LOG_SEEDS partition-log crash schedules (20000).
sim: $(STAMP)
	SEEDS=$${SEEDS:-50000} BROKER_SEEDS=$${BROKER_SEEDS:-5000} \
	  PYTHONHASHSEED=0 $(PY) -m pytest -q -p no:cacheprovider tests/sim
	LOG_SEEDS=$${LOG_SEEDS:-20000} $(PY) -m pytest -q -p no:cacheprovider \
	  tests/unit/log/test_log_crash_sim.py

# A local 3-broker cluster (config/cluster-{1,2,3}.yaml: Kafka ports 19092-19094, data in
# data/cluster-N) until ^C, which stops all three.
cluster: $(STAMP)
	@pids=""; \
	for i in 1 2 3; do $(VENV)/bin/kcompat broker --config config/cluster-$$i.yaml & pids="$$pids $$!"; done; \
	trap 'kill -TERM $$pids 2>/dev/null' INT TERM; \
	wait; wait

# Long real-process chaos run against a 3-broker cluster (CHAOS_SECONDS, default 600).
chaos: $(STAMP)
	CHAOS_SECONDS=$${CHAOS_SECONDS:-600} IDLE_PARTITIONS=$${IDLE_PARTITIONS:-2000} \
	  $(PY) -m pytest -q -s -p no:cacheprovider tests/chaos

clean:
	rm -rf $(VENV) data build kcompat/ext/_native.*.so
