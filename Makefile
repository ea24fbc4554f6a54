# kcompat — the two set-up commands are `make run` and `make test`; each bootstraps .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test lint unit compat bench clean tools sim java-deps kafka-reference demo

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# System tools the compatibility tests drive (kcat from Debian; cached once installed).
tools:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat from apt"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat >/dev/null; }
	@command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || { \
	  echo "installing maven and a JDK from apt"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq maven openjdk-17-jdk-headless >/dev/null; }

# Jars for the Java suites, from Maven Central into ~/.cache/kcompat (reused after the first run).
java-deps: $(STAMP) tools
	$(PY) -m compat_tests.java._jvm

# A reference Apache Kafka (KRaft, single node) on a free port, until ^C.
kafka-reference: java-deps
	$(PY) -m compat_tests.java.kafka_reference run

# The PySpark pipeline against an embedded kcompat broker.
demo: $(STAMP) tools
	$(PY) -m spark_demo.run

run: $(STAMP)
	$(VENV)/bin/kcompat broker

lint: $(STAMP)
	$(VENV)/bin/ruff check kcompat tests compat_tests bench spark_demo
	$(VENV)/bin/mypy kcompat
	$(VENV)/bin/lint-imports

test: $(STAMP) tools java-deps lint
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/produce_consume.py $(BENCH_ARGS)

# Long deterministic-simulator run: SEEDS schedules (default 50000) from SEED_BASE.
sim: $(STAMP)
	SEEDS=$${SEEDS:-50000} $(PY) -m pytest -q -p no:cacheprovider tests/sim

clean:
	rm -rf $(VENV) data
