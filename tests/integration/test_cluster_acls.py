"""ACLs on a 3-broker cluster of real processes: created through one broker (which
forwards the change to the controller unless it is the controller), they reach
every broker's authorizer through the replicated metadata log, and a deletion
through another broker is seen everywhere too."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from compat_tests._cluster import Cluster, quorum_leader
from tests.integration.test_acls import (
    ALLOW,
    LITERAL,
    MANAGER,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    Row,
    connect,
    create,
    delete,
    describe,
)

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cluster-acls"), extra_args=MANAGER[2:])
    try:
        yield c.start()
    finally:
        c.kill()


def _wait_described(cluster: Cluster, node: int, expected: list[Row]) -> None:
    """Until broker ``node`` describes exactly ``expected`` (a broker applies a
    committed record a moment after the controller)."""
    conn = connect(cluster.brokers[node])
    deadline = time.monotonic() + 15
    while (found := describe(conn, principal="User:zoe")[2]) != expected:
        assert time.monotonic() < deadline, (node, found)
        time.sleep(0.05)
    conn.close()


def test_an_acl_created_through_one_broker_is_described_by_every_other(
        cluster: Cluster) -> None:
    reads = (TOPIC, "cluster-acl", LITERAL, "User:zoe", "*", READ, ALLOW)
    writes = (TOPIC, "cluster-", PREFIXED, "User:zoe", "*", WRITE, ALLOW)
    leader = quorum_leader(cluster.brokers[1].bootstrap)
    first, second = [n for n in cluster.brokers if n != leader]  # both forward to it
    assert create(connect(cluster.brokers[first]), reads, writes) == [("none", "")] * 2
    for node in cluster.brokers:
        _wait_described(cluster, node, sorted([reads, writes]))
    assert delete(connect(cluster.brokers[second]), {"name": "cluster-acl"}) == [
        ("none", None, [reads])]
    for node in cluster.brokers:
        _wait_described(cluster, node, [writes])
