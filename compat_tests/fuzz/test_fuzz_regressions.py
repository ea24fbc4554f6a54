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
from compat_tests.fuzz import _producers as producers
from compat_tests.fuzz._machine import operation
from compat_tests.fuzz._wire import Peer
from compat_tests.java.kafka_reference import KafkaReference

SET, DELETE, APPEND = 0, 1, 2
INVALID_CONFIG, UNKNOWN_TOPIC = 40, 3
UNKNOWN_MEMBER, ILLEGAL_GENERATION = 25, 22


@pytest.fixture
def peers(kafka_reference: KafkaReference, fuzz_broker: Broker) -> Iterator[list[Peer]]:
    found = [Peer("kafka", kafka_reference.bootstrap), Peer("kcompat", fuzz_broker.bootstrap)]
    yield found
    for peer in found:
        peer.close()


def both(peers: list[Peer], op: str, *args: Any) -> Any:
    kafka, kcompat = (operation(op)(peer, *args) for peer in peers)
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


def test_leave_group_of_an_unknown_group(peers: list[Peer]) -> None:
    # F5: the request succeeds and names each member unknown
    group = name()
    for peer in peers:
        ops.settle_group(peer, group)
    assert both(peers, "leave_group", group) == (0, (UNKNOWN_MEMBER,))


def test_commit_of_a_missing_partition_before_the_member_is_checked(peers: list[Peer]) -> None:
    # F6: a partition the metadata lacks is UNKNOWN_TOPIC_OR_PARTITION whatever
    # the committing member's generation or the group's members
    topic, group = name(), name()
    for peer in peers:
        ops.settle_group(peer, group)
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    joined = both(peers, "join_group", group, [topic])
    assert joined[:3] == ("ok", True, 1)
    assert both(peers, "sync_group", group, {topic: [0]}) == ("ok", ((topic, 0),))
    assert both(peers, "commit_in_generation", group, False, name(), 0, 5) == UNKNOWN_TOPIC
    assert both(peers, "commit_in_generation", group, True, topic, 1, 5) == UNKNOWN_TOPIC
    assert both(peers, "commit_in_generation", group, True, topic, 0, 5) == ILLEGAL_GENERATION
    assert both(peers, "commit_offset", group, name(), 0, 5, "") == UNKNOWN_TOPIC
    assert both(peers, "commit_offset", group, topic, 0, 5, "") == UNKNOWN_MEMBER
    assert both(peers, "commit_in_generation", group, False, topic, 0, 5) == 0
    assert both(peers, "leave_group", group) == (0, (0,))


def test_transactions_as_the_fuzzer_drives_them(peers: list[Peer]) -> None:
    # not a finding: the producer rules' path through both brokers, end to end
    topic, txn = name(), name()
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    records = [(b"k", b"v")]
    assert both(peers, "init_producer", "idempotent", None) == ("ok",)
    assert both(peers, "produce_as", "idempotent", "next", topic, 0, records, 1) == ("ok", 0, 0)
    assert both(peers, "produce_as", "idempotent", "duplicate", topic, 0, records, 1) \
        == ("ok", 0, 0)
    assert both(peers, "produce_as", "idempotent", "gap", topic, 0, records, 1) \
        == ("error", 45)  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert both(peers, "init_producer", "transactional", txn) == ("ok",)
    assert both(peers, "add_partition", topic, 0) == 0
    assert both(peers, "produce_as", "transactional", "next", topic, 0, records, 2) \
        == ("ok", 1, 0)
    assert both(peers, "fetch_committed", topic, 0, 0)[:3] == ("ok", 2, 1)
    assert both(peers, "end_txn", False) == 0
    for peer in peers:
        producers.settle_transaction(peer)
    # the aborted record and both markers are not handed out
    assert both(peers, "fetch_committed", topic, 0, 0) == (
        "ok", 3, 3, 0, ((0, 1, b"k", b"v"),))
    assert both(peers, "init_producer", "transactional", txn) == (
        "ok", "same producer id", "epoch advanced")
    assert both(peers, "produce_as", "fenced", "next", topic, 0, records, 3)[0] == "error"
