"""confluent-kafka AdminClient (librdkafka 2.x) against a real kcompat broker."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from .._broker import Broker
from .._records import TIMEOUT_S, Rec, base_timestamp
from ._helpers import (
    CLIENT,
    admin_client,
    consume_all,
    error_code,
    produce_recs,
    wait_for_partitions,
)

pytestmark = pytest.mark.timeout(120)

TOPIC_CONFIGS = {
    "retention.ms": "86400000",
    "cleanup.policy": "delete",
    "max.message.bytes": "2097152",
}


@pytest.fixture
def admin(module_broker: Broker) -> AdminClient:
    return admin_client(module_broker.bootstrap)


def wait_until(what: str, probe: Callable[[], Any], ok: Callable[[Any], bool]) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        last = probe()
        if ok(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{CLIENT}: timed out waiting for {what}; last saw {last!r}")
        time.sleep(0.1)


def create(admin: AdminClient, topic: str, partitions: int, replication: int = 1,
           config: dict[str, str] | None = None) -> None:
    futs = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication, config=config or {})],
        operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    futs[topic].result(timeout=TIMEOUT_S)


def create_error(admin: AdminClient, topic: str, partitions: int, replication: int = 1,
                 config: dict[str, str] | None = None) -> int:
    with pytest.raises(KafkaException) as ei:
        create(admin, topic, partitions, replication, config)
    return error_code(ei.value)


def describe(admin: AdminClient, topic: str) -> dict[str, Any]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    futs = admin.describe_configs([res], request_timeout=TIMEOUT_S)
    (fut,) = futs.values()
    return fut.result(timeout=TIMEOUT_S)


def source_of(entry: ConfigEntry) -> ConfigSource:
    src = entry.source
    return src if isinstance(src, ConfigSource) else ConfigSource(src)


def topic_names(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=TIMEOUT_S).topics)


def test_topic_admin_round_trip(admin: AdminClient, module_broker: Broker, topic: str) -> None:
    create(admin, topic, 3, config=TOPIC_CONFIGS)
    wait_for_partitions(admin, topic, 3)
    assert topic in topic_names(admin)

    entries = describe(admin, topic)
    for key, value in TOPIC_CONFIGS.items():
        assert key in entries, f"{CLIENT}: {key} missing from DescribeConfigs: {sorted(entries)}"
        e = entries[key]
        assert e.value == value, f"{CLIENT}: {key}={e.value!r}, expected {value!r}"
        assert source_of(e) == ConfigSource.DYNAMIC_TOPIC_CONFIG, f"{CLIENT}: {key} source {source_of(e)}"
        assert not e.is_default, f"{CLIENT}: {key} reported as default"
    assert "segment.bytes" in entries, f"{CLIENT}: DescribeConfigs lacks defaults: {sorted(entries)}"
    assert source_of(entries["segment.bytes"]) == ConfigSource.DEFAULT_CONFIG, (
        f"{CLIENT}: segment.bytes source {source_of(entries['segment.bytes'])}"
    )

    # CreatePartitions 3 -> 5; the new partition takes a record.
    futs = admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=TIMEOUT_S,
                                   request_timeout=TIMEOUT_S)
    futs[topic].result(timeout=TIMEOUT_S)
    wait_for_partitions(admin, topic, 5)
    produce_recs(Producer({"bootstrap.servers": module_broker.bootstrap}), topic,
                 [Rec(4, b"k", b"in-new-partition", (), base_timestamp())])

    # IncrementalAlterConfigs: SET one key, others untouched; then DELETE it.
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S).values():
        f.result(timeout=TIMEOUT_S)
    entries = describe(admin, topic)
    assert entries["retention.ms"].value == "3600000", f"{CLIENT}: {entries['retention.ms']}"
    assert entries["max.message.bytes"].value == "2097152", (
        f"{CLIENT}: incremental SET of retention.ms changed max.message.bytes to "
        f"{entries['max.message.bytes'].value}"
    )
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    for f in admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S).values():
        f.result(timeout=TIMEOUT_S)
    entries = describe(admin, topic)
    assert source_of(entries["max.message.bytes"]) != ConfigSource.DYNAMIC_TOPIC_CONFIG, (
        f"{CLIENT}: DELETE left max.message.bytes as a topic override: {entries['max.message.bytes']}"
    )
    assert entries["retention.ms"].value == "3600000"

    # Legacy AlterConfigs replaces the whole set: unnamed overrides revert to defaults.
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "7200000"})
    for f in admin.alter_configs([res], request_timeout=TIMEOUT_S).values():
        f.result(timeout=TIMEOUT_S)
    entries = describe(admin, topic)
    assert entries["retention.ms"].value == "7200000", f"{CLIENT}: {entries['retention.ms']}"
    assert source_of(entries["cleanup.policy"]) != ConfigSource.DYNAMIC_TOPIC_CONFIG, (
        f"{CLIENT}: AlterConfigs without cleanup.policy should reset it, got {entries['cleanup.policy']}"
    )

    # DeleteTopics, then gone from metadata.
    futs = admin.delete_topics([topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    futs[topic].result(timeout=TIMEOUT_S)
    wait_until(f"{topic} to leave metadata", lambda: topic_names(admin), lambda names: topic not in names)


def test_create_existing_topic_is_topic_already_exists(admin: AdminClient, topic: str) -> None:
    create(admin, topic, 1)
    assert create_error(admin, topic, 1) == KafkaError.TOPIC_ALREADY_EXISTS


def test_create_topic_with_zero_partitions_is_invalid_partitions(admin: AdminClient, topic: str) -> None:
    assert create_error(admin, topic, 0) == KafkaError.INVALID_PARTITIONS
    assert topic not in topic_names(admin)


def test_create_topic_with_replication_factor_above_brokers(admin: AdminClient, topic: str) -> None:
    assert create_error(admin, topic, 1, replication=3) == KafkaError.INVALID_REPLICATION_FACTOR
    assert topic not in topic_names(admin)


def test_create_topic_with_invalid_config_value(admin: AdminClient, topic: str) -> None:
    code = create_error(admin, topic, 1, config={"retention.ms": "not-a-number"})
    assert code == KafkaError.INVALID_CONFIG, f"{CLIENT}: got {KafkaError(code)}"
    assert topic not in topic_names(admin)


def test_validate_only_creates_nothing(admin: AdminClient, topic: str) -> None:
    futs = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)],
                               validate_only=True, request_timeout=TIMEOUT_S)
    futs[topic].result(timeout=TIMEOUT_S)
    assert topic not in topic_names(admin), f"{CLIENT}: validate_only created {topic}"


def test_create_partitions_cannot_shrink(admin: AdminClient, topic: str) -> None:
    create(admin, topic, 3)
    wait_for_partitions(admin, topic, 3)
    futs = admin.create_partitions([NewPartitions(topic, 2)], request_timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as ei:
        futs[topic].result(timeout=TIMEOUT_S)
    assert error_code(ei.value) == KafkaError.INVALID_PARTITIONS


def test_delete_unknown_topic(admin: AdminClient, topic: str) -> None:
    futs = admin.delete_topics([topic], request_timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as ei:
        futs[topic].result(timeout=TIMEOUT_S)
    assert error_code(ei.value) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_list_offsets_and_delete_records(admin: AdminClient, module_broker: Broker, topic: str) -> None:
    bs = module_broker.bootstrap
    create(admin, topic, 1)
    wait_for_partitions(admin, topic, 1)
    base = base_timestamp()
    # Timestamps rise except record 6, which carries the maximum.
    recs = [Rec(0, None, f"r{i}".encode(), (), base + i * 10) for i in range(10)]
    recs[6] = Rec(0, None, b"r6", (), base + 100_000)
    produce_recs(Producer({"bootstrap.servers": bs}), topic, recs)
    tp = TopicPartition(topic, 0)

    def list_offsets(spec: OffsetSpec) -> Any:
        futs = admin.list_offsets({tp: spec}, request_timeout=TIMEOUT_S)
        return futs[tp].result(timeout=TIMEOUT_S)

    assert list_offsets(OffsetSpec.earliest()).offset == 0
    assert list_offsets(OffsetSpec.latest()).offset == 10
    r = list_offsets(OffsetSpec.for_timestamp(base + 25))
    assert (r.offset, r.timestamp) == (3, base + 30), f"{CLIENT}: for_timestamp -> {r.offset}/{r.timestamp}"
    assert list_offsets(OffsetSpec.for_timestamp(base + 200_000)).offset == -1
    r = list_offsets(OffsetSpec.max_timestamp())
    assert (r.offset, r.timestamp) == (6, base + 100_000), (
        f"{CLIENT}: max_timestamp (ListOffsets -3) -> offset {r.offset} ts {r.timestamp}"
    )

    futs = admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=TIMEOUT_S,
                                operation_timeout=TIMEOUT_S)
    (fut,) = futs.values()
    deleted = fut.result(timeout=TIMEOUT_S)
    assert deleted.low_watermark == 4, f"{CLIENT}: DeleteRecords low watermark {deleted.low_watermark}"
    assert list_offsets(OffsetSpec.earliest()).offset == 4
    seen = consume_all(bs, topic, [0])
    assert [(s.offset, s.value) for s in seen] == [(i, recs[i].value) for i in range(4, 10)]


def test_describe_cluster_and_topics(admin: AdminClient, module_broker: Broker, topic: str) -> None:
    from confluent_kafka import TopicCollection

    create(admin, topic, 2)
    wait_for_partitions(admin, topic, 2)
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert cluster.cluster_id, f"{CLIENT}: empty cluster id"
    assert [(n.host, n.port) for n in cluster.nodes] == [(module_broker.host, module_broker.port)]
    assert cluster.controller is not None and cluster.controller.id == cluster.nodes[0].id
    futs = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)
    desc = futs[topic].result(timeout=TIMEOUT_S)
    assert desc.name == topic and [p.id for p in desc.partitions] == [0, 1], f"{CLIENT}: {desc}"
    assert all(p.leader is not None and p.leader.id == cluster.nodes[0].id for p in desc.partitions)
