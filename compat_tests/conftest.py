"""Fixtures for the real-client compatibility suites.

- ``broker``: a fresh kcompat broker process per test (tmp data dir), for tests that
  stop, kill or restart it.
- ``module_broker``: one broker process per test module, shared by tests that only
  need a running broker (they use unique topic names).
- ``gbroker``: one broker per module for the consumer-group suites (initial
  rebalance delay 0, so groups form at once).
- ``tbroker``: one broker per module for the transaction suites (timed-out
  transactions are checked every 500 ms).
- ``topic``: a unique topic name for the test.

On failure the tail of the broker's stderr is attached to the report. With
``COMPAT_LEDGER_OUT=/path/file.jsonl`` every test appends the byte range of the
broker log it produced, so ``compat_tests/ledger_scan.py`` can list which API
versions each client sent (start pytest with ``KCOMPAT_LOG_LEVEL=DEBUG``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from ._broker import Broker, unique_topic
from ._eos import TXN_BROKER_ARGS
from ._groups import FAST_BROKER_ARGS

_LEDGER_MARKS: dict[int, int] = {}


@pytest.fixture
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("broker"))
    b.start()
    try:
        yield b
    finally:
        b.close()


def _module_broker(tmp_path_factory: pytest.TempPathFactory, name: str,
                   extra_args: tuple[str, ...] = ()) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp(name), extra_args=extra_args)
    b.start()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from _module_broker(tmp_path_factory, "module-broker")


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from _module_broker(tmp_path_factory, "groups-broker", FAST_BROKER_ARGS)


@pytest.fixture(scope="module")
def tbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from _module_broker(tmp_path_factory, "txn-broker", TXN_BROKER_ARGS)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return unique_topic(request.node.name)


def _brokers_of(item: pytest.Item) -> list[Broker]:
    funcargs = getattr(item, "funcargs", None) or {}
    seen: list[Broker] = []
    for value in funcargs.values():
        if isinstance(value, Broker) and all(value is not b for b in seen):
            seen.append(value)
    return seen


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    rep = outcome.get_result()
    brokers = _brokers_of(item)
    if rep.failed and rep.when in ("setup", "call"):
        for b in brokers:
            state = "running" if b.running else f"not running (last exit code {b.last_returncode})"
            rep.sections.append(
                (f"kcompat broker {b.bootstrap} [{state}] stderr tail ({b.log_path})", b.tail())
            )
    ledger_out = os.environ.get("COMPAT_LEDGER_OUT")
    if ledger_out and (rep.when == "call" or (rep.when == "setup" and rep.failed)):
        with open(ledger_out, "a", encoding="utf-8") as f:
            for b in brokers:
                start = _LEDGER_MARKS.get(id(b), 0)
                end = b.log_size()
                _LEDGER_MARKS[id(b)] = end
                f.write(json.dumps({
                    "nodeid": item.nodeid,
                    "outcome": rep.outcome,
                    "log": str(b.log_path),
                    "start": start,
                    "end": end,
                }) + "\n")
