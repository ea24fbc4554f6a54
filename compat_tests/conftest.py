"""Fixtures for the real-client compatibility suites.

- ``broker``: a fresh kcompat broker process per test (tmp data dir), for tests that
  stop, kill or restart it.
- ``module_broker``: one broker process per test module, shared by tests that only
  need a running broker (they use unique topic names).
- ``pbroker``, ``gbroker``, ``tbroker``: a ``Deployment`` (``_deployment.py``)
  for the produce/consume suites (default settings), the consumer-group suites
  (initial rebalance delay 0, so groups form at once) and the transaction suites
  (also: timed-out transactions are checked every 500 ms), parametrized over a
  single broker of the module and one of the session's 3-broker clusters, whose
  topics (and internal topics) have replication factor 1 or 3 (kinds
  ``single``, ``rf1``, ``rf3``; defaults ``PRODUCE_KINDS``, ``GROUP_KINDS``,
  ``TXN_KINDS``). A test picks other kinds with
  ``@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)``,
  sharing the module's single broker. ``cluster_pool`` starts each cluster
  kind on first use (``CLUSTER_BROKER_ARGS``) and kills it -9 once no module
  has used it for ``IDLE_CLUSTER_S``.
  Tests that stop, kill or restart a broker use ``broker`` (or their own) and
  stay single-node.
- ``topic``: a unique topic name for the test.

On failure the tail of each broker's stderr is attached to the report (the
root conftest, for every suite). With
``COMPAT_LEDGER_OUT=/path/file.jsonl`` every test appends the byte range of the
broker log it produced, so ``compat_tests/ledger_scan.py`` can list which API
versions each client sent (start pytest with ``KCOMPAT_LOG_LEVEL=DEBUG``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ._broker import Broker, brokers_in, running, unique_topic
from ._cluster import Cluster
from ._deployment import (
    CLUSTER_BROKER_ARGS,
    GROUP_KINDS,
    PRODUCE_KINDS,
    SHARE_BROKER_ARGS,
    SINGLE_AND_RF3,
    TXN_KINDS,
    Deployment,
)
from ._eos import TXN_BROKER_ARGS
from ._groups import FAST_BROKER_ARGS
from .java.kafka_reference import SHARE_TEST_OVERRIDES, KafkaReference

_LEDGER_MARKS: dict[int, int] = {}


@pytest.fixture
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from running(Broker(tmp_path_factory.mktemp("broker")))


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from running(Broker(tmp_path_factory.mktemp("module-broker")))


#: an unused pool cluster is killed after this long: three idle brokers that
#: have served some tests take about a tenth of a core (their Raft groups
#: tick), and a start costs about two CPU-seconds. Under pytest-xdist each
#: worker has its own pool and runs modules in an order no worker knows ahead,
#: so "after the last test that uses it" would mean the end of the session:
#: four workers kept up to eight clusters alive, most of them idle, most of the
#: time (about a quarter of the main part's CPU: bench/RESULTS.md, "make
#: test's budget").
IDLE_CLUSTER_S = 20.0


class ClusterPool:
    """The 3-broker clusters of a session (of a worker), one per kind, started on
    first use and shared by every module (tests use unique topic and group
    names); a cluster a test left with a broker down is replaced. All run with
    ``CLUSTER_BROKER_ARGS``. A module holds its cluster (``holding``) while its
    tests run; a cluster no module has held for ``IDLE_CLUSTER_S`` is killed
    (``reap``, after each test), as is every cluster at the session's end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clusters: dict[str, Cluster] = {}
        self.starts = 0
        self.held: dict[str, int] = {}  # kind -> modules holding it now
        self.idle_since: dict[str, float] = {}  # kind -> when the last holder let go

    def get(self, kind: str) -> Cluster:
        cluster = self.clusters.get(kind)
        if cluster is not None and all(b.running for b in cluster.brokers.values()):
            # a test that restarted a broker may hand the cluster on before the broker
            # registered again (INVALID_REPLICATION_FACTOR "only 2 broker(s) are
            # registered" for the next test's RF 3 topic): every test starts from three
            # registered, unfenced brokers, or fails here saying which is missing
            cluster.wait_for_brokers()
            return cluster
        if cluster is not None:
            cluster.kill()
        self.starts += 1
        cluster = Cluster(self.root / f"{kind}-{self.starts}",
                          extra_args=(*Deployment.cluster_args(kind), *CLUSTER_BROKER_ARGS))
        try:
            cluster.start()
        except BaseException:
            cluster.kill()
            raise
        self.clusters[kind] = cluster
        return cluster

    @contextmanager
    def holding(self, kind: str) -> Iterator[Cluster]:
        """The cluster of ``kind``, not reaped until the block ends."""
        self.held[kind] = self.held.get(kind, 0) + 1
        self.idle_since.pop(kind, None)  # held: idle again only once its last holder lets go
        try:
            yield self.get(kind)
        finally:
            self.held[kind] -= 1
            if not self.held[kind]:
                self.idle_since[kind] = time.monotonic()

    def reap(self, idle_s: float = IDLE_CLUSTER_S) -> None:
        """Kill the clusters no module has held for ``idle_s``."""
        now = time.monotonic()  # a kind is in idle_since only while no module holds it
        for kind, since in list(self.idle_since.items()):
            if now - since >= idle_s:
                del self.idle_since[kind]
                cluster = self.clusters.pop(kind, None)  # None: its start had failed
                if cluster is not None:
                    cluster.kill()

    def kill(self) -> None:
        """SIGKILL: a graceful stop of three brokers costs seconds."""
        for cluster in self.clusters.values():
            cluster.kill()

    # A plugin while the session lasts (``cluster_pool``), so that it reaps after
    # every test of the worker, the tests/ suites' too: a hook in this conftest
    # would see only compat_tests' tests, which a worker mostly runs first.
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item):  # type: ignore[no-untyped-def]
        yield  # the module's fixtures, if this was its last test, let their clusters go
        self.reap()


@pytest.fixture(scope="session")
def cluster_pool(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterPool]:
    pool = ClusterPool(tmp_path_factory.mktemp("clusters"))
    request.config.pluginmanager.register(pool, "kcompat-cluster-pool")
    try:
        yield pool
    finally:
        request.config.pluginmanager.unregister(pool)
        pool.kill()


def _deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                name: str, extra_args: tuple[str, ...]) -> Iterator[Deployment]:
    """A single broker of the module (with ``extra_args``), or the session's
    3-broker cluster of the kind (``ClusterPool``)."""
    kind = request.param
    if kind != "single":
        with request.getfixturevalue("cluster_pool").holding(kind) as cluster:
            yield Deployment.of_cluster(cluster, kind)
        return
    b = Broker(tmp_path_factory.mktemp(f"{name}-{kind}"), extra_args=extra_args)
    b.start()
    try:
        yield Deployment.single(b)
    finally:
        b.close()


@pytest.fixture(scope="module", params=PRODUCE_KINDS)
def pbroker(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _deployment(request, tmp_path_factory, "produce", ())


@pytest.fixture(scope="module", params=SINGLE_AND_RF3)
def sbroker(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Share-group suites: short acquisition locks allowed (``SHARE_BROKER_ARGS``)."""
    yield from _deployment(request, tmp_path_factory, "share", SHARE_BROKER_ARGS)


@pytest.fixture(scope="module", params=("single", "rf1", "rf3"))
def hbroker(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """HTTP API suites: every broker's admin port open (``Broker.admin_url``)."""
    yield from _deployment(request, tmp_path_factory, "http",
                           ("--admin-port", "0", *FAST_BROKER_ARGS))


@pytest.fixture(scope="module", params=GROUP_KINDS)
def gbroker(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _deployment(request, tmp_path_factory, "groups", FAST_BROKER_ARGS)


@pytest.fixture(scope="module", params=TXN_KINDS)
def tbroker(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _deployment(request, tmp_path_factory, "txn", TXN_BROKER_ARGS)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return unique_topic(request.node.name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """The ledger's byte ranges (the stderr tails of failures: the root conftest)."""
    outcome = yield
    rep = outcome.get_result()
    brokers = brokers_in(list((getattr(item, "funcargs", None) or {}).values()))
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


@pytest.fixture(scope="session")
def kafka_reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaReference]:
    """The session's reference Apache Kafka (KRaft, one node), started on first
    use by a differential test. Share groups may set
    share.record.lock.duration.ms down to 1 s, and Kafka assigns a share member
    at its second heartbeat, 1 s later instead of 5 (test_java_share,
    test_share_groups)."""
    ref = KafkaReference(Path(tmp_path_factory.mktemp("kafka-reference")),
                         overrides=SHARE_TEST_OVERRIDES)
    ref.start()
    try:
        yield ref
    finally:
        ref.close()
