"""Dynamic broker configs with real clients and real broker processes.

An IncrementalAlterConfigs of BROKER "" written with kafka-python's protocol
classes (its admin client and librdkafka's refuse an empty broker name; Java's
kafka-configs is in the differential test) lowers ``message.max.bytes`` as a
cluster-wide default; confluent-kafka's AdminClient sets per-broker values and
describes. A kafka-python producer's next
batch over the limit is refused with MESSAGE_TOO_LARGE at once, without a
restart; topics describe ``max.message.bytes`` with source
DYNAMIC_DEFAULT_BROKER_CONFIG; the value survives a broker restart (it is in
the metadata log; the broker here snapshots its metadata after every record,
so the restart rebuilds it from a checkpoint). On a 3-broker cluster (rf 3, leaders spread) a change sent
to a broker that is not the controller reaches every broker: each describes
itself with the new value and refuses the batch on the partitions it leads; a
per-broker value on one broker lifts the limit on its partitions only. A
topic created before cluster defaults of log.roll.ms and log.retention.ms
change rolls and deletes its segments by them at once (every expired one, the
active segment too, as Kafka does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import MessageSizeTooLargeError

from compat_tests._broker import Broker, running, unique_topic
from compat_tests._deployment import RF3_ONLY, Deployment
from compat_tests.java._differential import BROKER, incremental_alter

TIMEOUT_S = 20
BIG, SMALL = b"x" * 5000, b"y" * 500


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def _alter(bootstrap: str, name: str, key: str, value: str | None) -> None:
    if name == "":  # the cluster-wide default
        ops = [(key, 0 if value is not None else 1, value)]  # SET, DELETE
        answer = incremental_alter(bootstrap.split(",")[0], "", ops, False, BROKER)
        assert answer == (0, None)
        return
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op)])
    admin = _admin(bootstrap)  # alive until the future resolves
    for future in admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def _describe(bootstrap: str, kind: Any, name: str, key: str) -> ConfigEntry:
    admin = _admin(bootstrap)  # alive until the future resolves
    (future,) = admin.describe_configs([ConfigResource(kind, name)],
                                       request_timeout=TIMEOUT_S).values()
    entry: ConfigEntry = future.result(timeout=TIMEOUT_S)[key]
    return entry


def _until(check: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _accepted(producer: KafkaProducer, topic: str, value: bytes, partition: int = 0) -> bool:
    try:
        producer.send(topic, value, partition=partition).get(timeout=TIMEOUT_S)
    except MessageSizeTooLargeError:
        return False
    return True


def _producer(bootstrap: str) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, retries=0, linger_ms=0)


@pytest.fixture
def snapshotting_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker that snapshots its metadata after every record, so a restart
    rebuilds the dynamic configs from a checkpoint, not by replaying records."""
    yield from running(Broker(tmp_path, extra_args=(
        "--set", "metadata.log.max.record.bytes.between.snapshots=1",
        "--set", "log.retention.check.interval.ms=200",
        "--set", "log.initial.task.delay.ms=0")))


def test_cluster_default_takes_effect_at_once_and_survives_restart(
        snapshotting_broker: Broker) -> None:
    broker = snapshotting_broker
    topic = unique_topic("dyn-max-bytes")
    producer = _producer(broker.bootstrap)
    try:
        assert _accepted(producer, topic, BIG)  # auto-created with the broker defaults
        _alter(broker.bootstrap, "", "message.max.bytes", "2000")
        assert not _accepted(producer, topic, BIG)  # the same producer, no restart
        assert _accepted(producer, topic, SMALL)
    finally:
        producer.close()
    entry = _describe(broker.bootstrap, ConfigResource.Type.TOPIC, topic, "max.message.bytes")
    assert (entry.value, entry.source) == (
        "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    broker.restart()
    metadata_dir = broker.data_dir / "__cluster_metadata-0"
    assert list(metadata_dir.glob("*.checkpoint")), "no metadata snapshot was taken"
    entry = _describe(broker.bootstrap, ConfigResource.Type.BROKER, "1", "message.max.bytes")
    assert (entry.value, entry.source, entry.is_read_only) == (
        "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)
    producer = _producer(broker.bootstrap)
    try:
        assert not _accepted(producer, topic, BIG)
        _alter(broker.bootstrap, "", "message.max.bytes", None)
        assert _accepted(producer, topic, BIG)
    finally:
        producer.close()


def _earliest(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.beginning_offsets([tp])[tp])
    finally:
        consumer.close()


def test_an_existing_topics_log_follows_new_defaults(snapshotting_broker: Broker) -> None:
    """Segment roll and retention of a topic created before the change: the
    cluster defaults log.roll.ms and log.retention.ms reach its log at once."""
    bootstrap = snapshotting_broker.bootstrap
    topic = unique_topic("dyn-retention")
    producer = _producer(bootstrap)
    try:
        assert _accepted(producer, topic, SMALL)
        assert _accepted(producer, topic, SMALL)
        time.sleep(0.5)
        assert _earliest(bootstrap, topic) == 0  # a week's retention: nothing goes
        _alter(bootstrap, "", "log.roll.ms", "100")
        time.sleep(0.2)
        assert _accepted(producer, topic, SMALL)  # rolls: the first segment closes
        segments = sorted(p.name for p in (snapshotting_broker.data_dir / f"{topic}-0").glob("*.log"))
        assert segments == ["00000000000000000000.log", "00000000000000000002.log"]
        _alter(bootstrap, "", "log.retention.ms", "1")
        # every record expired: the closed segment goes, and the active one too (as in Kafka)
        _until(lambda: _earliest(bootstrap, topic) == 3,
               "the expired segments were never deleted under the new retention")
    finally:
        producer.close()
    entry = _describe(bootstrap, ConfigResource.Type.TOPIC, topic, "retention.ms")
    assert (entry.value, entry.source) == ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


@pytest.mark.parametrize("tbroker", RF3_ONLY, indirect=True)
def test_cluster_default_reaches_every_broker(tbroker: Deployment) -> None:
    cluster = tbroker.cluster
    assert cluster is not None
    topic = unique_topic("dyn-cluster")
    cluster.create_topic(topic, 3)
    leaders = cluster.leaders(topic)
    assert sorted(set(leaders.values())) == [1, 2, 3], leaders
    controller = cluster.wait_for_controller()
    other = next(b for i, b in cluster.brokers.items() if i != controller)
    lifted = leaders[0]
    producer = _producer(cluster.bootstrap)
    try:
        assert _accepted(producer, topic, BIG, 0)
        _alter(other.bootstrap, "", "message.max.bytes", "2000")  # forwarded to the controller
        for node_id, b in cluster.brokers.items():
            _until(lambda b=b, node_id=node_id: _describe(  # type: ignore[misc]
                b.bootstrap, ConfigResource.Type.BROKER, str(node_id), "message.max.bytes").source
                   == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
                   f"broker {node_id} never applied the cluster default")
        for partition in range(3):
            assert not _accepted(producer, topic, BIG, partition), leaders[partition]
            assert _accepted(producer, topic, SMALL, partition)

        _alter(cluster.brokers[lifted].bootstrap, str(lifted), "message.max.bytes", "100000")
        _until(lambda: _accepted(producer, topic, BIG, 0), "the per-broker value never applied")
        for partition in (1, 2):
            assert not _accepted(producer, topic, BIG, partition)
    finally:
        producer.close()
        _alter(cluster.brokers[lifted].bootstrap, str(lifted), "message.max.bytes", None)
        _alter(other.bootstrap, "", "message.max.bytes", None)


def _second_connection_served(bootstrap: str, source: str) -> bool:
    """Two connections from ``source`` held open: is the second one served?"""
    from compat_tests.java.test_connection_limits_differential import _open, _served
    first, second = _open(bootstrap, source), _open(bootstrap, source)
    try:
        return _served(first) and _served(second)
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("tbroker", RF3_ONLY, indirect=True)
def test_a_per_ip_connection_limit_reaches_every_broker(tbroker: Deployment) -> None:
    """max.connections.per.ip.overrides set as the cluster default through one
    broker: every broker then refuses a second connection from that address
    (127.0.0.2, which no other test uses), and serves it again once removed."""
    cluster = tbroker.cluster
    assert cluster is not None
    key, source = "max.connections.per.ip.overrides", "127.0.0.2"
    brokers = list(cluster.brokers.values())
    _alter(brokers[1].bootstrap, "", key, f"{source}:1")
    try:
        for b in brokers:
            _until(lambda b=b: not _second_connection_served(  # type: ignore[misc]
                b.bootstrap, source), f"{b.bootstrap} never applied {key}")
    finally:
        _alter(brokers[1].bootstrap, "", key, None)
    for b in brokers:
        _until(lambda b=b: _second_connection_served(b.bootstrap, source),  # type: ignore[misc]
               f"{b.bootstrap} still refuses after {key} was removed")
