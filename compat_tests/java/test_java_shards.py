"""Java kafka-clients 4.x against a node of two shards (issue 35): the group
scenario of test_java_clients (three GroupConsumer JVMs split 6 partitions,
the Produce JVM writes 600 records, each read once by its partition's owner,
offsets committed) with the partitions led by both shards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from compat_tests._broker import Broker
from compat_tests._deployment import Deployment
from compat_tests._shards import SHARD_IDS, running_node
from compat_tests.java.test_java_clients import (
    test_consumer_group_of_three_splits_partitions_and_commits as group_scenario,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with running_node(tmp_path_factory.mktemp("java-shards")) as b:
        yield b


def test_java_producer_and_group_over_both_shards(node: Broker, topic: str,
                                                  clients_cp: str) -> None:
    group_scenario(Deployment.single(node), topic, clients_cp)
    md = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(topic, timeout=10)
    assert {p.leader for p in md.topics[topic].partitions.values()} == set(SHARD_IDS)
