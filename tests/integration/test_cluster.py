"""A 3-broker cluster of real processes (issue 6): kill -9 a partition leader
while an idempotent acks=all producer writes; every acknowledged record must be
readable exactly once afterwards, and the client must fail over unchanged."""

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

    victim = cluster.leaders(topic)[0]
    cluster.brokers[victim].kill()
    killed_at = time.monotonic()
    leaders = cluster.wait_for_leaders(topic, PARTITIONS, exclude=victim)
    failover_s = time.monotonic() - killed_at
    print(f"leader failover after kill -9 of broker {victim}: {failover_s:.2f} s -> {leaders}")

    _produce(producer, topic, [f"b-{i}".encode() for i in range(600)], acked, failed)
    assert len(acked) == 1200, f"{len(failed)} failed: {failed[:3]}"

    cluster.brokers[victim].start()
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
        assert p["leader_epoch"] >= 1
    admin.close()
