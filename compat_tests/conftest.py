"""Fixtures for the real-client compatibility suites.

- ``broker``: a fresh kcompat broker process per test (tmp data dir), for tests that
  stop, kill or restart it.
- ``module_broker``: one broker process per test module, shared by tests that only
  need a running broker (they use unique topic names).
- ``pbroker``, ``gbroker``, ``tbroker``: a ``Deployment`` (``_deployment.py``)
  per module and kind, parametrized over a single broker and 3-broker
  clusters whose topics (and internal topics) have replication factor 1 or 3
  (``single``, ``rf1``, ``rf3``), for the produce/consume suites (default
  settings), the consumer-group suites (initial rebalance delay 0, so groups
  form at once) and the transaction suites (timed-out transactions are
  checked every 500 ms). A test narrows the kinds with
  ``@pytest.mark.parametrize("gbroker", SINGLE_AND_RF3, indirect=True)`` (or
  ``CLUSTER_KINDS``), sharing the module's instances. Tests that stop, kill or
  restart a broker use ``broker`` (or their own) and stay single-node.
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
from ._cluster import Cluster
from ._deployment import KINDS, Deployment
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


def _deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                name: str, extra_args: tuple[str, ...]) -> Iterator[Deployment]:
    """A single broker, or a 3-broker cluster whose topics and internal topics
    have the replication factor of the kind (``Deployment.cluster_args``).
    pytest runs a module's tests grouped by kind, so one deployment runs at a
    time."""
    kind = request.param
    root = tmp_path_factory.mktemp(f"{name}-{kind}")
    if kind == "single":
        b = Broker(root, extra_args=extra_args)
        b.start()
        try:
            yield Deployment.single(b)
        finally:
            b.close()
        return
    cluster = Cluster(root, extra_args=(*Deployment.cluster_args(kind), *extra_args))
    try:
        yield Deployment.of_cluster(cluster.start(), kind)
    finally:
        cluster.kill()  # SIGKILL: a graceful stop of three brokers costs seconds


@pytest.fixture(scope="module", params=KINDS)
def pbroker(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _deployment(request, tmp_path_factory, "produce", ())


@pytest.fixture(scope="module", params=KINDS)
def gbroker(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _deployment(request, tmp_path_factory, "groups", FAST_BROKER_ARGS)


@pytest.fixture(scope="module", params=KINDS)
def tbroker(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _deployment(request, tmp_path_factory, "txn", TXN_BROKER_ARGS)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return unique_topic(request.node.name)


def _brokers_of(item: pytest.Item) -> list[Broker]:
    funcargs = getattr(item, "funcargs", None) or {}
    seen: list[Broker] = []
    for value in funcargs.values():
        found = value.brokers if isinstance(value, Deployment) else (value,)
        for b in found:
            if isinstance(b, Broker) and all(b is not s for s in seen):
                seen.append(b)
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
