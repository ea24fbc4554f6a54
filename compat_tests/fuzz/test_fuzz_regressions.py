"""The differential fuzzer's findings, each a minimal sequence replayed on Apache
Kafka 4.4.0 and kcompat side by side: both must observe what Kafka observed
when it was found (compat_tests/FINDINGS.md, "Differential fuzzer")."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from compat_tests._broker import Broker
from compat_tests.fuzz import _consumers as consumers
from compat_tests.fuzz import _members as members
from compat_tests.fuzz import _ops as ops
from compat_tests.fuzz import _producers as producers
from compat_tests.fuzz import _share_fetch as share_fetch
from compat_tests.fuzz import _shares as shares
from compat_tests.fuzz._allowed import allowed
from compat_tests.fuzz._consumers import topic_names
from compat_tests.fuzz._machine import operation
from compat_tests.fuzz._wire import Peer
from compat_tests.java.kafka_reference import KafkaReference

SET, DELETE, APPEND = 0, 1, 2
INVALID_CONFIG, UNKNOWN_TOPIC = 40, 3
UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = 25, 22, 27
INVALID_TXN_STATE, UNSTABLE_OFFSET_COMMIT = 48, 88


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



def test_two_members_rebalance(peers: list[Peer]) -> None:
    # F7: DescribeGroups of a group not Stable names no protocol (kcompat named
    # it); F8: a member's assignment stays the last one handed out until the
    # next generation's leader syncs (kcompat emptied it when the join completed).
    # The rest is the two-member rules' path through both brokers.
    topic, group = name(), name()
    for peer in peers:
        ops.settle_group(peer, group)
    assert both(peers, "create_topic", topic, 3, 1, {}, False) == ("ok", 3, 1)
    settle(peers, topic, 3)
    every = ((topic, 0), (topic, 1), (topic, 2))
    assert both(peers, "join_group", group, [topic], 0) == (
        "ok", True, 1, "generation advanced", "range")
    assert both(peers, "describe_group", group) == (
        0, "CompletingRebalance", "consumer", "", ((),))
    assert both(peers, "sync_group", group, {topic: [0, 1, 2]}, None, 0) == ("ok", every)
    assert both(peers, "describe_group", group) == (0, "Stable", "consumer", "range", (every,))
    # a second member: held until the first joins again
    assert both(peers, "join_group", group, [topic], 1) == members.WAITING
    assert both(peers, "describe_group", group) == (
        0, "PreparingRebalance", "consumer", "", ((), every))
    assert both(peers, "heartbeat", group, 0) == REBALANCE_IN_PROGRESS
    assert both(peers, "commit_in_generation", group, False, topic, 0, 5, 0) == 0
    assert both(peers, "join_group", group, [topic], 0) == (
        "ok", True, 2, "generation advanced", "range")
    assert both(peers, "heartbeat", group, 1) == (
        members.EARLIER, ("ok", False, 0, "generation advanced", "range"))
    assert both(peers, "describe_group", group) == (
        0, "CompletingRebalance", "consumer", "", ((), every))
    # the follower's sync is held until the leader's
    assert both(peers, "sync_group", group, {}, None, 1) == members.WAITING
    assert both(peers, "commit_in_generation", group, False, topic, 0, 5, 1) == members.WAITING
    assert both(peers, "commit_in_generation", group, False, topic, 0, 5, 0) \
        == REBALANCE_IN_PROGRESS
    assert both(peers, "sync_group", group, {topic: [0]}, {topic: [1, 2]}, 0) == (
        "ok", every[:1])
    assert both(peers, "heartbeat", group, 1) == (members.EARLIER, ("ok", every[1:]))
    assert both(peers, "describe_group", group) == (
        0, "Stable", "consumer", "range", (every[:1], every[1:]))
    assert both(peers, "commit_in_generation", group, True, topic, 0, 5, 1) == ILLEGAL_GENERATION
    # the leader leaves: the follower joins again and leads
    assert both(peers, "leave_group", group, 0) == (0, (0,))
    assert both(peers, "heartbeat", group, 1) == REBALANCE_IN_PROGRESS
    assert both(peers, "join_group", group, [topic], 1) == (
        "ok", True, 1, "generation advanced", "range")
    assert both(peers, "describe_group", group) == (
        0, "CompletingRebalance", "consumer", "", (every[1:],))
    # a rebalance that starts again before the sync leaves no assignment
    assert both(peers, "join_group", group, [topic], 0) == members.WAITING
    assert both(peers, "describe_group", group) == (
        0, "PreparingRebalance", "consumer", "", ((), ()))


def test_offsets_in_a_transaction_as_the_fuzzer_drives_them(peers: list[Peer]) -> None:
    # not a finding: AddOffsetsToTxn, TxnOffsetCommit and EndTxn through both
    # brokers, read with and without require_stable
    topic, group, txn = name(), name(), name()
    for peer in peers:
        ops.settle_group(peer, group)
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "commit_offset", group, topic, 0, 2, "") == 0
    assert both(peers, "init_producer", "transactional", txn) == ("ok",)
    assert both(peers, "txn_offset_commit", group, topic, 0, 7, False) == INVALID_TXN_STATE
    assert both(peers, "add_offsets", group) == 0
    assert both(peers, "txn_offset_commit", group, topic, 0, 7, False) == 0
    assert both(peers, "fetch_offset", group, topic, 0, True) == (UNSTABLE_OFFSET_COMMIT, -1, "")
    assert both(peers, "fetch_offset", group, topic, 0, False) == (0, 2, "")
    assert both(peers, "commit_offset", group, topic, 0, 3, "") == 0
    assert both(peers, "end_txn", False) == 0
    for peer in peers:
        producers.settle_transaction(peer)
    assert both(peers, "fetch_offset", group, topic, 0, True) == (0, 3, "")
    assert both(peers, "add_offsets", group) == 0
    assert both(peers, "txn_offset_commit", group, topic, 0, 9, True) == 0
    assert both(peers, "txn_offset_commit", group, topic, 5, 9, False) == UNKNOWN_TOPIC
    assert both(peers, "end_txn", True) == 0
    for peer in peers:
        producers.settle_transaction(peer)
    assert both(peers, "fetch_offset", group, topic, 0, True) == (0, 9, "t")


@pytest.mark.parametrize(("kind", "error"), [
    ("bad crc", 2), ("magic 3", 2), ("magic 1", 87), ("count +1", 87), ("count -1", 87),
    ("codec 5", -1), ("codec 7", -1), ("empty", 87)])
def test_malformed_batches(peers: list[Peer], kind: str, error: int) -> None:
    # F9-F11: an unknown magic is CORRUPT_MESSAGE (kcompat: INVALID_RECORD); a
    # record count off the offset range, or none, is INVALID_RECORD (kcompat
    # stored the batch: a consumer could not read it); a codec id no codec has
    # is Kafka's UNKNOWN_SERVER_ERROR (kcompat: INVALID_RECORD). Nothing stored
    topic = name()
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "produce_bad", topic, 0, kind, [(b"k", b"v"), (None, b"w")],
                int(time.time() * 1000)) == (("error", error), ("ok", 0, 0, ()))


def test_the_log_append_time_bit_from_a_producer(peers: list[Peer]) -> None:
    # F12: a CreateTime topic stores the batch as CreateTime (kcompat kept the
    # bit: consumers read the producer's timestamps as append times); a
    # LogAppendTime topic refuses it with INVALID_TIMESTAMP (kcompat took it)
    topic, lat = name(), name()
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    assert both(peers, "create_topic", lat, 1, 1,
                {"message.timestamp.type": "LogAppendTime"}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    settle(peers, lat, 1)
    now = int(time.time() * 1000)
    assert both(peers, "produce_bad", topic, 0, "append time", [(b"k", b"v")], now) == (
        ("ok", 0), ("ok", 1, 0, ((0, now, b"k", b"v"),)))
    assert both(peers, "produce_bad", lat, 0, "append time", [(b"k", b"v")], now) == (
        ("error", 32), ("ok", 0, 0, ()))


def test_an_unknown_magic_fails_the_request_before_the_topic_is_looked_up(
        peers: list[Peer]) -> None:
    # F9 (second half): Kafka reads every batch's flags first, and a magic no
    # format has fails the request: CORRUPT_MESSAGE even for a missing topic
    # (kcompat: UNKNOWN_TOPIC_OR_PARTITION); an old magic is looked at later
    missing, now = name(), int(time.time() * 1000)
    assert both(peers, "produce_bad", missing, 0, "magic 3", [(None, None)], now) \
        == ("error", 2)
    assert both(peers, "produce_bad", missing, 0, "magic 1", [(None, None)], now) \
        == ("error", UNKNOWN_TOPIC)


def test_txn_offset_commit_of_a_missing_partition(peers: list[Peer]) -> None:
    # F13: UNKNOWN_TOPIC_OR_PARTITION before the transaction's state (kcompat:
    # INVALID_TXN_STATE with no AddOffsetsToTxn)
    topic, group, txn = name(), name(), name()
    for peer in peers:
        ops.settle_group(peer, group)
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "init_producer", "transactional", txn) == ("ok",)
    assert both(peers, "txn_offset_commit", group, topic, 1, 7, False) == UNKNOWN_TOPIC
    assert both(peers, "txn_offset_commit", group, name(), 0, 7, True) == UNKNOWN_TOPIC
    assert both(peers, "txn_offset_commit", group, topic, 0, 7, False) == INVALID_TXN_STATE


def test_txn_offset_commit_while_the_group_awaits_its_sync(peers: list[Peer]) -> None:
    # F14: a member of the current generation commits in a transaction while
    # the group awaits the leader's SyncGroup (kcompat: REBALANCE_IN_PROGRESS,
    # as for a plain OffsetCommit, which Kafka answers so)
    topic, group, txn = name(), name(), name()
    for peer in peers:
        ops.settle_group(peer, group)
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "join_group", group, [topic], 0)[0] == "ok"
    assert both(peers, "init_producer", "transactional", txn) == ("ok",)
    assert both(peers, "add_offsets", group) == 0
    assert both(peers, "commit_in_generation", group, False, topic, 0, 3, 0) \
        == REBALANCE_IN_PROGRESS
    assert both(peers, "txn_offset_commit", group, topic, 0, 3, True) == 0
    assert both(peers, "end_txn", True) == 0
    for peer in peers:
        producers.settle_transaction(peer)
    assert both(peers, "fetch_offset", group, topic, 0, True) == (0, 3, "t")


def test_txn_offset_commit_makes_the_group(peers: list[Peer]) -> None:
    # F16: a TxnOffsetCommit to a group no one used creates it Empty, kept
    # after an abort (kcompat: no group, described Dead)
    topic, group, txn = name(), name(), name()
    for peer in peers:
        ops.settle_group(peer, group)
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "init_producer", "transactional", txn) == ("ok",)
    assert both(peers, "add_offsets", group) == 0
    assert both(peers, "describe_group", group) == (0, "Dead", "", "", ())
    assert both(peers, "txn_offset_commit", group, topic, 0, 5, False) == 0
    assert both(peers, "describe_group", group) == (0, "Empty", "", "", ())
    assert both(peers, "end_txn", False) == 0
    for peer in peers:
        producers.settle_transaction(peer)
    assert both(peers, "describe_group", group) == (0, "Empty", "", "", ())


def consumer_group(peers: list[Peer]) -> tuple[str, list[str]]:
    """A KIP-848 group as the fuzzer sets it up, and two client-chosen member ids."""
    group = name()
    for peer in peers:
        ops.settle_group(peer, group)
        consumers.set_group_configs(peer, group)
    return group, [str(uuid.uuid4()), str(uuid.uuid4())]


def test_consumer_member_with_no_subscription_keeps_the_group_epoch(peers: list[Peer]) -> None:
    # F17: a KIP-848 member joining with no topics leaves the group epoch as it
    # is (kcompat bumped it: the first member behind, the group Reconciling)
    group, ids = consumer_group(peers)
    topics = [name()]
    assert both(peers, "consumer_heartbeat", group, ids[0], 0, topics) == ("ok", "advanced", ())
    assert both(peers, "consumer_heartbeat", group, ids[1], 1, topics) == ("ok", "advanced", ())
    member = (0, "at the group epoch", (), (), (), 1)
    assert both(peers, "consumer_describe", group, ids) == (
        "ok", "Stable", "uniform", "assigned at the group epoch",
        (member, (1, *member[1:])))
    assert both(peers, "consumer_heartbeat", group, ids[0], 0, topics) \
        == ("ok", "kept", "no new assignment")
    # the epoch past its own is fenced on both (it was the group's on kcompat)
    assert both(peers, "consumer_misbehave", group, ids[0], 0, consumers.FENCED, topics) \
        == ("error", 110)


def test_member_commit_v9_to_an_unknown_group(peers: list[Peer]) -> None:
    # F18: OffsetCommit v9 in a member epoch to a group that does not exist is
    # GROUP_ID_NOT_FOUND (kcompat: ILLEGAL_GENERATION, the answer up to v8)
    group, ids = consumer_group(peers)
    topic = name()
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "consumer_commit", group, ids[0], 0, False, topic, 0, 3) == 69


def test_offset_delete_in_a_kip848_group(peers: list[Peer]) -> None:
    # librdkafka's 0081_admin with group.protocol=consumer (2026-12-01): an
    # OffsetDelete to a KIP-848 group answered GROUP_ID_NOT_FOUND, as kcompat
    # looked for a classic group only. Kafka refuses the partitions of a topic
    # a member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC) and deletes the rest;
    # a share group is "not a consumer group" (GROUP_ID_NOT_FOUND) on both
    group, ids = consumer_group(peers)
    topic, other = name(), name()
    for t in (topic, other):
        assert both(peers, "create_topic", t, 1, 1, {}, False) == ("ok", 1, 1)
        settle(peers, t, 1)
    assert both(peers, "consumer_join", group, ids[0], 0, [topic], [topic, other]) \
        == ("ok", "advanced", ((topic, 0),))
    assert both(peers, "consumer_commit", group, ids[0], 0, False, topic, 0, 3) == 0
    assert both(peers, "consumer_commit", group, ids[0], 0, False, other, 0, 4) == 0
    assert both(peers, "offset_delete", group, topic, 0) == ("ok", 86)
    assert both(peers, "offset_delete", group, other, 0) == ("ok", 0)
    assert both(peers, "fetch_offset", group, topic, 0) == (0, 3, "")
    assert both(peers, "fetch_offset", group, other, 0) == (0, -1, "")
    # a subscribed topic that is gone: UNKNOWN_TOPIC_OR_PARTITION before the subscription
    assert both(peers, "consumer_resubscribe", group, ids[0], 0, [topic, "gone"],
                [topic, other])[0] == "ok"
    assert both(peers, "offset_delete", group, "gone", 0) == ("ok", 3)
    assert both(peers, "consumer_leave", group, ids[0], 0) == (0, -1)
    assert both(peers, "offset_delete", group, topic, 0) == ("ok", 0)
    assert both(peers, "fetch_offset", group, topic, 0) == (0, -1, "")
    shared = name()
    share, share_ids = share_group(peers, shared, 1, 0)
    for peer in peers:  # when each assigns is its own (S1): not compared
        assert operation("share_join")(peer, share, share_ids[0], 0, [shared], [shared])[0] \
            == "ok"
    assert both(peers, "offset_delete", share, shared, 0) == ("error", 69)


def test_refused_heartbeat_takes_no_topic_change_in(peers: list[Peer]) -> None:
    # F20: partitions added to a subscribed topic reach the group epoch at the
    # next heartbeat that passes the checks; a fenced one changes nothing
    # (kcompat bumped the epoch first: the group Assigning, its member behind)
    group, ids = consumer_group(peers)
    topic = name()
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "consumer_join", group, ids[0], 0, [topic], [topic]) \
        == ("ok", "advanced", ((topic, 0),))
    assert both(peers, "create_partitions", topic, 2, False) == 0
    settle(peers, topic, 2)
    assert both(peers, "consumer_misbehave", group, ids[0], 0, consumers.FENCED, [topic]) \
        == ("error", 110)
    assert both(peers, "consumer_describe", group, ids) == (
        "ok", "Stable", "uniform", "assigned at the group epoch",
        ((0, "at the group epoch", (topic,), ((topic, 0),), ((topic, 0),), 1),))


def test_share_group_describe_of_a_group_no_one_used(peers: list[Peer]) -> None:
    # F19: GROUP_ID_NOT_FOUND with no state (kcompat: "Dead"); the coordinator
    # found first (the first test of a run would meet Kafka creating the offsets topic)
    group = name()
    for peer in peers:
        ops.settle_group(peer, group)
    assert both(peers, "share_describe", group, []) == ("error", 69, "")


def share_group(peers: list[Peer], topic: str, partitions: int, records: int
                ) -> tuple[str, list[str]]:
    """A share group of the fuzzer's configs and a topic of ``partitions``
    holding ``records`` single-record batches in each."""
    group, ids = name(), [str(uuid.uuid4()) for _ in (0, 1)]
    for peer in peers:
        ops.settle_group(peer, group)
        shares.set_group_configs(peer, group)
    assert both(peers, "create_topic", topic, partitions, 1, {}, False)[0] == "ok"
    settle(peers, topic, partitions)
    stamp = int(time.time() * 1000)
    for p in range(partitions):
        for i in range(records):
            both(peers, "produce", topic, p, [(None, b"v%d" % i)], stamp, 0, -1)
    return group, ids


def join(peers: list[Peer], *args: Any) -> None:
    """A share member joins: when each broker assigns is timing (S1), its error is not."""
    kafka, kcompat = (shares.share_join(peer, *args) for peer in peers)
    assert kafka[0] == kcompat[0] == "ok", (kafka, kcompat)


def test_share_consume_as_the_fuzzer_drives_it(peers: list[Peer]) -> None:
    topic = name()
    group, ids = share_group(peers, topic, 2, 3)
    join(peers, group, ids[0], 0, [topic], [topic])
    seen = both(peers, "share_consume", group, ids, [topic], "mixed", True, False)
    acquired = {(p, o) for _t, p, o, _count in seen[1]}
    assert acquired == {(p, o) for p in (0, 1) for o in range(3)}, seen
    # offset 1 (RELEASE, by offset % 3) comes back until the delivery count limit (5)
    assert sorted(c for _t, p, o, c in seen[1] if (p, o) == (0, 1)) == [1, 2, 3, 4, 5]
    assert seen[2:] == ((), (), ()), seen
    join(peers, group, ids[1], 1, [topic], [topic])
    for how in share_fetch.MISUSES:
        both(peers, "share_session_misuse", group, ids[0], 0, [topic], how)
    seen = both(peers, "share_consume", group, ids, [topic], "accept", False, True)
    assert seen[1] == (), seen  # every record accepted, rejected or archived


def test_share_consume_past_an_aborted_transaction(peers: list[Peer]) -> None:
    # F23 (allowed): Kafka acquires the abort marker's offset, kcompat archives it as a gap
    topic = name()
    group, ids = share_group(peers, topic, 1, 0)
    both(peers, "init_producer", "transactional", f"{topic}-tx")
    both(peers, "add_partition", topic, 0)
    both(peers, "produce_as", "transactional", "next", topic, 0, [(None, b"x")],
         int(time.time() * 1000))
    join(peers, group, ids[0], 0, [topic], [topic])
    assert both(peers, "share_consume", group, ids, [topic], "reject", True, True) == (
        "ok", ((topic, 0, 0, 1),), (), (), ())
    assert both(peers, "end_txn", False) == 0
    for peer in peers:
        producers.settle_transaction(peer)
    kafka, kcompat = (share_fetch.share_consume(peer, group, ids, [topic], "accept", False, True)
                      for peer in peers)
    assert kafka == ("ok", (), (), (), ((topic, 0, 1, 1),)), kafka
    assert kcompat == ("ok", (), (), (), ()), kcompat
    assert allowed("share_consume", (), kafka, kcompat) is not None


def test_share_consumers_closed_holding_records(peers: list[Peer]) -> None:
    # S17 as the fuzzer drives it: sessions closed holding records make them available
    # again with their delivery count kept
    topic = name()
    group, ids = share_group(peers, topic, 1, 2)
    join(peers, group, ids[0], 0, [topic], [topic])
    seen = both(peers, "share_consume", group, ids, [topic], "accept", False, False, True)
    assert seen == ("ok", ((topic, 0, 0, 1), (topic, 0, 1, 1)), (), (), ()), seen
    seen = both(peers, "share_consume", group, ids, [topic], "accept", False, False)
    assert seen == ("ok", ((topic, 0, 0, 2), (topic, 0, 1, 2)), (), (), ()), seen


def test_acknowledging_offsets_never_handed_out(peers: list[Peer]) -> None:
    # F24: offsets in the log the share-partition never handed out are
    # INVALID_RECORD_STATE (kcompat: INVALID_REQUEST); past the log end, INVALID_REQUEST
    topic = name()
    group, ids = share_group(peers, topic, 1, 0)
    join(peers, group, ids[0], 0, [topic], [topic])
    assert both(peers, "share_consume", group, ids, [topic], "accept", False, False) == (
        "ok", (), (), (), ())  # the session is open, nothing to acquire
    both(peers, "produce", topic, 0, [(None, b"a"), (None, b"b"), (None, b"c")],
         int(time.time() * 1000), 0, -1)
    assert both(peers, "share_session_misuse", group, ids[0], 0, [topic],
                "ack unacquired") == ((("ack unacquired", 121),), (), 0)


def test_acknowledging_a_share_partition_not_loaded_here(peers: list[Peer]) -> None:
    # F36: a ShareAcknowledge naming a partition whose share-partition the broker
    # has not loaded (its topic re-created since the member's last fetch, so
    # nothing fetched the new one): Kafka answers UNKNOWN_TOPIC_OR_PARTITION (not
    # in its share-partition cache); kcompat loaded it for the acknowledgement and
    # answered INVALID_RECORD_STATE
    topic = name()
    group, ids = share_group(peers, topic, 1, 0)
    join(peers, group, ids[0], 0, [topic], [topic])
    assert both(peers, "share_consume", group, ids, [topic], "accept", False, False) == (
        "ok", (), (), (), ())  # the session is open, the share-partition loaded
    assert both(peers, "delete_topic", topic) == 0
    settle(peers, topic, None)
    assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    both(peers, "produce", topic, 0, [(None, b"a"), (None, b"b"), (None, b"c")],
         int(time.time() * 1000), 0, -1)
    assert both(peers, "share_session_misuse", group, ids[0], 0, [topic],
                "ack unacquired") == ((("ack unacquired", UNKNOWN_TOPIC),), (), 0)


def _released_rounds(peer: Peer, group: str, ids: list[str], topic: str
                     ) -> list[tuple[tuple[int, int, int], ...]]:
    """Member 0 fetches and releases what it got with a ShareAcknowledge
    (durable before the next fetch) until two fetches in a row get nothing:
    each non-empty fetch's acquisitions (offset first, last, delivery count)."""
    share_fetch.settle(peer, group, ids, [topic])
    [member] = [m for m in share_fetch._in_group(peer, group, ids) if m.owned]
    names = topic_names(peer, [topic])
    tid = {name: t for t, name in names.items()}
    out, empty, epoch = [], 0, 0
    while empty < 2 and len(out) < 40:
        answer = share_fetch._share_fetch(peer, group, member, None, epoch, tid,
                                          {(topic, 0)}, {})
        got = tuple((int(r.first_offset), int(r.last_offset), int(r.delivery_count))
                    for t in answer.responses for p in t.partitions
                    for r in p.acquired_records)
        epoch += 1
        if not got:
            empty += 1
            continue
        empty = 0
        out.append(got)
        acks = {(topic, 0): [(f, last, share_fetch.RELEASE) for f, last, _c in got]}
        share_fetch._share_ack(peer, group, member, None, epoch, tid, acks)
        epoch += 1
    return out


def test_share_records_released_again_and_again_are_throttled(peers: list[Peer]) -> None:
    # F25: a batch with a record delivered half the delivery limit times (3 of 5) is
    # acquired only first in a ShareFetch, nothing after it, and from that record at
    # most the batch's size halved per delivery past 3; kcompat took every batch whole
    topic = name()
    group, ids = share_group(peers, topic, 1, 0)
    join(peers, group, ids[0], 0, [topic], [topic])
    stamp = int(time.time() * 1000)
    both(peers, "produce", topic, 0, [(None, b"a"), (None, b"b"), (None, b"c")], stamp, 0, -1)
    # one round, then the consumer closes holding them (their delivery count kept)
    both(peers, "share_consume", group, ids, [topic], "release", False, True, True)
    both(peers, "produce", topic, 0, [(None, b"d"), (None, b"e"), (None, b"f")], stamp, 0, -1)
    kafka, kcompat = (_released_rounds(peer, group, ids, topic) for peer in peers)
    assert kafka == [((0, 2, 2), (3, 5, 1)), ((0, 2, 3), (3, 5, 2)), ((0, 0, 4),),
                     ((0, 0, 5),), ((1, 1, 4),), ((1, 1, 5),), ((2, 2, 4),), ((2, 2, 5),),
                     ((3, 5, 3),), ((3, 3, 4),), ((3, 3, 5),), ((4, 4, 4),), ((4, 4, 5),),
                     ((5, 5, 4),), ((5, 5, 5),)], kafka
    assert kcompat == kafka


def test_share_group_over_a_topic_deleted_and_re_created(peers: list[Peer]) -> None:
    # a subscribed topic deleted and re-created (same name and partition count, a new
    # id) with no heartbeat in between: the members get their assignment again naming
    # the new id, and consume it (kcompat's members kept the deleted topic's id)
    topic = name()
    group, ids = share_group(peers, topic, 2, 1)
    join(peers, group, ids[0], 0, [topic], [topic])
    seen = both(peers, "share_consume", group, ids, [topic], "accept", False, True)
    assert {(p, o) for _t, p, o, _c in seen[1]} == {(0, 0), (1, 0)}, seen
    assert both(peers, "delete_topic", topic) == 0
    assert both(peers, "create_topic", topic, 2, 1, {}, False)[0] == "ok"
    settle(peers, topic, 2)
    both(peers, "produce", topic, 0, [(None, b"x"), (None, b"y")], int(time.time() * 1000),
         0, -1)
    seen = both(peers, "share_consume", group, ids, [topic], "accept", False, True)
    assert seen[1] == ((topic, 0, 0, 1), (topic, 0, 1, 1)), seen


def _acquired_by_fetches(peer: Peer, group: str, ids: list[str], topic: str,
                         max_records: list[int]) -> list[tuple[tuple[int, int, int], ...]]:
    """ShareFetches of member 0's session with these ``max_records``, one
    after the other: what each acquired (partition, offset, delivery count)."""
    share_fetch.settle(peer, group, ids, [topic])
    [member] = [m for m in share_fetch._in_group(peer, group, ids) if m.owned]
    names = topic_names(peer, [topic])
    tid = {name: t for t, name in names.items()}
    out = []
    for epoch, limit in enumerate(max_records):
        answer = share_fetch._share_fetch(peer, group, member, None, epoch, tid,
                                          {(topic, 0)}, {}, limit)
        seen = share_fetch._Round()
        assert share_fetch._read(answer, names, seen, "fetch", None), answer
        out.append(tuple(sorted((p, o, c) for _t, p, o, c in seen.acquired)))
        time.sleep(0.2)
    return out


def test_share_fetch_with_max_records_zero_acquires_nothing(peers: list[Peer]) -> None:
    # a ShareFetch with MaxRecords 0 (the Java client's record_limit mode sends it to
    # the brokers it only acknowledges with): Kafka 4.4 acquires nothing
    topic = name()
    group, ids = share_group(peers, topic, 1, 3)
    join(peers, group, ids[0], 0, [topic], [topic])
    kafka, kcompat = (_acquired_by_fetches(peer, group, ids, topic, [0, 0, 0, 500, 500])
                      for peer in peers)
    for seen in (kafka, kcompat):  # which of the last two acquires them is timing (S2)
        assert seen[:3] == [(), (), ()], (kafka, kcompat)
        assert set(seen[3] + seen[4]) == {(0, 0, 1), (0, 1, 1), (0, 2, 1)}, (kafka, kcompat)


def test_a_transactional_batch_outside_its_transaction_before_its_records_are_checked(
        peers: list[Peer]) -> None:
    # Kafka verifies a transactional batch's partition is in the transaction before its
    # log validates the records: a keyless record to a compacted partition that is not
    # in the transaction is INVALID_TXN_STATE there, not INVALID_RECORD
    topic, txn = name(), name()
    assert both(peers, "create_topic", topic, 1, 1, {"cleanup.policy": "compact"},
                False) == ("ok", 1, 1)
    settle(peers, topic, 1)
    assert both(peers, "init_producer", "transactional", txn) == ("ok",)
    keyless = [(None, b"v")]
    assert both(peers, "produce_as", "transactional", "next", topic, 0, keyless, 1) \
        == ("error", INVALID_TXN_STATE)
    assert both(peers, "add_partition", topic, 0) == 0
    assert both(peers, "produce_as", "transactional", "next", topic, 0, keyless, 1) \
        == ("error", 87)  # in the transaction now: INVALID_RECORD


def two_on_six_partitions(peers: list[Peer]) -> tuple[str, list[str], list[str]]:
    """A KIP-848 group whose first member holds a 6-partition topic and a
    second has just joined it; the group, three member ids and the topic."""
    group, ids = consumer_group(peers)
    topic = name()
    assert both(peers, "create_topic", topic, 6, 1, {}, False) == ("ok", 6, 1)
    settle(peers, topic, 6)
    topics = [topic]
    both(peers, "consumer_join", group, ids[0], 0, topics, topics)
    both(peers, "consumer_join", group, ids[1], 1, topics, topics)
    return group, [*ids, str(uuid.uuid4())], topics


def test_a_member_with_more_to_revoke_stays_at_its_epoch(peers: list[Peer]) -> None:
    # Kafka 4.4's CurrentAssignmentBuilder: a member that revoked what it was
    # asked to while the target moved on (a third member joined) and has more
    # to revoke stays at its epoch ("kept"; kcompat moved it one epoch on), and
    # that step makes its epoch its previous one: a heartbeat at the epoch
    # before is fenced (kcompat accepted it)
    group, ids, topics = two_on_six_partitions(peers)
    asked = both(peers, "consumer_heartbeat", group, ids[0], 0, topics)
    assert asked[:2] == ("ok", "kept") and len(asked[2]) == 3  # revoke three
    both(peers, "consumer_join", group, ids[2], 2, topics, topics)
    again = both(peers, "consumer_heartbeat", group, ids[0], 0, topics)
    assert again[:2] == ("ok", "kept") and len(again[2]) == 2  # revoke one more
    assert both(peers, "consumer_misbehave", group, ids[0], 0, consumers.PREVIOUS, topics) \
        == ("error", 110)


def test_a_step_at_the_same_epoch_makes_it_the_previous_one(peers: list[Peer]) -> None:
    # Kafka 4.4's updateMemberEpoch: every step of reconciliation makes the
    # member's epoch its previous one, even a step that keeps the epoch (asked
    # to revoke): a heartbeat at the epoch it had before is then fenced
    # (kcompat kept the older previous epoch and accepted it)
    group, ids, topics = two_on_six_partitions(peers)
    assert both(peers, "consumer_heartbeat", group, ids[0], 0, topics)[1] == "kept"
    assert both(peers, "consumer_heartbeat", group, ids[0], 0, topics)[1] == "advanced"
    both(peers, "consumer_join", group, ids[2], 2, topics, topics)
    assert both(peers, "consumer_heartbeat", group, ids[0], 0, topics)[1] == "kept"
    assert both(peers, "consumer_misbehave", group, ids[0], 0, consumers.PREVIOUS, topics) \
        == ("error", 110)


def test_a_deleted_topics_partitions_are_revoked_before_new_ones_come(peers: list[Peer]) -> None:
    # F37: a member still holding the partitions of a topic deleted since, which
    # its heartbeat names by the deleted topic's id, is asked to revoke them
    # first (its epoch kept, an empty assignment; Kafka keys assignments by
    # topic id); kcompat could not resolve the id, took them as released and
    # moved it to the new target at once
    group, ids = consumer_group(peers)
    gone, new = name(), name()
    assert both(peers, "create_topic", gone, 2, 1, {}, False) == ("ok", 2, 1)
    settle(peers, gone, 2)
    topics = [gone, new]
    assert both(peers, "consumer_join", group, ids[0], 0, topics, topics) \
        == ("ok", "advanced", ((gone, 0), (gone, 1)))
    assert both(peers, "delete_topic", gone) == 0
    settle(peers, gone, None)
    assert both(peers, "create_topic", new, 2, 1, {}, False) == ("ok", 2, 1)
    settle(peers, new, 2)
    assert both(peers, "consumer_resubscribe", group, ids[0], 0, [new], topics) \
        == ("ok", "kept", ())
    assert both(peers, "consumer_heartbeat", group, ids[0], 0, topics) \
        == ("ok", "advanced", ((new, 0), (new, 1)))


def test_a_topic_left_leaves_the_assignment_before_the_target_moves(peers: list[Peer]) -> None:
    # Kafka 4.4's updateCurrentAssignment: a member that stops subscribing to
    # a topic while the target assignment waits for its interval loses that
    # topic's partitions at once (to revoke: its epoch kept); kcompat kept
    # them until the next target (ConsumerGroupDescribe showed a member
    # owning a topic it no longer subscribed to)
    group, ids = consumer_group(peers)
    for peer in peers:  # the target then waits: the next assignment is 15 s away
        consumers.set_group_configs(peer, group, {"consumer.assignment.interval.ms": "15000"})
    kept, left = name(), name()
    for topic in (kept, left):
        assert both(peers, "create_topic", topic, 1, 1, {}, False) == ("ok", 1, 1)
        settle(peers, topic, 1)
    topics = [kept, left]
    assert both(peers, "consumer_join", group, ids[0], 0, topics, topics) \
        == ("ok", "advanced", tuple(sorted(((kept, 0), (left, 0)))))
    assert both(peers, "consumer_resubscribe", group, ids[0], 0, [kept], topics) \
        == ("ok", "kept", ((kept, 0),))
    assert both(peers, "consumer_heartbeat", group, ids[0], 0, topics) \
        == ("ok", "kept", "no new assignment")


def test_stale_topic_ids_of_a_share_session_compared_by_request() -> None:
    # F32: a topic deleted and re-created twice under a share session. Kafka's
    # session keeps each incarnation's id (one answered UNKNOWN_SERVER_ERROR,
    # an older one UNKNOWN_TOPIC_OR_PARTITION), kcompat's one id per name; both
    # answer the partitions of a topic id the metadata lacks with an error
    stale = "?unknown topic id"
    kafka = ("ok", (), (("fetch", stale, 0, -1), ("fetch", stale, 0, 3),
                        ("fetch", stale, 1, -1), ("fetch", stale, 1, 3)), (), ())
    kcompat = ("ok", (), (("fetch", stale, 0, 3), ("fetch", stale, 1, 3)), (), ())
    assert allowed("share_consume", (), kafka, kcompat) is not None
    # F21: the new id named, kcompat's session holds no stale one
    assert allowed("share_consume", (), kafka, ("ok", (), (), (), ())) is not None
    # a stale-id error kcompat gives and Kafka does not is a difference
    assert allowed("share_consume", (), ("ok", (), (), (), ()), kcompat) is None
    # F21: a partition the re-created topic lacks, under the new id on kcompat
    loaded = ("ok", (), (("fetch", stale, 0, -1), ("fetch", stale, 1, -1)), (), ())
    assert allowed("share_consume", (), loaded,
                   ("ok", (), (("fetch", "t", 1, 3),), (), ())) is not None
    assert allowed("share_consume", (), loaded,
                   ("ok", (), (("fetch", "t", 2, 3),), (), ())) is None


def test_a_stale_commit_is_compared_with_the_placement_it_depends_on() -> None:
    # a commit at the epoch before (KIP-1251) is accepted for the partitions the
    # member has held since; when the uniform assignor placed a topic's new
    # partition with the other member on one broker (a 2 -> 3 partition topic:
    # Kafka gave a-2 to one member, kcompat to the other), the commit's answer
    # follows: 113 where the member does not hold it, 0 where it does
    args = ("g", "m", 0, True, "a", 2, 11)
    assert allowed("consumer_commit", args, (113, False), (0, True)) is not None
    # the same holding and different answers: a difference
    assert allowed("consumer_commit", args, (113, True), (0, True)) is None
    assert allowed("consumer_commit", ("g", "m", 0, False, "a", 2, 11), 113, 0) is None


def test_one_heartbeat_bumps_the_group_epoch_once(peers: list[Peer]) -> None:
    # Kafka 4.4 bumps the group epoch once for a heartbeat that changes the
    # member's subscription while the subscribed topics' metadata changed too
    # (a subscribed topic created meanwhile); kcompat bumped it twice, so the
    # member's new epoch was two past its previous one and a heartbeat at the
    # epoch before was fenced, not accepted (the fuzzer's 3-broker difference)
    group, ids = consumer_group(peers)
    first, second, third = name(), name(), name()
    topics = [first, second, third]
    assert both(peers, "consumer_resubscribe", group, ids[0], 0, [first], topics) \
        == ("ok", "advanced", ())
    assert both(peers, "create_topic", first, 1, 1, {}, False) == ("ok", 1, 1)
    settle(peers, first, 1)
    assert both(peers, "consumer_join", group, ids[0], 0, topics, topics) \
        == ("ok", "advanced", ((first, 0),))
    assert both(peers, "consumer_misbehave", group, ids[0], 0, consumers.PREVIOUS, topics) \
        == ("ok", "kept", "no new assignment")


def _accepted_twice(peer: Peer, group: str, ids: list[str], topic: str
                    ) -> tuple[tuple[int, int, int], ...]:
    """Member 0 fetches what the partition holds, ACCEPTs it with a
    ShareAcknowledge, then ACCEPTs it again (the start offset has moved past
    it): (error, acknowledge error) of each acknowledgement, then what the
    acquisition got (first, last, delivery count)."""
    share_fetch.settle(peer, group, ids, [topic])
    [member] = [m for m in share_fetch._in_group(peer, group, ids) if m.owned]
    tid = {name: t for t, name in topic_names(peer, [topic]).items()}
    got: tuple[tuple[int, int, int], ...] = ()
    for _ in range(20):  # until the share-partition is initialized and hands them out
        answer = share_fetch._share_fetch(peer, group, member, None, 0, tid, {(topic, 0)}, {})
        got = tuple((int(r.first_offset), int(r.last_offset), int(r.delivery_count))
                    for t in answer.responses for p in t.partitions
                    for r in p.acquired_records)
        if got:
            break
        time.sleep(0.25)
    acks = {(topic, 0): [(f, last, share_fetch.ACCEPT) for f, last, _c in got]}
    codes = []
    for epoch in (1, 2):
        answer = share_fetch._share_ack(peer, group, member, None, epoch, tid, acks)
        codes += [(int(answer.error_code), int(p.error_code)) for t in answer.responses
                  for p in t.partitions]
    return (*got, *((c[0], c[1], -1) for c in codes))


def test_an_acknowledgement_below_the_start_offset_is_answered_none(peers: list[Peer]) -> None:
    # the chaos test's "ACCEPTed and confirmed 2 times": a member whose lock ran
    # out acknowledged records another member had ACCEPTed since, the start
    # offset past them, and kcompat answered NONE. So does Kafka 4.4.0: its
    # SharePartition.acknowledge skips a batch whose last offset is below the
    # start offset. The chaos test's promise was stricter than Kafka's
    topic = name()
    group, ids = share_group(peers, topic, 1, 3)
    join(peers, group, ids[0], 0, [topic], [topic])
    kafka, kcompat = (_accepted_twice(peer, group, ids, topic) for peer in peers)
    assert kafka[0][0] == 0 and kafka[-2:] == ((0, 0, -1), (0, 0, -1)), kafka
    assert kcompat == kafka


def test_a_topic_re_created_without_a_heartbeat_leaves_the_described_assignment(
        peers: list[Peer]) -> None:
    # Kafka keeps assignments by topic id: a topic deleted and re-created under
    # its name (fewer partitions) before the member's next heartbeat is no
    # longer in its described assignment or target; kcompat, keeping them by
    # name, described the old partitions under the new topic
    group, ids = consumer_group(peers)
    topic = name()
    assert both(peers, "create_topic", topic, 3, 1, {}, False) == ("ok", 3, 1)
    settle(peers, topic, 3)
    joined = both(peers, "consumer_join", group, ids[0], 0, [topic], [topic])
    assert joined[:2] == ("ok", "advanced") and len(joined[2]) == 3, joined
    assert both(peers, "delete_topic", topic) == 0
    settle(peers, topic, None)
    assert both(peers, "create_topic", topic, 2, 1, {}, False) == ("ok", 2, 1)
    settle(peers, topic, 2)
    described = both(peers, "consumer_describe", group, ids)
    assert described[4] == ((0, "at the group epoch", (topic,), (), (), 1),), described


def test_a_settle_beside_a_member_out_of_view_compares_counts() -> None:
    # a 3-broker run: the one member in view held a-1 on Kafka and a-0 on kcompat,
    # the other member fenced (out by the fuzzer's account, holding the rest at the
    # broker until its session ends): placement. With every member in view, which
    # partitions are assigned is still compared
    out = "not in the group"
    assert allowed("consumer_settle", (), ("settled", ((("a", 1),), out)),
                   ("settled", ((("a", 0),), out))) is not None
    assert allowed("consumer_settle", (), ("settled", ((("a", 1),), (("a", 0),))),
                   ("settled", ((("a", 0),), (("a", 0),)))) is None
    assert allowed("consumer_settle", (), ("settled", ((("a", 1),), out)),
                   ("settled", ((("a", 0), ("a", 1)), out))) is None


def test_a_fetch_answers_the_loaded_share_partitions_first(fuzz_broker: Broker) -> None:
    # Kafka answers a ShareFetch with the share-partitions that are initialized and
    # loads the others meanwhile, whatever their order in the request; kcompat loaded
    # one named before a loaded partition with records at once, and handed out its
    # records too (`make fuzz` on one node: a record of a just-assigned partition
    # acquired on kcompat, not on Kafka). kcompat alone: when Kafka's own load
    # completes is timing
    peer = Peer("kcompat", fuzz_broker.bootstrap)
    try:
        loaded, fresh, group = name(), name(), name()
        ids = [str(uuid.uuid4()), str(uuid.uuid4())]
        ops.settle_group(peer, group)
        shares.set_group_configs(peer, group)
        stamp = int(time.time() * 1000)
        for topic, value in ((loaded, b"l0"), (fresh, b"f")):
            assert operation("create_topic")(peer, topic, 1, 1, {}, False)[0] == "ok"
            ops.settle_topic(peer, topic, 1)
            operation("produce")(peer, topic, 0, [(None, value)], stamp, 0, -1)
        assert shares.share_join(peer, group, ids[0], 0, [loaded, fresh],
                                 [loaded, fresh])[0] == "ok"
        share_fetch.settle(peer, group, ids, [loaded, fresh])
        [member] = [m for m in share_fetch._in_group(peer, group, ids) if m.owned]
        tid = {n: t for t, n in topic_names(peer, [loaded, fresh]).items()}
        # the loaded partition's share-partition: claimed by a first fetch of it alone
        first = share_fetch._share_fetch(peer, group, member, None, 0, tid, {(loaded, 0)}, {})
        assert [len(p.acquired_records) for t in first.responses for p in t.partitions] == [1]
        operation("produce")(peer, loaded, 0, [(None, b"l")], stamp, 0, -1)
        # the fresh partition named first: the answer is the loaded one's new record
        answer = share_fetch._share_fetch(peer, group, member, None, 1, tid,
                                          {(fresh, 0), (loaded, 0)}, {})
        got = {(names[t.topic_id], int(r.first_offset)) for t in answer.responses
               for p in t.partitions for r in p.acquired_records
               for names in [{v: k for k, v in tid.items()}]}
        assert got == {(loaded, 1)}, answer
    finally:
        peer.close()
