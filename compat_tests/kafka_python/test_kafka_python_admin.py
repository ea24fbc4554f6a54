"""kafka-python 3.x KafkaAdminClient against a real kcompat broker."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kerr
from kafka.admin import ConfigResource, ConfigResourceType

from .._broker import Broker
from .._records import TIMEOUT_MS, TIMEOUT_S

pytestmark = pytest.mark.timeout(120)

CLIENT = "kafka-python admin"

TOPIC_CONFIGS = {
    "retention.ms": "86400000",
    "cleanup.policy": "delete",
    "max.message.bytes": "2097152",
}


@pytest.fixture
def admin(module_broker: Broker) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        yield a
    finally:
        a.close()


def wait_until(what: str, probe: Callable[[], Any], ok: Callable[[Any], bool],
               timeout: float = TIMEOUT_S) -> Any:
    """Poll (Kafka propagates some admin changes to metadata asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        last = probe()
        if ok(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{CLIENT}: timed out waiting for {what}; last saw {last!r}")
        time.sleep(0.1)


def topic_configs(admin: KafkaAdminClient, topic: str, config_filter: str = "modified") -> dict[str, Any]:
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                 config_filter=config_filter)
    assert topic in res.get("topic", {}), f"{CLIENT}: DescribeConfigs answered {res}"
    return res["topic"][topic]


def partition_count(admin: KafkaAdminClient, topic: str) -> int:
    (t,) = admin.describe_topics([topic])
    assert t["error_code"] == 0, f"{CLIENT}: Metadata for {topic}: {t}"
    return len(t["partitions"])


def test_topic_admin_round_trip(admin: KafkaAdminClient, module_broker: Broker, topic: str) -> None:
    res = admin.create_topics({topic: {
        "num_partitions": 3, "replication_factor": 1, "configs": TOPIC_CONFIGS,
    }})
    (t,) = res["topics"]
    assert t["name"] == topic and t["error_code"] == 0, f"{CLIENT}: CreateTopics answered {t}"
    admin.wait_for_topics([topic], timeout_ms=TIMEOUT_MS)

    # Metadata: 3 partitions, ids 0..2, each with a leader.
    (md,) = admin.describe_topics([topic])
    assert sorted(p["partition_index"] for p in md["partitions"]) == [0, 1, 2], f"{CLIENT}: {md}"
    assert all(p["leader_id"] >= 0 for p in md["partitions"]), f"{CLIENT}: {md}"
    assert topic in admin.list_topics()

    # DescribeConfigs: the configs we set, as dynamic topic configs.
    modified = topic_configs(admin, topic)
    for key, value in TOPIC_CONFIGS.items():
        assert key in modified, f"{CLIENT}: {key} missing from modified configs {sorted(modified)}"
        assert modified[key]["value"] == value, f"{CLIENT}: {key}={modified[key]}"
        assert modified[key]["config_source"] == "DYNAMIC_TOPIC_CONFIG", f"{CLIENT}: {key}={modified[key]}"
    # Kafka describes every topic config when no names are given, defaults included.
    everything = topic_configs(admin, topic, config_filter="all")
    assert "segment.bytes" in everything, f"{CLIENT}: full DescribeConfigs lacks segment.bytes: {sorted(everything)}"
    assert everything["segment.bytes"]["config_source"] != "DYNAMIC_TOPIC_CONFIG"

    # CreatePartitions 3 -> 5, then the new partition takes records.
    admin.create_partitions({topic: 5})
    wait_until("5 partitions in metadata", lambda: partition_count(admin, topic), lambda n: n == 5)
    p = KafkaProducer(bootstrap_servers=module_broker.bootstrap, max_block_ms=TIMEOUT_MS)
    try:
        md4 = p.send(topic, key=b"k", value=b"in-new-partition", partition=4).get(timeout=TIMEOUT_S)
    finally:
        p.close(timeout=TIMEOUT_S)
    assert (md4.partition, md4.offset) == (4, 0), f"{CLIENT}: produce to new partition: {md4}"

    # IncrementalAlterConfigs (kafka-python picks it when the broker advertises key 44).
    assert admin._check_incremental_alter_configs_support(), (
        f"{CLIENT}: broker does not advertise IncrementalAlterConfigs"
    )
    r = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": "3600000"})])
    assert r == {"topic": {topic: "OK"}}, f"{CLIENT}: IncrementalAlterConfigs answered {r}"
    modified = topic_configs(admin, topic)
    assert modified["retention.ms"]["value"] == "3600000", f"{CLIENT}: {modified.get('retention.ms')}"
    assert modified["max.message.bytes"]["value"] == "2097152", (
        f"{CLIENT}: incremental alter of retention.ms changed max.message.bytes: "
        f"{modified.get('max.message.bytes')}"
    )

    # Legacy AlterConfigs (kafka-python re-sends the other modified keys itself).
    r = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": "7200000"})],
                            incremental=False)
    assert r == {"topic": {topic: "OK"}}, f"{CLIENT}: AlterConfigs answered {r}"
    modified = topic_configs(admin, topic)
    assert modified["retention.ms"]["value"] == "7200000", f"{CLIENT}: {modified.get('retention.ms')}"
    assert modified["max.message.bytes"]["value"] == "2097152", f"{CLIENT}: {modified}"

    # DeleteTopics, then gone from metadata.
    res = admin.delete_topics([topic])
    (d,) = res["topics"]
    assert d["name"] == topic and d["error_code"] == 0, f"{CLIENT}: DeleteTopics answered {d}"
    wait_until(f"{topic} to leave metadata", admin.list_topics, lambda names: topic not in names)


def test_create_existing_topic_is_topic_already_exists(admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    with pytest.raises(kerr.TopicAlreadyExistsError):
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    res = admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}},
                              raise_errors=False)
    assert res["topics"][0]["error_code"] == kerr.TopicAlreadyExistsError.errno, f"{CLIENT}: {res}"
    assert partition_count(admin, topic) == 1, "a failed re-create must not change the topic"


def test_create_topic_with_zero_partitions_is_invalid_partitions(admin: KafkaAdminClient, topic: str) -> None:
    with pytest.raises(kerr.InvalidPartitionsError):
        admin.create_topics({topic: {"num_partitions": 0, "replication_factor": 1}})
    assert topic not in admin.list_topics(), f"{CLIENT}: rejected topic was created anyway"


def test_create_topic_with_replication_factor_above_brokers(admin: KafkaAdminClient, topic: str) -> None:
    with pytest.raises(kerr.InvalidReplicationFactorError):
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 3}})
    assert topic not in admin.list_topics()


def test_create_topic_with_invalid_config_value(admin: KafkaAdminClient, topic: str) -> None:
    with pytest.raises(kerr.InvalidConfigurationError):
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1,
                                     "configs": {"retention.ms": "not-a-number"}}})
    assert topic not in admin.list_topics()


def test_create_topic_with_default_partitions(admin: KafkaAdminClient, topic: str) -> None:
    """num_partitions=-1 / replication_factor=-1 mean 'broker default' (KIP-464)."""
    res = admin.create_topics([topic])  # kafka-python sends -1/-1 for bare names
    assert res["topics"][0]["error_code"] == 0, f"{CLIENT}: {res}"
    admin.wait_for_topics([topic], timeout_ms=TIMEOUT_MS)
    assert partition_count(admin, topic) == 1, "num.partitions default is 1"


def test_create_partitions_cannot_shrink(admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1}})
    admin.wait_for_topics([topic], timeout_ms=TIMEOUT_MS)
    with pytest.raises(kerr.InvalidPartitionsError):
        admin.create_partitions({topic: 2})
    assert partition_count(admin, topic) == 3


def test_delete_unknown_topic(admin: KafkaAdminClient, topic: str) -> None:
    with pytest.raises(kerr.UnknownTopicOrPartitionError):
        admin.delete_topics([topic])


def test_delete_records_moves_log_start(admin: KafkaAdminClient, module_broker: Broker, topic: str) -> None:
    bs = module_broker.bootstrap
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    admin.wait_for_topics([topic], timeout_ms=TIMEOUT_MS)
    p = KafkaProducer(bootstrap_servers=bs, max_block_ms=TIMEOUT_MS)
    try:
        fs = [p.send(topic, value=f"r{i}".encode(), partition=0) for i in range(10)]
        p.flush(timeout=TIMEOUT_S)
        assert [f.get(timeout=TIMEOUT_S).offset for f in fs] == list(range(10))
    finally:
        p.close(timeout=TIMEOUT_S)
    tp = TopicPartition(topic, 0)
    res = admin.delete_records({tp: 4})
    assert res[tp]["low_watermark"] == 4, f"{CLIENT}: DeleteRecords answered {res}"

    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, request_timeout_ms=TIMEOUT_MS,
                      fetch_max_wait_ms=100)
    try:
        assert c.beginning_offsets([tp], timeout_ms=TIMEOUT_MS) == {tp: 4}
        c.assign([tp])
        c.seek_to_beginning(tp)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 6 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.extend((m.offset, m.value) for m in recs)
        assert got == [(i, f"r{i}".encode()) for i in range(4, 10)], f"{CLIENT}: read {got}"
    finally:
        c.close()


def test_describe_cluster(admin: KafkaAdminClient, module_broker: Broker) -> None:
    info = admin.describe_cluster()
    brokers = info["brokers"]
    assert len(brokers) == 1, f"{CLIENT}: describe_cluster brokers {brokers}"
    (b,) = brokers
    assert (b["host"], b["port"]) == (module_broker.host, module_broker.port), f"{CLIENT}: {b}"
    assert info.get("cluster_id"), f"{CLIENT}: empty cluster id in {info}"
    assert info.get("controller_id") == b["broker_id"], f"{CLIENT}: {info}"


@pytest.mark.parametrize("name", ["bad name!", "x" * 250, ".", ".."])
def test_create_topic_with_invalid_name(admin: KafkaAdminClient, name: str) -> None:
    with pytest.raises(kerr.InvalidTopicError):
        admin.create_topics({name: {"num_partitions": 1, "replication_factor": 1}})


def test_create_topic_colliding_on_dot_and_underscore(admin: KafkaAdminClient, topic: str) -> None:
    """Kafka rejects a name that differs from an existing one only by '.' vs '_'
    (metric names would collide): INVALID_TOPIC_EXCEPTION."""
    dotted = topic.replace("-", ".") + ".x"
    underscored = dotted.replace(".", "_")
    admin.create_topics({dotted: {"num_partitions": 1, "replication_factor": 1}})
    res = admin.create_topics({underscored: {"num_partitions": 1, "replication_factor": 1}},
                              raise_errors=False)
    (t,) = res["topics"]
    assert t["error_code"] == kerr.InvalidTopicError.errno, (
        f"{CLIENT}: CreateTopics {underscored!r} while {dotted!r} exists answered error "
        f"{t['error_code']}; Kafka answers INVALID_TOPIC_EXCEPTION (17), "
        f"'collides with existing topic'"
    )
    assert underscored not in admin.list_topics()


def test_delete_then_recreate_starts_empty(admin: KafkaAdminClient, module_broker: Broker, topic: str) -> None:
    bs = module_broker.bootstrap
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    admin.wait_for_topics([topic], timeout_ms=TIMEOUT_MS)
    p = KafkaProducer(bootstrap_servers=bs, max_block_ms=TIMEOUT_MS)
    try:
        for i in range(5):
            p.send(topic, value=f"old-{i}".encode(), partition=0)
        p.flush(timeout=TIMEOUT_S)
    finally:
        p.close(timeout=TIMEOUT_S)
    admin.delete_topics([topic])
    wait_until(f"{topic} to leave metadata", admin.list_topics, lambda names: topic not in names)
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})
    admin.wait_for_topics([topic], timeout_ms=TIMEOUT_MS)
    assert partition_count(admin, topic) == 2
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, request_timeout_ms=TIMEOUT_MS)
    try:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        ends = wait_until("end offsets of the re-created topic",
                          lambda: c.end_offsets(tps, timeout_ms=TIMEOUT_MS),
                          lambda e: e is not None)
        assert ends == {tps[0]: 0, tps[1]: 0}, f"{CLIENT}: re-created topic has old data: {ends}"
    finally:
        c.close()


def test_metadata_without_auto_create_does_not_create(admin: KafkaAdminClient, topic: str) -> None:
    """KafkaAdminClient asks Metadata with allow_auto_topic_creation=false: an unknown
    topic is UNKNOWN_TOPIC_OR_PARTITION and stays unknown."""
    (t,) = admin.describe_topics([topic])
    assert t["error_code"] == kerr.UnknownTopicOrPartitionError.errno, f"{CLIENT}: {t}"
    assert topic not in admin.list_topics(), f"{CLIENT}: Metadata auto-created {topic}"
