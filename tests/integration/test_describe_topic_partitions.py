"""DescribeTopicPartitions (key 75) through kafka-python's admin client (its own
codec): a single broker's answer, then paging through every topic with the
cursor as a client does (``next_cursor`` fed back until it is null)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests._broker import Broker, unique_topic

TOPIC_OPERATIONS = 3576  # READ..ALTER_CONFIGS: every topic operation, no authorizer


@pytest.fixture
def admin(broker: Broker) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


def _parts(topic: dict[str, Any]) -> list[int]:
    return [p["partition_index"] for p in topic["partitions"]]


def test_describe_topic_partitions_single_node(broker: Broker, admin: KafkaAdminClient) -> None:
    a, b = unique_topic("dtp-a"), unique_topic("dtp-b")
    admin.create_topics([NewTopic(a, 3, 1), NewTopic(b, 2, 1)])
    got = admin.describe_topic_partitions([b, a, a + "-nope"])
    assert got["next_cursor"] is None
    assert [(t["name"], t["error_code"], _parts(t)) for t in got["topics"]] == [
        (a, 0, [0, 1, 2]), (a + "-nope", 3, []), (b, 0, [0, 1])]
    first = got["topics"][0]
    assert first["topic_authorized_operations"] == TOPIC_OPERATIONS
    assert first["is_internal"] is False and first["topic_id"] is not None
    assert first["partitions"][0] == {
        "error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
        "replica_nodes": [1], "isr_nodes": [1], "eligible_leader_replicas": None,
        "last_known_elr": None, "offline_replicas": []}

    # page through every topic, two partitions at a time
    seen: list[tuple[str, int]] = []
    cursor = None
    for _ in range(20):
        page = admin.describe_topic_partitions([], response_partition_limit=2, cursor=cursor)
        assert sum(len(t["partitions"]) for t in page["topics"]) <= 2
        seen += [(t["name"], i) for t in page["topics"] for i in _parts(t)]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [s for s in seen if s[0] in (a, b)] == [(a, i) for i in range(3)] + [
        (b, i) for i in range(2)]
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
