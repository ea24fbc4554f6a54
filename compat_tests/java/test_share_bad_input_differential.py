"""Differential: bad input to the share-group APIs (KIP-932) on Apache Kafka 4.4
and on kcompat (single broker), at the wire level.

Requests are encoded and answers decoded with kio (kafka-python has no share
APIs). One script (``run_script``) runs against each broker once: it creates a
1-partition topic with a few records, sets the share group's
``share.auto.offset.reset=earliest``, then sends ShareGroupHeartbeat,
ShareFetch, ShareAcknowledge and ShareGroupDescribe requests, good and bad, in a
fixed order, and keeps the error codes of each answer (top level, and per
partition as (error, acknowledge error) with topic ids named ``known`` or
``unknown``). Each step is then a test: kcompat's codes must equal Kafka's.
The good steps are there so that the bad ones meet the same session and
record state on both brokers.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest
from kafka import KafkaProducer
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.incremental_alter_configs.v1 import request as alter_configs
from kio.schema.metadata.v12 import request as metadata
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.share_acknowledge.v1 import request as share_ack
from kio.schema.share_fetch.v1 import request as share_fetch
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from compat_tests._deployment import Deployment
from compat_tests.java.kafka_reference import KafkaReference
from kcompat.cli._kio import Connection

pytestmark = pytest.mark.timeout(120)

TOPIC = "share-bad-input"
GROUP = "share-bad-input"
CLASSIC_GROUP = "share-bad-input-classic"
RECORDS = 5
GROUP_RESOURCE = 32
ACCEPT = 1
WAIT_MS = 200
#: how long the script waits for the first acquisition (Kafka initializes the
#: share-partition on the first fetch)
ACQUIRE_TIMEOUT_S = 10.0

Codes = tuple[Any, ...]


# -- requests ----------------------------------------------------------------------------


def heartbeat(conn: Connection, member_id: str, epoch: int,
              topics: tuple[str, ...] | None = (TOPIC,), group: str = GROUP) -> Any:
    return conn.call(ShareGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, rack_id=None,
        subscribed_topic_names=topics))


Acks = tuple[tuple[int, int], ...]  # (first, last) offsets, ACCEPTed


def fetch(conn: Connection, member_id: str, epoch: int, topic_id: uuid.UUID,
          acks: Acks = (), partitions: tuple[int, ...] = (0,)) -> Any:
    batches = tuple(share_fetch.AcknowledgementBatch(first_offset=f, last_offset=last,
                                                     acknowledge_types=(ACCEPT,))
                    for f, last in acks)
    return conn.call(share_fetch.ShareFetchRequest(
        group_id=GROUP, member_id=member_id, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=WAIT_MS), min_bytes=1, max_records=100,
        batch_size=100, topics=(share_fetch.FetchTopic(topic_id=topic_id, partitions=tuple(
            share_fetch.FetchPartition(partition_index=p, acknowledgement_batches=batches)
            for p in partitions)),),
        forgotten_topics_data=()))


def acknowledge(conn: Connection, member_id: str, epoch: int, topic_id: uuid.UUID,
                acks: Acks) -> Any:
    batches = tuple(share_ack.AcknowledgementBatch(first_offset=f, last_offset=last,
                                                   acknowledge_types=(ACCEPT,))
                    for f, last in acks)
    return conn.call(share_ack.ShareAcknowledgeRequest(
        group_id=GROUP, member_id=member_id, share_session_epoch=epoch,
        topics=(share_ack.AcknowledgeTopic(topic_id=topic_id, partitions=(
            share_ack.AcknowledgePartition(partition_index=0,
                                           acknowledgement_batches=batches),)),)))


def describe(conn: Connection, group: str) -> Codes:
    answer = conn.call(ShareGroupDescribeRequest(
        group_ids=(group,), include_authorized_operations=False))
    return tuple(int(g.error_code) for g in answer.groups)


# -- setup -------------------------------------------------------------------------------


def create_topic(conn: Connection) -> uuid.UUID:
    answer = conn.call(create_topics.CreateTopicsRequest(
        topics=(create_topics.CreatableTopic(name=TOPIC, num_partitions=1,
                                             replication_factor=1, assignments=(),
                                             configs=()),),
        timeout=datetime.timedelta(seconds=10), validate_only=False))
    assert answer.topics[0].error_code == 0, answer
    # Kafka answers CreateTopics once its controller committed the topic; its broker's
    # metadata may learn of it a moment later (UNKNOWN_TOPIC_OR_PARTITION meanwhile),
    # and a client asks again, as here
    deadline = time.monotonic() + 15
    while True:
        found = conn.call(metadata.MetadataRequest(
            topics=(metadata.MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        if found.topics[0].error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert found.topics[0].error_code == 0 and found.topics[0].topic_id is not None
    return found.topics[0].topic_id  # type: ignore[no-any-return]


def set_earliest(conn: Connection) -> None:
    answer = conn.call(alter_configs.IncrementalAlterConfigsRequest(resources=(
        alter_configs.AlterConfigsResource(
            resource_type=GROUP_RESOURCE, resource_name=GROUP, configs=(
                alter_configs.AlterableConfig(name="share.auto.offset.reset",
                                              config_operation=0, value="earliest"),)),),
        validate_only=False))
    assert answer.responses[0].error_code == 0, answer


def await_coordinators(conn: Connection) -> None:
    """Both groups' coordinator serves (Kafka creates ``__consumer_offsets`` on
    the first FindCoordinator)."""
    deadline = time.monotonic() + ACQUIRE_TIMEOUT_S
    while True:
        answer = conn.call(FindCoordinatorRequest(
            key_type=0, coordinator_keys=(GROUP, CLASSIC_GROUP)))
        if all(c.error_code == 0 for c in answer.coordinators):
            return
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)


def commit_classic_offset(conn: Connection) -> None:
    """A classic group with offsets and no members (a simple consumer's commit)."""
    deadline = time.monotonic() + ACQUIRE_TIMEOUT_S
    while True:
        answer = conn.call(offset_commit.OffsetCommitRequest(
            group_id=CLASSIC_GROUP, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=(offset_commit.OffsetCommitRequestTopic(
                name=TOPIC, partitions=(offset_commit.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                    committed_metadata=None),)),)))
        if answer.topics[0].partitions[0].error_code == 0:
            return
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)


def produce(bootstrap: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for i in range(RECORDS):
            producer.send(TOPIC, key=b"k%d" % i, value=b"v%d" % i, partition=0)
        producer.flush(timeout=15)
    finally:
        producer.close(timeout=5)


# -- the script --------------------------------------------------------------------------


def share_codes(answer: Any, topic_id: uuid.UUID) -> Codes:
    """(top-level error, sorted per partition (topic, index, error[, ack error])).
    A ShareFetch partition with nothing to say (no error, no acknowledgement
    error) is left out: Kafka lists the session's partitions, kcompat those with
    records or errors, and records come when they come."""
    parts = []
    for t in answer.responses:
        name = "known" if t.topic_id == topic_id else "unknown"
        for p in t.partitions:
            ack = getattr(p, "acknowledge_error_code", None)
            if ack is not None and p.error_code == 0 and ack == 0:
                continue
            parts.append((name, p.partition_index, int(p.error_code))
                         + (() if ack is None else (int(ack),)))
    return int(answer.error_code), tuple(sorted(parts))


def acquired(answer: Any) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]


class Session:
    """A member's share session: its next epoch."""

    def __init__(self, conn: Connection, member_id: str, topic_id: uuid.UUID) -> None:
        self.conn, self.member_id, self.topic_id = conn, member_id, topic_id
        self.epoch = 0

    def fetch(self, acks: Acks = ()) -> Any:
        answer = fetch(self.conn, self.member_id, self.epoch, self.topic_id, acks)
        if answer.error_code == 0:
            self.epoch += 1
        return answer

    def acknowledge(self, acks: Acks) -> Any:
        answer = acknowledge(self.conn, self.member_id, self.epoch, self.topic_id, acks)
        if answer.error_code == 0:
            self.epoch += 1
        return answer


def heartbeat_steps(conn: Connection, out: dict[str, Codes]) -> tuple[str, str]:
    """The ShareGroupHeartbeat steps; returns two joined members."""
    def hb(step: str, *args: Any, **kwargs: Any) -> Any:
        answer = heartbeat(conn, *args, **kwargs)
        out[step] = (int(answer.error_code),)
        return answer

    out["sgd-empty-group-id"] = describe(conn, "")
    hb("hb-empty-member-id", "", 0)
    hb("hb-empty-group-id", str(uuid.uuid4()), 0, group="")
    hb("hb-join-without-topics", str(uuid.uuid4()), 0, topics=None)
    hb("hb-unknown-member-epoch-5", str(uuid.uuid4()), 5)
    hb("hb-unknown-member-leaves", str(uuid.uuid4()), -1)
    hb("hb-join-classic-group", str(uuid.uuid4()), 0, group=CLASSIC_GROUP)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    first = hb("hb-join-a", a, 0)
    hb("hb-unknown-member-epoch-5-in-the-group", str(uuid.uuid4()), 5)
    hb("hb-join-b", b, 0)
    now = hb("hb-a-after-b-joined", a, first.member_epoch)
    hb("hb-a-epoch-ahead", a, now.member_epoch + 5)
    if now.member_epoch > 1:
        hb("hb-a-stale-epoch", a, now.member_epoch - 1)
    else:
        out["hb-a-stale-epoch"] = ("no epoch below", now.member_epoch)
    return a, b


def fetch_steps(conn: Connection, topic_id: uuid.UUID, a: str, b: str,
                out: dict[str, Codes]) -> None:
    def step(name: str, answer: Any) -> Any:
        out[name] = share_codes(answer, topic_id)
        return answer

    sa, sb = Session(conn, a, topic_id), Session(conn, b, topic_id)
    step("sf-epoch-5-no-session", fetch(conn, a, 5, topic_id))
    step("sf-close-no-session", fetch(conn, a, -1, topic_id))
    step("sf-empty-member-id", fetch(conn, "", 0, topic_id))
    step("sa-epoch-1-no-session", acknowledge(conn, a, 1, topic_id, ((0, 0),)))
    answer = step("sf-open-a", sa.fetch())
    deadline = time.monotonic() + ACQUIRE_TIMEOUT_S
    while not (got := acquired(answer)) and time.monotonic() < deadline:
        answer = sa.fetch()
    step("sf-a-acquires", answer)
    out["sf-a-acquired"] = tuple(got)
    step("sf-a-nothing-more", sa.fetch())  # the session's epoch is now 2 or more
    step("sf-a-wrong-next-epoch", fetch(conn, a, sa.epoch + 3, topic_id))
    step("sf-a-replayed-epoch", fetch(conn, a, sa.epoch - 1, topic_id))
    step("sa-a-wrong-next-epoch", acknowledge(conn, a, sa.epoch + 3, topic_id, ((0, 0),)))
    step("sf-b-acks-on-epoch-0", fetch(conn, b, 0, topic_id, acks=((0, 0),)))
    step("sa-b-epoch-0", acknowledge(conn, b, 0, topic_id, ((0, 0),)))
    step("sf-open-b", sb.fetch())
    step("sa-b-acks-records-of-a", sb.acknowledge(((0, 0),)))
    step("sf-b-acks-records-of-a", sb.fetch(acks=((1, 1),)))
    step("sa-b-acks-past-the-end", sb.acknowledge(((1000, 1000),)))
    step("sa-a-acks-its-own", sa.acknowledge(((0, 0),)))
    step("sa-a-acks-it-again", sa.acknowledge(((0, 0),)))
    step("sf-a-acks-with-a-fetch", sa.fetch(acks=((1, 1),)))
    step("sf-a-continues-after-errors", sa.fetch())
    unknown = uuid.uuid4()
    step("sf-unknown-topic-id", fetch(conn, str(uuid.uuid4()), 0, unknown))
    c = Session(conn, str(uuid.uuid4()), topic_id)
    step("sf-open-c", c.fetch())
    step("sa-unknown-topic-id", acknowledge(conn, c.member_id, c.epoch, unknown, ((0, 0),)))
    step("sf-unknown-partition", fetch(conn, str(uuid.uuid4()), 0, topic_id, partitions=(7,)))
    step("sf-close-a", fetch(conn, a, -1, topic_id))
    step("sf-a-after-close", fetch(conn, a, sa.epoch + 1, topic_id))


def run_script(bootstrap: str) -> dict[str, Codes]:
    out: dict[str, Codes] = {}
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 15.0)
    try:
        topic_id = create_topic(conn)
        produce(bootstrap)
        set_earliest(conn)
        await_coordinators(conn)
        commit_classic_offset(conn)
        a, b = heartbeat_steps(conn, out)
        fetch_steps(conn, topic_id, a, b, out)
        out["sgd-unknown-group"] = describe(conn, "share-bad-input-nobody")
        out["sgd-classic-group"] = describe(conn, CLASSIC_GROUP)
        out["sgd-share-group"] = describe(conn, GROUP)
    finally:
        conn.close()
    return out


STEPS = (
    "sgd-empty-group-id", "hb-empty-member-id", "hb-empty-group-id", "hb-join-without-topics",
    "hb-unknown-member-epoch-5", "hb-unknown-member-leaves", "hb-join-classic-group",
    "hb-join-a", "hb-unknown-member-epoch-5-in-the-group", "hb-join-b", "hb-a-after-b-joined", "hb-a-epoch-ahead", "hb-a-stale-epoch",
    "sf-epoch-5-no-session", "sf-close-no-session", "sf-empty-member-id",
    "sa-epoch-1-no-session", "sf-open-a", "sf-a-acquires", "sf-a-acquired",
    "sf-a-nothing-more",
    "sf-a-wrong-next-epoch", "sf-a-replayed-epoch", "sa-a-wrong-next-epoch",
    "sf-b-acks-on-epoch-0", "sa-b-epoch-0", "sf-open-b", "sa-b-acks-records-of-a",
    "sf-b-acks-records-of-a", "sa-b-acks-past-the-end", "sa-a-acks-its-own",
    "sa-a-acks-it-again", "sf-a-acks-with-a-fetch", "sf-a-continues-after-errors",
    "sf-unknown-topic-id", "sf-open-c", "sa-unknown-topic-id", "sf-unknown-partition",
    "sf-close-a", "sf-a-after-close",
    "sgd-unknown-group", "sgd-classic-group", "sgd-share-group",
)


# -- fixtures and tests ------------------------------------------------------------------


@pytest.fixture(scope="module")
def kafka_answers(kafka_reference: KafkaReference) -> dict[str, Codes]:
    return run_script(kafka_reference.bootstrap)


@pytest.fixture(scope="module")
def kcompat_answers(sbroker: Deployment) -> dict[str, Codes]:
    return run_script(sbroker.bootstrap)


#: Where kcompat answers otherwise than Kafka 4.4 (reported; strict, so a fix
#: shows up as XPASS and the entry goes).
DIFFERENT: dict[str, str] = {
}


def _step_params() -> list[Any]:
    return [pytest.param(step, marks=pytest.mark.xfail(strict=True, reason=DIFFERENT[step]))
            if step in DIFFERENT else step for step in STEPS]


@pytest.mark.parametrize("sbroker", ["single"], indirect=True)
@pytest.mark.parametrize("step", _step_params())
def test_step_matches_kafka(kafka_answers: dict[str, Codes],
                            kcompat_answers: dict[str, Codes], step: str) -> None:
    assert kcompat_answers.get(step) == kafka_answers.get(step), step


def test_every_step_ran(kafka_answers: dict[str, Codes]) -> None:
    assert sorted(kafka_answers) == sorted(STEPS)

