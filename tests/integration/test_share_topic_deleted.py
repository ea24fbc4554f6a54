"""A share session whose topic is deleted, then re-created under its name, at
the wire (ShareFetch / ShareAcknowledge v1 through the CLI's kio connection).

What Apache Kafka 4.4.0 answers (seen with the same sequence against it):
the session's partition of the deleted topic is UNKNOWN_TOPIC_OR_PARTITION in
every ShareFetch answer, its acknowledgements UNKNOWN_TOPIC_ID; a
ShareAcknowledge naming the deleted topic's id is UNKNOWN_TOPIC_ID; the
connection stays open. Before the fix the broker raised ``KeyError`` in
``topic_responses`` and closed the connection. The re-created topic (a new
id) is served from its own offset 0: the deleted topic's share-partition
state (start offset 5 here) is not carried over to it, nor reported by
DescribeShareGroupOffsets, which names no error for the deleted topic (Kafka's
answer: start offset -1, error NONE).
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kio.schema.describe_share_group_offsets.v1 import request as describe_offsets
from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import request as share_ack
from kio.schema.share_fetch.v1 import request as share_fetch

from compat_tests._broker import Broker, unique_topic
from kcompat.cli._kio import Cluster
from tests.integration._share import share_heartbeat

ACCEPT = 1
UNKNOWN_PART = ErrorCode.unknown_topic_or_partition
UNKNOWN_ID = ErrorCode.unknown_topic_id


class _Member:
    def __init__(self, cluster: Cluster, group: str) -> None:
        self.cluster, self.group = cluster, group
        self.member_id, self.epoch = uuid.uuid4().hex, 0

    def fetch(self, topic_id: Any = None, acks: tuple[tuple[int, int], ...] = (),
              partitions: tuple[int, ...] = (0,)) -> Any:
        batches = tuple(share_fetch.AcknowledgementBatch(
            first_offset=f, last_offset=last, acknowledge_types=(ACCEPT,)) for f, last in acks)
        topics = () if topic_id is None else (share_fetch.FetchTopic(
            topic_id=topic_id, partitions=tuple(share_fetch.FetchPartition(
                partition_index=i, acknowledgement_batches=batches if i == 0 else ())
                for i in partitions)),)
        answer = self.cluster.node(1).call(share_fetch.ShareFetchRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=self.epoch,
            max_wait=datetime.timedelta(milliseconds=200), min_bytes=1, max_bytes=1 << 20,
            max_records=100, batch_size=100, topics=topics, forgotten_topics_data=()))
        assert answer.error_code == ErrorCode.none, answer
        self.epoch += 1
        return answer

    def acknowledge(self, topic_id: Any, first: int, last: int) -> Any:
        answer = self.cluster.node(1).call(share_ack.ShareAcknowledgeRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=self.epoch,
            topics=(share_ack.AcknowledgeTopic(topic_id=topic_id, partitions=(
                share_ack.AcknowledgePartition(partition_index=0, acknowledgement_batches=(
                    share_ack.AcknowledgementBatch(first_offset=first, last_offset=last,
                                                   acknowledge_types=(ACCEPT,)),)),)),)))
        assert answer.error_code == ErrorCode.none, answer
        self.epoch += 1
        return answer


def _parts(answer: Any) -> list[tuple[Any, int, int, Any, list[tuple[int, int, int]]]]:
    """(topic id, partition, error, acknowledge error, acquired) per partition."""
    return [(t.topic_id, p.partition_index, p.error_code,
             getattr(p, "acknowledge_error_code", None),
             [(a.first_offset, a.last_offset, a.delivery_count)
              for a in getattr(p, "acquired_records", ())])
            for t in answer.responses for p in t.partitions]


def _start_offsets(cluster: Cluster, group: str, topic: str) -> list[tuple[int, int, int]]:
    """DescribeShareGroupOffsets of partition 0: (error, start offset, lag)."""
    answer = cluster.coordinator(group).call(describe_offsets.DescribeShareGroupOffsetsRequest(
        groups=(describe_offsets.DescribeShareGroupOffsetsRequestGroup(
            group_id=group, topics=(describe_offsets.DescribeShareGroupOffsetsRequestTopic(
                topic_name=topic, partitions=(0,)),)),)))
    return [(p.error_code, p.start_offset, p.lag) for t in answer.groups[0].topics
            for p in t.partitions]


def _wait_gone(cluster: Cluster, topic: str) -> None:
    deadline = time.monotonic() + 30
    while topic in cluster.topics([topic]):
        assert time.monotonic() < deadline, f"{topic} still listed"
        time.sleep(0.1)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Broker, Cluster, AdminClient]]:
    """A broker, the CLI's kio connection to it, and an admin client."""
    broker = Broker(tmp_path)
    broker.start()
    cluster = Cluster(broker.bootstrap, 10.0)
    try:
        yield broker, cluster, AdminClient({"bootstrap.servers": broker.bootstrap})
    finally:
        cluster.close()
        broker.close()


def test_share_session_over_a_deleted_and_recreated_topic(
        served: tuple[Broker, Cluster, AdminClient]) -> None:
    broker, cluster, admin = served
    topic, group = unique_topic("share-del"), unique_topic("share-del-g")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    resource = ConfigResource("GROUP", group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest",
        incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce(topic, b"old-%d" % i, partition=0)
    assert producer.flush(30) == 0
    old_id = cluster.topics([topic])[topic].topic_id
    joined = share_heartbeat(broker.bootstrap, group, uuid.uuid4().hex, 0, (topic,))
    assert joined.error_code == ErrorCode.none, joined
    member = _Member(cluster, group)
    assert _parts(member.fetch(old_id)) == [(old_id, 0, ErrorCode.none, 0, [(0, 4, 1)])]
    assert _parts(member.acknowledge(old_id, 0, 4)) == [(old_id, 0, ErrorCode.none, None, [])]
    assert _start_offsets(cluster, group, topic) == [(ErrorCode.none, 5, 0)]

    admin.delete_topics([topic])[topic].result(30)
    _wait_gone(cluster, topic)
    assert _parts(member.fetch()) == [(old_id, 0, UNKNOWN_PART, 0, [])]
    assert _parts(member.fetch(old_id, acks=((0, 0),))) == [
        (old_id, 0, UNKNOWN_PART, UNKNOWN_ID, [])]
    assert _parts(member.acknowledge(old_id, 1, 1)) == [(old_id, 0, UNKNOWN_ID, None, [])]
    # Kafka 4.4.0 names no error for a topic it does not know: no offsets
    assert _start_offsets(cluster, group, topic) == [(ErrorCode.none, -1, -1)]

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    new_id = cluster.topics([topic])[topic].topic_id
    assert new_id != old_id
    producer.produce(topic, b"new-0", partition=0)
    assert producer.flush(30) == 0
    assert _parts(member.fetch()) == [(old_id, 0, UNKNOWN_PART, 0, [])]
    # the deleted topic's state is not the new one's (it had start offset 5)
    assert _start_offsets(cluster, group, topic) == [(ErrorCode.none, -1, -1)]
    # the new topic starts with no share state: its offset 0 is served
    assert _parts(member.fetch(new_id)) == [(new_id, 0, ErrorCode.none, 0, [(0, 0, 1)])]


def test_a_stale_partition_is_answered_under_the_id_it_was_fetched_by(
        served: tuple[Broker, Cluster, AdminClient]) -> None:
    """F39: a session holds both partitions of a topic, fetched under its id;
    the topic is deleted and re-created with two partitions, and the member
    fetches partition 0 under the new id. Partition 1 of the session is still
    the old incarnation's: it is answered UNKNOWN_TOPIC_OR_PARTITION under
    the old id (the new topic's partition 1 exists and is fine), as Kafka's
    sessions, keyed by topic id, answer it."""
    broker, cluster, admin = served
    topic, group = unique_topic("share-stale"), unique_topic("share-stale-g")
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    old_id = cluster.topics([topic])[topic].topic_id
    joined = share_heartbeat(broker.bootstrap, group, uuid.uuid4().hex, 0, (topic,))
    assert joined.error_code == ErrorCode.none, joined
    member = _Member(cluster, group)
    assert {p[:3] for p in _parts(member.fetch(old_id, partitions=(0, 1)))} <= {
        (old_id, 0, ErrorCode.none), (old_id, 1, ErrorCode.none)}
    admin.delete_topics([topic])[topic].result(30)
    _wait_gone(cluster, topic)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    new_id = cluster.topics([topic])[topic].topic_id
    assert new_id != old_id
    answer = {(p[0], p[1]): p[2] for p in _parts(member.fetch(new_id, partitions=(0,)))}
    assert answer.get((old_id, 1)) == UNKNOWN_PART, answer
    assert (new_id, 1) not in answer, answer
    assert answer.get((new_id, 0), ErrorCode.none) == ErrorCode.none, answer
