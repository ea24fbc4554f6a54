"""A 3-broker cluster of real processes (issue 6): kill -9 a partition leader
while an idempotent acks=all producer writes; every acknowledged record must be
readable exactly once afterwards, and the client must fail over unchanged.
Also: a consumer group and a transactional producer across a kill -9 of their
coordinator, CreatePartitions/AlterConfigs through the controller, and
leadership returning to the preferred replicas after a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, consume_all

PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c.start()
    finally:
        c.close()


def _produce(producer: Producer, topic: str, values: list[bytes], acked: set[bytes],
             failed: list[str]) -> None:
    def report(err, msg):  # type: ignore[no-untyped-def]
        if err is None:
            acked.add(msg.value())
        else:
            failed.append(str(err))
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0, "records still in flight after 60 s"


def test_kill_leader_loses_no_acknowledged_record(cluster: Cluster) -> None:
    topic = unique_topic("cluster")
    cluster.create_topic(topic, PARTITIONS, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "log_level": 0})
    acked: set[bytes] = set()
    failed: list[str] = []
    _produce(producer, topic, [f"a-{i}".encode() for i in range(600)], acked, failed)
    assert len(acked) == 600 and not failed
    # As in Kafka, a new partition's records start at offset 0 with no gap (its
    # first leader has nothing of an earlier term to commit: no leader-change batch).
    # A partition that changed leader meanwhile (an election on a loaded machine:
    # its epoch, read after the marks, is past 0) has one such batch per later term
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaAdminClient
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe",
                      "log_level": 0})
    marks = [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
             for p in range(PARTITIONS)]
    probe.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    epochs = {p.get("partition", p.get("partition_index")): p["leader_epoch"]
              for p in admin.describe_topics([topic])[0]["partitions"]}
    admin.close()
    for p, (low, high) in enumerate(marks):
        assert low == 0 and (high == 200 if epochs[p] == 0 else 200 <= high <= 200 + epochs[p]), \
            f"partition {p}: watermarks {(low, high)} in leader epoch {epochs[p]} ({marks})"

    victim = cluster.leaders(topic)[0]
    cluster.brokers[victim].kill()
    killed_at = time.monotonic()
    leaders = cluster.wait_for_leaders(topic, PARTITIONS, exclude=victim)
    failover_s = time.monotonic() - killed_at
    print(f"leader failover after kill -9 of broker {victim}: {failover_s:.2f} s -> {leaders}")

    _produce(producer, topic, [f"b-{i}".encode() for i in range(600)], acked, failed)
    assert len(acked) == 1200, f"{len(failed)} failed: {failed[:3]}"

    cluster.brokers[victim].start().wait_serving()  # then a reader may bootstrap from it
    got = consume_all(cluster.live_bootstrap(), topic, PARTITIONS)
    values = [v for vs in got.values() for v in vs]
    assert len(values) == len(set(values)), "a record was stored twice"
    assert acked <= set(values), f"lost {len(acked - set(values))} acknowledged records"


def test_metadata_and_not_controller(cluster: Cluster) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    controller = cluster.wait_for_controller()
    other = next(n for n in cluster.brokers if n != controller)
    # kafka-python sends CreateTopics to the controller named in Metadata.
    admin = KafkaAdminClient(bootstrap_servers=cluster.brokers[other].bootstrap)
    topic = unique_topic("meta")
    admin.create_topics([NewTopic(topic, 4, 2)])
    cluster.wait_for_leaders(topic, 4)
    md = admin.describe_topics([topic])[0]
    assert md["error_code"] == 0
    for p in md["partitions"]:
        replicas = p.get("replicas", p.get("replica_nodes"))
        assert len(replicas) == 2 and p.get("leader", p.get("leader_id")) in replicas, p
        assert p["leader_epoch"] >= 0  # Kafka: a new partition's first leader has epoch 0
    _manual_assignments(cluster, admin)
    admin.close()


def _manual_assignments(cluster: Cluster, admin) -> None:  # type: ignore[no-untyped-def]
    """CreateTopics and CreatePartitions honour manual replica lists of
    registered brokers, as Kafka does; an unknown broker is refused."""
    from kafka.admin import NewPartitions, NewTopic
    from kafka.errors import InvalidReplicationAssignmentError

    def replicas(topic: str) -> dict[int, list[int]]:
        md = admin.describe_topics([topic])[0]
        return {p.get("partition", p.get("partition_index")):
                list(p.get("replicas", p.get("replica_nodes"))) for p in md["partitions"]}

    topic = unique_topic("manual")
    admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [2, 3], 1: [3, 1]})])
    cluster.wait_for_leaders(topic, 2)
    assert replicas(topic) == {0: [2, 3], 1: [3, 1]}
    admin.create_partitions({topic: NewPartitions(3, [[1, 2]])})
    cluster.wait_for_leaders(topic, 3)
    assert replicas(topic) == {0: [2, 3], 1: [3, 1], 2: [1, 2]}
    with pytest.raises(InvalidReplicationAssignmentError):
        admin.create_topics([NewTopic(unique_topic("bad"), -1, -1,
                                      replica_assignments={0: [1, 9]})])


def _committed(consumer, topic: str) -> dict[int, int]:  # type: ignore[no-untyped-def]
    from confluent_kafka import TopicPartition

    got = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
    return {tp.partition: tp.offset for tp in got}


def test_consumer_group_survives_coordinator_kill(tmp_path: Path) -> None:
    """The group coordinator is the leader of the group's __consumer_offsets
    partition (RF 3); after kill -9 of its broker the group carries on at the
    new leader from the committed offsets."""
    from confluent_kafka import Consumer, TopicPartition

    from kcompat.broker.controller.internal_topics import partition_for

    offsets_partitions = 5
    c = Cluster(tmp_path, extra_args=(
        "--set", f"offsets.topic.num.partitions={offsets_partitions}",
        "--set", "group.initial.rebalance.delay.ms=0"))
    try:
        c.start()
        topic = unique_topic("grp")
        c.create_topic(topic, PARTITIONS, 3)
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "log_level": 0})
        acked: set[bytes] = set()
        failed: list[str] = []
        _produce(producer, topic, [f"g-{i}".encode() for i in range(300)], acked, failed)
        assert len(acked) == 300 and not failed
        group = unique_topic("group")
        leaders = c.wait_for_leaders("__consumer_offsets", offsets_partitions)
        coordinator = leaders[partition_for(group, offsets_partitions)]

        def consumer() -> Consumer:
            return Consumer({"bootstrap.servers": c.live_bootstrap(), "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 6000, "log_level": 0})

        c1 = consumer()
        c1.subscribe([topic])
        seen: list[bytes] = []
        positions: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while len(seen) < 150:
            assert time.monotonic() < deadline, f"consumed only {len(seen)}"
            msg = c1.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
                positions[msg.partition()] = msg.offset() + 1
        c1.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()],
                  asynchronous=False)
        before = _committed(c1, topic)
        assert {p: o for p, o in before.items() if o >= 0} == positions

        c.brokers[coordinator].kill()
        killed_at = time.monotonic()
        probe = consumer()  # OffsetFetch only: the new coordinator rebuilt the offsets
        assert {p: o for p, o in _committed(probe, topic).items() if o >= 0} == positions
        probe.close()
        print(f"offsets readable at the new coordinator after {time.monotonic() - killed_at:.2f} s")
        # The same member continues: it re-discovers the coordinator and commits there.
        deadline = time.monotonic() + 90
        while len(seen) < 300:
            assert time.monotonic() < deadline, f"consumed only {len(seen)} after the kill"
            msg = c1.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
                positions[msg.partition()] = msg.offset() + 1
        while True:
            try:
                c1.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()],
                          asynchronous=False)
                break
            except Exception:  # noqa: BLE001 - coordinator moving; retry until the deadline
                assert time.monotonic() < deadline, "no commit after the coordinator kill"
                time.sleep(0.5)
        failover_s = time.monotonic() - killed_at
        print(f"group coordinator {coordinator} killed: consumed and committed after "
              f"{failover_s:.2f} s")
        assert set(seen) == acked, "records lost or invented"
        c1.close()

        # A new member of the group starts from the committed offsets: nothing left.
        c2 = consumer()
        assert _committed(c2, topic) == positions
        c2.subscribe([topic])
        extra = [m for m in (c2.poll(1.0) for _ in range(5)) if m is not None and not m.error()]
        assert not extra, f"re-delivered {len(extra)} committed records"
        c2.close()
    finally:
        c.close()


def test_transactions_across_coordinator_kill(tmp_path: Path) -> None:
    """The transaction coordinator is the leader of the id's __transaction_state
    partition (RF 3), markers go through each data partition's Raft group: a
    transaction open when the coordinator's broker is killed -9 commits at the
    new coordinator, an aborted one stays invisible to read_committed."""
    from confluent_kafka import Consumer

    from kcompat.broker.controller.internal_topics import partition_for

    txn_partitions = 5
    c = Cluster(tmp_path, extra_args=(
        "--set", f"transaction.state.log.num.partitions={txn_partitions}",
        "--set", "offsets.topic.num.partitions=3"))
    try:
        c.start()
        topic = unique_topic("txn")
        c.create_topic(topic, PARTITIONS, 3)
        tid = unique_topic("tid")
        leaders = c.wait_for_leaders("__transaction_state", txn_partitions)
        coordinator = leaders[partition_for(tid, txn_partitions)]
        producer = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid,
                             "transaction.timeout.ms": 60000, "log_level": 0})
        producer.init_transactions(30)

        def txn(prefix: str, n: int = 30) -> None:
            for i in range(n):
                producer.produce(topic, f"{prefix}-{i}".encode(), partition=i % PARTITIONS)
            producer.flush(30)

        producer.begin_transaction()
        txn("a")
        producer.commit_transaction(30)
        producer.begin_transaction()
        txn("b")
        producer.abort_transaction(30)
        producer.begin_transaction()
        txn("c")
        c.brokers[coordinator].kill()
        killed_at = time.monotonic()
        producer.commit_transaction(60)
        print(f"transaction coordinator {coordinator} killed: commit took "
              f"{time.monotonic() - killed_at:.2f} s")
        producer.begin_transaction()
        txn("d")
        producer.commit_transaction(60)

        consumer = Consumer({"bootstrap.servers": c.live_bootstrap(), "group.id": "v",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "log_level": 0})
        consumer.subscribe([topic])
        got: list[str] = []
        deadline = time.monotonic() + 60
        while len(got) < 90 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
        extra = [m for m in (consumer.poll(0.5) for _ in range(4))
                 if m is not None and m.error() is None]
        consumer.close()
        assert not extra and sorted(got) == sorted(
            f"{p}-{i}" for p in "acd" for i in range(30)), (len(got), got[:5])
    finally:
        c.close()


def test_create_partitions_and_configs_through_controller(cluster: Cluster) -> None:
    """CreatePartitions and (Incremental)AlterConfigs commit a record in the
    metadata log (forwarded to the controller by any other broker) and every
    broker applies it."""
    from confluent_kafka.admin import NewPartitions
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = unique_topic("alter")
    cluster.create_topic(topic, 2, 3)
    admin = cluster._admin()
    admin.create_partitions([NewPartitions(topic, 4)],
                            operation_timeout=20)[topic].result(timeout=30)
    cluster.wait_for_leaders(topic, 4)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 0})
    acked: set[bytes] = set()
    failed: list[str] = []
    for p in range(4):
        producer.produce(topic, f"p{p}".encode(), partition=p,
                         on_delivery=lambda err, msg: (acked.add(msg.value()) if err is None
                                                       else failed.append(str(err))))
    assert producer.flush(30) == 0 and len(acked) == 4 and not failed

    controller = cluster.wait_for_controller()
    other = next(n for n in cluster.brokers if n != controller)
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.brokers[other].bootstrap)
    kadmin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                         configs={"retention.ms": "123456"})])
    kadmin.close()
    for node, broker in cluster.brokers.items():
        one = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        deadline = time.monotonic() + 10
        while True:
            res = one.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                       config_filter="modified")
            entries = res.get("topic", {}).get(topic, {})
            value = entries.get("retention.ms")
            value = value.get("value", value) if isinstance(value, dict) else value
            if str(value) == "123456" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        one.close()
        assert str(value) == "123456", (node, entries)


def test_leaders_move_back_to_preferred_replicas(tmp_path: Path) -> None:
    """After a killed broker restarts, leadership returns to the preferred
    (first) replicas through Raft leadership transfer: leaders spread again."""
    c = Cluster(tmp_path, extra_args=("--set", "leader.imbalance.check.interval.seconds=1"))
    try:
        c.start()
        topic = unique_topic("balance")
        c.create_topic(topic, 6, 3)
        victim = c.leaders(topic)[0]
        c.brokers[victim].kill()
        during = c.wait_for_leaders(topic, 6, exclude=victim)
        assert victim not in during.values()
        c.brokers[victim].start()
        restarted_at = time.monotonic()
        deadline = time.monotonic() + 60
        while True:
            leaders = c.leaders(topic)
            counts = {n: list(leaders.values()).count(n) for n in c.brokers}
            if len(leaders) == 6 and all(v == 2 for v in counts.values()):
                break
            assert time.monotonic() < deadline, f"leaders not spread: {leaders}"
            time.sleep(0.2)
        print(f"leaders balanced {time.monotonic() - restarted_at:.2f} s after the restart: "
              f"{leaders}")
    finally:
        c.close()


def test_delete_records_on_the_leader_reaches_the_followers(cluster: Cluster) -> None:
    """DeleteRecords is served by the partition leader; followers adopt its log
    start, so a new leader after kill -9 does not bring deleted records back."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = unique_topic("delrec")
    cluster.create_topic(topic, 1, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 0})
    for i in range(100):
        producer.produce(topic, f"d-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    tp = TopicPartition(topic, 0, 40)
    result = admin.delete_records([tp])[tp].result(timeout=30)
    assert result.low_watermark == 40
    time.sleep(1.5)  # a few leadership announcements carry the new log start
    victim = cluster.leaders(topic)[0]
    cluster.brokers[victim].kill()
    cluster.wait_for_leaders(topic, 1, exclude=victim)
    consumer = Consumer({"bootstrap.servers": cluster.live_bootstrap(), "group.id": "delrec",
                         "auto.offset.reset": "earliest", "log_level": 0})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (40, 100)
        consumer.assign([TopicPartition(topic, 0, 0)])  # below the log start: reset to earliest
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < 60 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))
        assert [o for o, _v in got] == list(range(40, 100))
        assert got[0][1] == b"d-40"
    finally:
        consumer.close()
