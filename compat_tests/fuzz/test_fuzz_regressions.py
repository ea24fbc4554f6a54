"""The differential fuzzer's findings, each a minimal sequence replayed on Apache
Kafka 4.4.0 and kcompat side by side: both must observe what Kafka observed
when it was found (compat_tests/FINDINGS.md, "Differential fuzzer")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from compat_tests._broker import Broker
from compat_tests.fuzz import _ops as ops
from compat_tests.fuzz._wire import Peer
from compat_tests.java.kafka_reference import KafkaReference

SET, DELETE, APPEND = 0, 1, 2
INVALID_CONFIG, UNKNOWN_TOPIC = 40, 3


@pytest.fixture
def peers(kafka_reference: KafkaReference, module_broker: Broker) -> Iterator[list[Peer]]:
    found = [Peer("kafka", kafka_reference.bootstrap), Peer("kcompat", module_broker.bootstrap)]
    yield found
    for peer in found:
        peer.close()


def both(peers: list[Peer], op: str, *args: Any) -> Any:
    kafka, kcompat = (getattr(ops, op)(peer, *args) for peer in peers)
    assert kcompat == kafka, f"{op}{args!r}: Kafka {kafka!r}, kcompat {kcompat!r}"
    return kafka


def settle(peers: list[Peer], topic: str, partitions: int | None) -> None:
    for peer in peers:
        ops.settle_topic(peer, topic, partitions)


def name() -> str:
    return f"fzr-{uuid.uuid4().hex[:10]}"


def test_deleted_topic_takes_its_committed_offsets(peers: list[Peer]) -> None:
    topic, group = name(), name()
    for peer in peers:
        ops.settle_group(peer, group)
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "commit_offset", group, topic, 0, 17, "m") == 0
    assert both(peers, "fetch_offset", group, topic, 0) == (0, 17, "m")
    assert both(peers, "delete_topic", topic) == 0
    settle(peers, topic, None)
    # Kafka deletes them soon after the topic (kcompat: at once)
    ops.settle_offsets_gone(peers[0], [group], topic, 1)
    assert both(peers, "fetch_offset", group, topic, 0) == (0, -1, "")
    # a topic created again under the name starts with no committed offset
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "fetch_offset", group, topic, 0) == (0, -1, "")
    assert both(peers, "commit_offset", group, topic, 0, 3, "") == 0
    assert both(peers, "fetch_offset", group, topic, 0) == (0, 3, "")


def test_configs_are_checked_before_the_topic(peers: list[Peer]) -> None:
    missing = name()
    assert both(peers, "alter_config", missing, "bogus.config.key", SET, "1", False) \
        == INVALID_CONFIG
    assert both(peers, "alter_config", missing, "retention.ms", SET, "abc", True) \
        == INVALID_CONFIG
    assert both(peers, "alter_config", missing, "cleanup.policy", APPEND, "bogus", False) \
        == INVALID_CONFIG
    assert both(peers, "alter_config", missing, "retention.ms", SET, "1000", False) \
        == UNKNOWN_TOPIC
    assert both(peers, "alter_config", missing, "bogus.config.key", DELETE, None, False) \
        == UNKNOWN_TOPIC


def test_deleting_a_key_the_topic_does_not_set(peers: list[Peer]) -> None:
    topic = name()
    both(peers, "create_topic", topic, 1, 1, {"retention.ms": "3600000"}, False)
    settle(peers, topic, 1)
    assert both(peers, "alter_config", topic, "bogus.config.key", DELETE, None, False) == 0
    assert both(peers, "alter_config", topic, "segment.ms", DELETE, None, True) == 0
    assert both(peers, "alter_config", topic, "retention.ms", APPEND, "5", False) \
        == INVALID_CONFIG
    assert both(peers, "topic_overrides", topic) == ("ok", (("retention.ms", "3600000"),))


def test_create_topics_checks_configs_before_counts(peers: list[Peer]) -> None:
    topic = name()
    assert both(peers, "create_topic", topic, 0, 1, {"bogus.config.key": "1"}, True) \
        == ("error", INVALID_CONFIG)
    assert both(peers, "create_topic", topic, 1, 2, {"retention.ms": "abc"}, False) \
        == ("error", INVALID_CONFIG)
    assert both(peers, "create_topic", topic, 0, 1, {}, True) == ("error", 37)
