"""SCRAM credentials on a 3-broker cluster of real processes: added with ``kcompat
users`` through a broker that is not the controller (it forwards the change),
every other broker describes them through the replicated metadata log; a
deletion through yet another broker is seen everywhere too."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kio.schema.describe_user_scram_credentials.v0 import request as du

from compat_tests._cluster import Cluster, quorum_leader
from kcompat.cli._kio import Connection
from tests.integration.test_cli_users import users

pytestmark = pytest.mark.timeout(90)

Described = list[tuple[str, str, list[tuple[int, int]]]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cluster-users"))
    try:
        yield c.start()
    finally:
        c.kill()


def _describe(cluster: Cluster, node: int) -> Described:
    host, port = cluster.brokers[node].bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 10)
    try:
        r = conn.call(du.DescribeUserScramCredentialsRequest(users=None))
    finally:
        conn.close()
    return sorted((x.user, x.error_code.name, [(int(i.mechanism), int(i.iterations))
                                                 for i in x.credential_infos])
                  for x in r.results)


def _wait_described(cluster: Cluster, node: int, expected: Described) -> None:
    """Until broker ``node`` describes exactly ``expected`` (a broker applies a
    committed record a moment after the controller)."""
    deadline = time.monotonic() + 15
    while (found := _describe(cluster, node)) != expected:
        assert time.monotonic() < deadline, (node, found)
        time.sleep(0.05)


def test_a_credential_added_through_one_broker_is_described_by_every_other(
        cluster: Cluster) -> None:
    leader = quorum_leader(cluster.brokers[1].bootstrap)
    first, second = [n for n in cluster.brokers if n != leader]  # both forward to it
    users(cluster.brokers[first], "add", "zoe", "--password", "zoe-secret",
          "--iterations", "8192")
    users(cluster.brokers[first], "add", "yan", "--password", "yan-secret",
          "--mechanism", "SCRAM-SHA-256")
    both = [("yan", "none", [(1, 4096)]), ("zoe", "none", [(2, 8192)])]
    for node in cluster.brokers:
        _wait_described(cluster, node, both)
    users(cluster.brokers[second], "remove", "zoe", "--mechanism", "SCRAM-SHA-512")
    for node in cluster.brokers:
        _wait_described(cluster, node, both[:1])
