"""Admin APIs driven by real admin clients against a broker subprocess:
kafka-python's KafkaAdminClient and confluent-kafka's AdminClient (librdkafka).

Covers CreateTopics (configs, validate_only, duplicates, bad partitions and
configs), DescribeConfigs (values, sources, synonyms, broker resources),
IncrementalAlterConfigs, AlterConfigs, CreatePartitions, DeleteRecords,
DeleteTopics and DescribeCluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka import KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka import errors as kerrors
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import KafkaAdminClient

from compat_tests._broker import Broker, running, unique_topic

BROKER_RETENTION_MS = "86400000"  # set on the command line: STATIC_BROKER_CONFIG


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from running(Broker(tmp_path_factory.mktemp("admin-broker"),
                              extra_args=("--set", f"log.retention.ms={BROKER_RETENTION_MS}")))


@pytest.fixture(scope="module")
def kadmin(broker: Broker) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


@pytest.fixture(scope="module")
def cadmin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def wait(futures: dict[Any, Any], timeout: float = 10.0) -> dict[Any, Any]:
    return {k: f.result(timeout=timeout) for k, f in futures.items()}


def error_of(future: Any) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=10)
    return info.value.args[0]


def produce(broker: Broker, topic: str, count: int, partition: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    try:
        for i in range(count):
            producer.send(topic, value=b"v%d" % i, partition=partition)
        producer.flush(timeout=10)
    finally:
        producer.close(timeout=5)


# -- kafka-python ---------------------------------------------------------------

def test_kafka_python_create_topic_with_configs(kadmin: KafkaAdminClient) -> None:
    topic = unique_topic("kp-create")
    result = kadmin.create_topics(
        {topic: {"num_partitions": 3, "replication_factor": 1,
                 "configs": {"retention.ms": "5000", "cleanup.policy": "compact,delete"}}})
    created = result["topics"][0]
    assert (created["error_code"], created["num_partitions"]) == (0, 3)
    assert created["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert topic in kadmin.list_topics()

    described = kadmin.describe_configs([KConfigResource("TOPIC", topic)], include_synonyms=True,
                                        config_filter="all")["topic"][topic]
    assert described["retention.ms"]["value"] == "5000"
    assert described["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert described["cleanup.policy"]["value"] == "compact,delete"
    assert described["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert described["segment.ms"]["config_type"] == "LONG"
    synonyms = [(s["name"], s["source"]) for s in described["retention.ms"]["synonyms"]]
    assert synonyms == [("retention.ms", "DYNAMIC_TOPIC_CONFIG"),
                        ("log.retention.ms", "STATIC_BROKER_CONFIG"),
                        ("log.retention.hours", "DEFAULT_CONFIG")]  # as Kafka lists them


def test_kafka_python_create_errors(kadmin: KafkaAdminClient) -> None:
    topic = unique_topic("kp-errors")
    kadmin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}},
                         validate_only=True)
    assert topic not in kadmin.list_topics()
    kadmin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    with pytest.raises(kerrors.TopicAlreadyExistsError):
        kadmin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    with pytest.raises(kerrors.InvalidPartitionsError):
        kadmin.create_topics({unique_topic("kp-zero"): {"num_partitions": 0,
                                                       "replication_factor": 1}})
    with pytest.raises(kerrors.InvalidReplicationFactorError):
        kadmin.create_topics({unique_topic("kp-rf"): {"num_partitions": 1,
                                                     "replication_factor": 3}})
    with pytest.raises(kerrors.InvalidConfigurationError):
        kadmin.create_topics({unique_topic("kp-bad"): {
            "num_partitions": 1, "replication_factor": 1, "configs": {"retention.ms": "soon"}}})


def test_kafka_python_alter_configs(kadmin: KafkaAdminClient) -> None:
    topic = unique_topic("kp-alter")
    kadmin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1,
                                  "configs": {"retention.ms": "5000"}}})
    resource = [KConfigResource("TOPIC", topic, configs={"segment.ms": "1000"})]
    assert kadmin.alter_configs(resource) == {"topic": {topic: "OK"}}  # incremental
    resource = [KConfigResource("TOPIC", topic, configs={"segment.ms": "2000"})]
    assert kadmin.alter_configs(resource, incremental=False) == {"topic": {topic: "OK"}}
    modified = kadmin.describe_configs([KConfigResource("TOPIC", topic)])["topic"][topic]
    assert {k: v["value"] for k, v in modified.items()} == {"retention.ms": "5000",
                                                            "segment.ms": "2000"}
    broker_cfg = kadmin.describe_configs([KConfigResource("BROKER", "1")],
                                         config_filter="all")["broker"]["1"]
    assert broker_cfg["log.retention.ms"]["value"] == BROKER_RETENTION_MS
    assert broker_cfg["log.retention.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert broker_cfg["num.partitions"]["config_source"] == "DEFAULT_CONFIG"


def test_kafka_python_partitions_records_delete(broker: Broker,
                                                kadmin: KafkaAdminClient) -> None:
    topic = unique_topic("kp-recs")
    kadmin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    kadmin.create_partitions({topic: 3})
    parts = kadmin.describe_topics([topic])[0]["partitions"]
    assert sorted(p["partition_index"] for p in parts) == [0, 1, 2]

    produce(broker, topic, 5)
    tp = KTopicPartition(topic, 0)
    assert kadmin.delete_records({tp: 2})[tp]["low_watermark"] == 2
    assert kadmin.delete_records({tp: -1})[tp]["low_watermark"] == 5
    with pytest.raises(kerrors.OffsetOutOfRangeError):
        kadmin.delete_records({tp: 99})

    cluster = kadmin.describe_cluster()
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(1, broker.port)]

    kadmin.delete_topics([topic])
    assert topic not in kadmin.list_topics()
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        kadmin.delete_topics([topic])


# -- confluent-kafka --------------------------------------------------------------

def test_confluent_create_topics(cadmin: AdminClient) -> None:
    good, dup = unique_topic("ck-good"), unique_topic("ck-dup")
    wait(cadmin.create_topics([NewTopic(dup, 1, 1)]))
    futures = cadmin.create_topics([
        NewTopic(good, 2, 1, config={"retention.ms": "7000"}),
        NewTopic(dup, 1, 1),
        NewTopic(unique_topic("ck-zero"), 0, 1),
        NewTopic(unique_topic("ck-cfg"), 1, 1, config={"segment.bytes": "abc"}),
        NewTopic(unique_topic("ck-unknown"), 1, 1, config={"no.such.config": "1"}),
    ])
    results = list(futures.values())
    assert results[0].result(timeout=10) is None
    assert error_of(results[1]).code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert error_of(results[2]).code() == KafkaError.INVALID_PARTITIONS
    bad = error_of(results[3])
    assert bad.code() == KafkaError.INVALID_CONFIG and "segment.bytes" in bad.str()
    assert error_of(results[4]).code() == KafkaError.INVALID_CONFIG

    only = unique_topic("ck-validate")
    wait(cadmin.create_topics([NewTopic(only, 1, 1)], validate_only=True))
    assert only not in cadmin.list_topics(timeout=10).topics
    assert good in cadmin.list_topics(timeout=10).topics


def test_confluent_describe_and_alter_configs(cadmin: AdminClient) -> None:
    topic = unique_topic("ck-cfg")
    wait(cadmin.create_topics([NewTopic(topic, 1, 1, config={"segment.ms": "100000"})]))
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def describe() -> dict[str, Any]:
        return next(iter(wait(cadmin.describe_configs([resource])).values()))

    configs = describe()
    assert configs["segment.ms"].value == "100000"
    assert configs["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].value == BROKER_RETENTION_MS
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not configs["segment.ms"].is_read_only

    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    wait(cadmin.incremental_alter_configs([change]))
    configs = describe()
    assert configs["retention.ms"].value == "3000"
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"

    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "x", incremental_operation=AlterConfigOpType.SET)])
    (future,) = cadmin.incremental_alter_configs([bad]).values()
    assert error_of(future).code() == KafkaError.INVALID_CONFIG

    legacy = ConfigResource(ConfigResource.Type.TOPIC, topic,
                            set_config={"max.message.bytes": "2000"})
    wait(cadmin.alter_configs([legacy]))
    configs = describe()
    assert configs["max.message.bytes"].value == "2000"
    assert configs["retention.ms"].value == BROKER_RETENTION_MS  # replaced wholesale

    broker_res = ConfigResource(ConfigResource.Type.BROKER, "1")
    broker_cfg = next(iter(wait(cadmin.describe_configs([broker_res])).values()))
    assert broker_cfg["log.retention.ms"].value == BROKER_RETENTION_MS
    assert not broker_cfg["log.retention.ms"].is_read_only  # a dynamic broker key
    assert broker_cfg["num.partitions"].is_read_only


def test_confluent_partitions_records_delete(broker: Broker, cadmin: AdminClient) -> None:
    topic = unique_topic("ck-recs")
    wait(cadmin.create_topics([NewTopic(topic, 1, 1)]))
    wait(cadmin.create_partitions([NewPartitions(topic, 2)]))
    assert len(cadmin.list_topics(topic, timeout=10).topics[topic].partitions) == 2
    (future,) = cadmin.create_partitions([NewPartitions(topic, 1)]).values()
    assert error_of(future).code() == KafkaError.INVALID_PARTITIONS

    produce(broker, topic, 4, partition=1)
    (deleted,) = wait(cadmin.delete_records([TopicPartition(topic, 1, 3)])).values()
    assert deleted.low_watermark == 3

    cluster = cadmin.describe_cluster().result(timeout=10)
    assert cluster.controller.id == 1
    assert [(n.id, n.port) for n in cluster.nodes] == [(1, broker.port)]
    assert cluster.cluster_id

    wait(cadmin.delete_topics([topic]))
    assert topic not in cadmin.list_topics(timeout=10).topics
    (future,) = cadmin.delete_topics([topic]).values()
    assert error_of(future).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
