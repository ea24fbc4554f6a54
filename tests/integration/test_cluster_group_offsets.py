"""Group offsets of partitions the group coordinator does not host (3 real brokers).

A topic of replication factor 1 has each partition on one broker only, so the
coordinator of a group consuming all of it is no replica of most partitions.
Kafka's OffsetCommit, TxnOffsetCommit, OffsetFetch and OffsetDelete check the
topic and partition against the metadata image, not against local replicas:
real clients in a consumer group commit (plainly and inside a transaction),
fetch and delete offsets of every partition, wherever its only replica lives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, diagnostics
from compat_tests._group_member import kafka_python_learn_topics
from compat_tests._groups import produce_sync

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 6  # replication factor 1: two partitions on each of the three brokers
PER_PARTITION = 10
CLIENTS = ("kafka-python", "confluent")
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("offsets-cluster"), extra_args=(
        "--set", "offsets.topic.num.partitions=3",
        "--set", "transaction.state.log.num.partitions=3",
        "--set", "group.initial.rebalance.delay.ms=0"))
    try:
        yield c.start()
    finally:
        c.close()


def _spread_topic(cluster: Cluster, prefix: str, records: bool = True) -> str:
    """A topic of replication factor 1 with PARTITIONS partitions on all brokers,
    PER_PARTITION records in each (unless ``records`` is false)."""
    topic = unique_topic(prefix)
    cluster.create_topic(topic, PARTITIONS, 1)
    leaders = cluster.leaders(topic)
    assert set(leaders.values()) == set(cluster.brokers), leaders
    if records:
        produce_sync(cluster.bootstrap, topic, {
            p: [f"{p}-{i}".encode() for i in range(PER_PARTITION)] for p in range(PARTITIONS)})
    return topic


def _coordinator(cluster: Cluster, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    return int(admin.describe_consumer_groups([group])[group].result(TIMEOUT_S).coordinator.id)


def _remote_partitions(cluster: Cluster, topic: str, group: str) -> set[int]:
    """The partitions of ``topic`` whose only replica is not the group coordinator."""
    coordinator = _coordinator(cluster, group)
    remote = {p for p, leader in cluster.leaders(topic).items() if leader != coordinator}
    assert remote, f"every partition of {topic} is on the coordinator {coordinator}"
    return remote


class Member:
    """A subscribed consumer group member of either client: poll, position, commit."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str) -> None:
        self.client, self.topic = client, topic
        self.values: list[bytes] = []
        self.positions: dict[int, int] = {}
        if client == "kafka-python":
            from kafka import KafkaConsumer

            self.kc = KafkaConsumer(
                topic, bootstrap_servers=bootstrap, group_id=group,
                enable_auto_commit=False, auto_offset_reset="earliest",
                isolation_level="read_committed", session_timeout_ms=10000)
            # its topic's partitions before its first JoinGroup: kafka-python 3.0.12
            # can orphan a rebalance it started from metadata lacking the topic
            # (compat_tests/kafka_python/FINDINGS.md; here once "consumed only 0")
            kafka_python_learn_topics(self.kc, [topic])
        else:
            self.cc = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                "isolation.level": "read_committed", "log_level": 0})
            self.cc.subscribe([topic])

    def consume(self, count: int) -> list[tuple[int, bytes]]:
        """Poll until ``count`` records arrived: [(partition, value)]."""
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S * 2
        while len(got) < count:
            assert time.monotonic() < deadline, f"consumed only {len(got)} of {count}"
            for partition, offset, value in self._poll():
                got.append((partition, value))
                self.positions[partition] = offset + 1
        return got

    def _poll(self) -> list[tuple[int, int, bytes]]:
        if self.client == "kafka-python":
            batches = self.kc.poll(timeout_ms=500)
            return [(r.partition, r.offset, r.value) for rs in batches.values() for r in rs]
        msg = self.cc.poll(0.5)
        if msg is None or msg.error() is not None:
            return []
        return [(msg.partition(), msg.offset(), msg.value())]

    def commit(self) -> None:
        """Commit the positions (OffsetCommit); every partition must succeed."""
        if self.client == "kafka-python":
            from kafka import TopicPartition as KTopicPartition
            from kafka.structs import OffsetAndMetadata

            self.kc.commit({KTopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                            for p, o in self.positions.items()}, timeout_ms=20000)
            return
        done = self.cc.commit(offsets=[TopicPartition(self.topic, p, o)
                                       for p, o in self.positions.items()], asynchronous=False)
        assert done is not None
        errors = {tp.partition: str(tp.error) for tp in done if tp.error is not None}
        assert not errors, f"OffsetCommit refused: {errors}"

    def group_metadata(self) -> Any:
        return self.kc.group_metadata() if self.client == "kafka-python" \
            else self.cc.consumer_group_metadata()

    def close(self) -> None:
        (self.kc if self.client == "kafka-python" else self.cc).close()


def _fetch_offsets(cluster: Cluster, group: str, topic: str) -> tuple[dict[int, int],
                                                                      dict[int, int]]:
    """OffsetFetch through kafka-python's and librdkafka's admin clients:
    {partition: committed offset} of ``topic`` (partitions without one left out)."""
    from kafka import KafkaAdminClient

    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        kp = kadmin.list_group_offsets({group: None})[group]
    finally:
        kadmin.close()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p)
                                                   for p in range(PARTITIONS)])
    got = admin.list_consumer_group_offsets([request])[group].result(TIMEOUT_S)
    assert all(tp.error is None for tp in got.topic_partitions), got.topic_partitions
    return ({tp.partition: om.offset for tp, om in kp.items() if tp.topic == topic},
            {tp.partition: tp.offset for tp in got.topic_partitions if tp.offset >= 0})


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_fetch_delete_offsets_of_partitions_on_other_brokers(
        cluster: Cluster, client: str) -> None:
    """A group member consumes and commits every partition; the offsets read back
    from the coordinator are the end offsets; OffsetDelete (kafka-python admin)
    removes them once the group is empty."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import NoError

    with diagnostics(cluster):
        topic = _spread_topic(cluster, "offsets")
        group = unique_topic("offsets-group")
        member = Member(client, cluster.bootstrap, group, topic)
        try:
            member.consume(PARTITIONS * PER_PARTITION)
            remote = _remote_partitions(cluster, topic, group)
            member.commit()
        finally:
            member.close()
        ends = dict.fromkeys(range(PARTITIONS), PER_PARTITION)
        assert member.positions == ends
        assert _fetch_offsets(cluster, group, topic) == (ends, ends), f"remote: {remote}"

        kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            deleted = kadmin.delete_group_offsets(
                group, [KTopicPartition(topic, p) for p in range(PARTITIONS)])
        finally:
            kadmin.close()
        assert deleted == {KTopicPartition(topic, p): NoError for p in range(PARTITIONS)}, \
            f"remote: {remote}"
        assert _fetch_offsets(cluster, group, topic) == ({}, {})


def _transactional_producer(client: str, bootstrap: str, tid: str) -> Any:
    if client == "kafka-python":
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        producer.init_transactions()
        return producer
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "log_level": 0})
    producer.init_transactions(TIMEOUT_S)
    return producer


def _bounded(fn: Callable[[], None], timeout_s: float, what: str) -> None:
    """Run ``fn`` and fail once it has taken ``timeout_s``: kafka-python's
    send_offsets_to_transaction and commit_transaction wait without a bound,
    retrying a retriable error (such as UNKNOWN_TOPIC_OR_PARTITION) for ever."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout_s)
    assert not worker.is_alive(), f"{what}: still waiting after {timeout_s:.0f} s"
    if errors:
        raise errors[0]


def _copy_in_transaction(client: str, producer: Any, member: Member, out: str,
                         records: list[tuple[int, bytes]]) -> None:
    """Produce ``records`` to ``out`` and commit them with the member's positions
    (AddOffsetsToTxn, TxnOffsetCommit) in one transaction."""
    producer.begin_transaction()
    if client == "kafka-python":
        from kafka import TopicPartition as KTopicPartition
        from kafka.structs import OffsetAndMetadata

        for partition, value in records:
            producer.send(out, value=value, partition=partition)
        producer.send_offsets_to_transaction(
            {KTopicPartition(member.topic, p): OffsetAndMetadata(o, "", -1)
             for p, o in member.positions.items()}, member.group_metadata())
        producer.commit_transaction()
        return
    for partition, value in records:
        producer.produce(out, value=value, partition=partition)
    producer.send_offsets_to_transaction(
        [TopicPartition(member.topic, p, o) for p, o in member.positions.items()],
        member.group_metadata(), TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)


@pytest.mark.parametrize("client", CLIENTS)
def test_transactional_offsets_of_partitions_on_other_brokers(
        cluster: Cluster, client: str) -> None:
    """Consume-transform-produce between two replication-factor-1 topics: the
    consumed offsets go with the output records (send_offsets_to_transaction),
    and after the commit the group's offsets are the input's end offsets and a
    read_committed consumer sees every output record."""
    with diagnostics(cluster):
        source = _spread_topic(cluster, "txn-in")
        out = _spread_topic(cluster, "txn-out", records=False)
        group = unique_topic("txn-group")
        producer = _transactional_producer(client, cluster.bootstrap, unique_topic("tid"))
        member = Member(client, cluster.bootstrap, group, source)
        try:
            records = member.consume(PARTITIONS * PER_PARTITION)
            remote = _remote_partitions(cluster, source, group)
            _bounded(lambda: _copy_in_transaction(client, producer, member, out, records),
                     TIMEOUT_S * 2, f"transaction with offsets of remote partitions {remote}")
        finally:
            member.close()
            producer.close(timeout=5) if client == "kafka-python" else producer.flush(5)
        ends = dict.fromkeys(range(PARTITIONS), PER_PARTITION)
        assert _fetch_offsets(cluster, group, source) == (ends, ends), f"remote: {remote}"

        reader = Member("confluent", cluster.bootstrap, unique_topic("verify"), out)
        try:
            copied = reader.consume(len(records))
        finally:
            reader.close()
        assert sorted(copied) == sorted(records)


def _raw_ids(cluster: Cluster, conn: Any) -> tuple[str, str, int, int]:
    """A transactional id and a group whose coordinators are different brokers:
    (tid, group, transaction coordinator, group coordinator)."""
    from kafka.protocol.metadata.find_coordinator import (
        FindCoordinatorRequest,
        FindCoordinatorResponse,
    )

    def coordinator(key: str, key_type: int) -> int:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            r = conn.request(FindCoordinatorRequest[3](key=key, key_type=key_type),
                             FindCoordinatorResponse[3])
            if r.error_code == 0:
                return int(r.node_id)
            assert time.monotonic() < deadline, f"FindCoordinator({key}): {r}"
            time.sleep(0.2)

    for _ in range(30):
        tid, group = unique_topic("zombie-tid"), unique_topic("zombie-group")
        tc, gc = coordinator(tid, 1), coordinator(group, 0)
        if tc != gc:
            return tid, group, tc, gc
    raise AssertionError("no transactional id and group with different coordinators")


def test_fenced_producer_txn_offsets_refused_where_the_transaction_is_coordinated_elsewhere(
        cluster: Cluster) -> None:
    """Raw requests (kafka-python's codec): a producer adds a group's offsets to its
    transaction, a newer producer with the same transactional id fences it (its
    transaction is aborted, the abort marker lands on the group's offsets
    partition), then the fenced producer's TxnOffsetCommit reaches the group
    coordinator, another broker than the transaction coordinator. Kafka refuses the
    stale epoch (PRODUCER_FENCED); accepted, the offsets would stay pending for
    ever and OffsetFetch(require_stable) answer UNSTABLE_OFFSET_COMMIT for ever,
    hanging every later consumer of the group."""
    from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse
    from kafka.protocol.producer.transaction import (
        AddOffsetsToTxnRequest,
        AddOffsetsToTxnResponse,
        InitProducerIdRequest,
        InitProducerIdResponse,
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
    )

    from tests.integration._raw import RawConnection

    with diagnostics(cluster):
        topic = _spread_topic(cluster, "zombie", records=False)
        conns = {n: RawConnection(b.bootstrap, timeout=TIMEOUT_S)
                 for n, b in cluster.brokers.items()}
        try:
            tid, group, tc, gc = _raw_ids(cluster, conns[1])

            def init() -> tuple[int, int, int]:
                r = conns[tc].request(InitProducerIdRequest[3](
                    transactional_id=tid, transaction_timeout_ms=60_000, producer_id=-1,
                    producer_epoch=-1), InitProducerIdResponse[3])
                return int(r.error_code), int(r.producer_id), int(r.producer_epoch)

            deadline = time.monotonic() + TIMEOUT_S
            while (first := init())[0] in (14, 15, 16):  # the coordinator is still loading
                assert time.monotonic() < deadline, first
                time.sleep(0.2)
            code, pid, epoch = first
            assert code == 0, code
            r = conns[tc].request(AddOffsetsToTxnRequest[3](
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group),
                AddOffsetsToTxnResponse[3])
            assert r.error_code == 0, r
            assert init()[0] == 51  # CONCURRENT_TRANSACTIONS: the zombie's txn is aborted
            assert init() == (0, pid, epoch + 2)
            t = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
            r = conns[gc].request(TxnOffsetCommitRequest[3](
                transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                generation_id=-1, member_id="", group_instance_id=None, topics=[t(
                    name=topic, partitions=[t.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                        committed_metadata="")])]), TxnOffsetCommitResponse[3])
            codes = [p.error_code for rt in r.topics for p in rt.partitions]
            assert codes == [90], f"zombie TxnOffsetCommit (coordinators {tc}/{gc}): {codes}"
            f = conns[gc].request(OffsetFetchRequest[7](
                group_id=group, require_stable=True, topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopic(name=topic,
                                                               partition_indexes=[0])]),
                OffsetFetchResponse[7])
            got = [(p.committed_offset, p.error_code) for rt in f.topics for p in rt.partitions]
            assert (f.error_code, got) == (0, [(-1, 0)]), f"OffsetFetch: {f.error_code} {got}"
        finally:
            for conn in conns.values():
                conn.close()
