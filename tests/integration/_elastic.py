"""What the elastic-cluster tests share (``test_cluster_broker_only``,
``test_cluster_reassign``): three voters and a broker-only node 4 with short
broker sessions, and the waits and reads they use."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaConnectionError

from compat_tests._broker import Broker, free_port
from compat_tests._cluster import Cluster

TIMEOUT_S = 30.0
FAST_SESSIONS = ("--set", "broker.session.timeout.ms=3000",
                 "--set", "broker.heartbeat.interval.ms=500")


def broker_only(cluster: Cluster, workdir: Path, node_id: int = 4,
                extra_args: tuple[str, ...] = FAST_SESSIONS) -> Broker:
    """A broker-only node (``process.roles=broker``) that joins ``cluster``."""
    port = free_port()
    return Broker(workdir, port=port, extra_args=(
        "--node-id", str(node_id), "--set", f"controller.quorum.voters={cluster.voters}",
        "--set", "process.roles=broker", "--admin-port", "-1", *cluster.link_args(port),
        *extra_args))


@contextmanager
def grown_cluster(root: Path, extra_args: tuple[str, ...] = FAST_SESSIONS
                  ) -> Iterator[tuple[Cluster, Broker]]:
    """Three voters started, then broker 4; every process killed at the end."""
    cluster = Cluster(root, extra_args=extra_args)
    fourth = broker_only(cluster, root / "broker-4", extra_args=(
        "--set", "default.replication.factor=3", *extra_args))
    try:
        cluster.start()
        fourth.start()
        yield cluster, fourth
    finally:
        if fourth.running:
            fourth.kill()
        cluster.kill()


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def wait(predicate: Callable[[], Any], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def quorum(bootstrap: str) -> dict[str, Any]:
    """The metadata partition of kafka-python's DescribeQuorum answer. The
    client sends it to Metadata's controller id, a random live broker: one
    killed a moment ago is listed until its session expires (as in Kafka)
    and refuses the connection — asked again then."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        client = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            answer: dict[str, Any] = client.describe_metadata_quorum()
            [part] = answer["topics"][0]["partitions"]
            return part  # type: ignore[no-any-return]
        except KafkaConnectionError:
            assert time.monotonic() < deadline, "DescribeQuorum: no live broker answered"
            time.sleep(0.2)
        finally:
            client.close()


def read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[bytes]:
    """Up to ``count`` record values from the start of ``topic``'s partitions."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                         "enable.auto.commit": False, "log_level": 0})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got
