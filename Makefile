# kcompat — the two set-up commands are `make run` and `make test`; each bootstraps .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test lint unit compat bench clean tools

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

run: $(STAMP)
	$(VENV)/bin/kcompat broker

lint: $(STAMP)
	$(VENV)/bin/ruff check kcompat tests compat_tests bench
	$(VENV)/bin/mypy kcompat
	$(VENV)/bin/lint-imports

test: $(STAMP) tools lint
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/produce_consume.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data
