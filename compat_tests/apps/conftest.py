"""Every test under compat_tests/apps is an application run: marked ``apps`` so that
`make test` (20-minute budget) leaves it to `make test-apps`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compat_tests._broker import Broker, running
from compat_tests._cluster import Cluster
from compat_tests.java.kafka_reference import KafkaReference


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "compat_tests/apps/" in str(item.fspath):
            item.add_marker(pytest.mark.apps)


DEPLOYMENTS = ["kcompat", "kcompat-3-brokers", "kafka-4.4.0"]


def deployment_of(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  name: str, cluster_args: tuple[str, ...] = ()) -> Iterator[tuple[str, int]]:
    """The body of an application module's ``deployment`` fixture (params
    ``DEPLOYMENTS``): (bootstrap, replication factor) of one kcompat broker, a
    3-broker kcompat cluster, or the session's Apache Kafka 4.4.0 reference."""
    if request.param == "kafka-4.4.0":
        ref: KafkaReference = request.getfixturevalue("kafka_reference")
        yield ref.bootstrap, 1
        return
    if request.param == "kcompat-3-brokers":
        cluster = Cluster(tmp_path_factory.mktemp(f"{name}-cluster"), extra_args=cluster_args)
        try:
            cluster.start()
            yield cluster.bootstrap, 3
        finally:
            cluster.close()
        return
    for broker in running(Broker(tmp_path_factory.mktemp(f"{name}-kcompat"))):
        yield broker.bootstrap, 1
