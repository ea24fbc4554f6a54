"""RENEW (KIP-1222, ShareFetch / ShareAcknowledge v2) at the wire, through the
CLI's kio connection: a member that renews its acquisition lock keeps the
record past the lock's first deadline, so another member cannot acquire it;
without the renewal it can. RENEW at version 1, or in a group with
``share.renew.acknowledge.enable=false``, is INVALID_REQUEST.
"""

from __future__ import annotations

import datetime
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import request as ack_v1
from kio.schema.share_acknowledge.v2 import request as ack_v2
from kio.schema.share_fetch.v2 import request as fetch_v2

from compat_tests._broker import Broker, unique_topic
from kcompat.cli._kio import Cluster
from tests.integration._share import share_heartbeat

LOCK_MS = 2000
RENEW = 4


def _fetch(cluster: Cluster, group: str, member: str, epoch: int, topic_id: Any,
           acks: tuple[Any, ...] = ()) -> Any:
    return cluster.node(1).call(fetch_v2.ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=200), min_bytes=1, max_bytes=1 << 20,
        max_records=10, batch_size=10, topics=(fetch_v2.FetchTopic(
            topic_id=topic_id, partitions=(fetch_v2.FetchPartition(
                partition_index=0, acknowledgement_batches=acks),)),),
        forgotten_topics_data=()))


def _acquired(answer: Any) -> list[tuple[int, int]]:
    return [(a.first_offset, a.last_offset) for t in answer.responses for p in t.partitions
            for a in p.acquired_records]


def test_renew_keeps_the_lock_and_needs_version_2(tmp_path: Path) -> None:
    broker = Broker(tmp_path, extra_args=("--set", "group.share.min.record.lock.duration.ms=1000"))
    broker.start()
    cluster = Cluster(broker.bootstrap, 10.0)
    try:
        topic, group = unique_topic("renew"), unique_topic("renew-g")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        resource = ConfigResource("GROUP", group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in (("share.auto.offset.reset", "earliest"),
                         ("share.record.lock.duration.ms", str(LOCK_MS)))])
        admin.incremental_alter_configs([resource])[resource].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, b"only", partition=0)
        assert producer.flush(30) == 0
        topic_id = cluster.topics([topic])[topic].topic_id
        holder, other = uuid.uuid4().hex, uuid.uuid4().hex
        for member in (holder, other):
            joined = share_heartbeat(broker.bootstrap, group, member, 0, (topic,))
            assert joined.error_code == ErrorCode.none, joined
        assert _acquired(_fetch(cluster, group, holder, 0, topic_id)) == [(0, 0)]
        assert _acquired(_fetch(cluster, group, other, 0, topic_id)) == []  # locked

        time.sleep(LOCK_MS / 2000)
        v1 = cluster.node(1).call(ack_v1.ShareAcknowledgeRequest(
            group_id=group, member_id=holder, share_session_epoch=1, topics=(
                ack_v1.AcknowledgeTopic(topic_id=topic_id, partitions=(
                    ack_v1.AcknowledgePartition(partition_index=0, acknowledgement_batches=(
                        ack_v1.AcknowledgementBatch(first_offset=0, last_offset=0,
                                                    acknowledge_types=(RENEW,)),)),)),)))
        assert v1.error_code == ErrorCode.invalid_request, v1
        renewed = cluster.node(1).call(ack_v2.ShareAcknowledgeRequest(
            group_id=group, member_id=holder, share_session_epoch=1, is_renew_ack=True,
            topics=(ack_v2.AcknowledgeTopic(topic_id=topic_id, partitions=(
                ack_v2.AcknowledgePartition(partition_index=0, acknowledgement_batches=(
                    ack_v2.AcknowledgementBatch(first_offset=0, last_offset=0,
                                                acknowledge_types=(RENEW,)),)),)),)))
        assert renewed.error_code == ErrorCode.none, renewed
        assert [p.error_code for t in renewed.responses for p in t.partitions] == [
            ErrorCode.none]

        time.sleep(LOCK_MS * 0.75 / 1000)  # past the first deadline, before the renewed one
        assert _acquired(_fetch(cluster, group, other, 1, topic_id)) == []
        time.sleep(LOCK_MS * 0.75 / 1000)  # past the renewed deadline: it expired
        answer = _fetch(cluster, group, other, 2, topic_id)
        assert _acquired(answer) == [(0, 0)]
        assert [a.delivery_count for t in answer.responses for p in t.partitions
                for a in p.acquired_records] == [2]

        off = ConfigResource("GROUP", group, incremental_configs=[ConfigEntry(
            "share.renew.acknowledge.enable", "false",
            incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([off])[off].result(30)
        refused = cluster.node(1).call(ack_v2.ShareAcknowledgeRequest(
            group_id=group, member_id=other, share_session_epoch=3, is_renew_ack=True,
            topics=(ack_v2.AcknowledgeTopic(topic_id=topic_id, partitions=(
                ack_v2.AcknowledgePartition(partition_index=0, acknowledgement_batches=(
                    ack_v2.AcknowledgementBatch(first_offset=0, last_offset=0,
                                                acknowledge_types=(RENEW,)),)),)),)))
        assert [p.error_code for t in refused.responses for p in t.partitions] == [
            ErrorCode.invalid_request], refused  # share.renew.acknowledge.enable=false
    finally:
        cluster.close()
        broker.close()
