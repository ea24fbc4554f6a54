"""OffsetFetch with require_stable while a transaction holds a group's offsets, on
kcompat and on Apache Kafka 4.4.0 (confluent-kafka's Admin, the same assertions).

Found with the Kafka Streams application (compat_tests/apps/streams): a partition
whose offset awaits a transaction's marker answers UNSTABLE_OFFSET_COMMIT with
offset -1 in Kafka; kcompat answered its last stable offset beside the error.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests._broker import Broker, unique_topic
from compat_tests.java.kafka_reference import KafkaReference

UNSTABLE = KafkaError.UNSTABLE_OFFSET_COMMIT
COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                      KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


@pytest.fixture(params=("kcompat", "kafka"))
def target(request: pytest.FixtureRequest) -> Iterator[Broker | KafkaReference]:
    yield request.getfixturevalue("module_broker" if request.param == "kcompat"
                                  else "kafka_reference")


def fetch(admin: AdminClient, group: str, topic: str, stable: bool
          ) -> list[tuple[int, int | None]]:
    """[(offset, error code or None)] of partitions 0 and 1."""
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    res = admin.list_consumer_group_offsets([req], require_stable=stable, request_timeout=10)
    got = sorted(res[group].result(timeout=15).topic_partitions, key=lambda tp: tp.partition)
    return [(tp.offset, tp.error.code() if tp.error else None) for tp in got]


def test_pending_transactional_offset_is_unstable_without_offset(
        target: Broker | KafkaReference) -> None:
    bootstrap = target.bootstrap
    topic, group = unique_topic("unstable"), f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "log_level": 0})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": group,
                         "log_level": 0})
    try:
        deadline = time.monotonic() + 30
        while True:  # a fresh Kafka creates __consumer_offsets on the first commit
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
                break
            except KafkaException as e:
                assert e.args[0].code() in COORDINATOR_MOVING and time.monotonic() < deadline, e
                time.sleep(0.2)
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 3)],
            consumer.consumer_group_metadata(), 30)

        # Without require_stable: the last committed offsets (none yet for partition 1).
        assert fetch(admin, group, topic, stable=False) == [(5, None), (OFFSET_INVALID, None)]
        # With it: both partitions wait for the marker, and neither answers an offset.
        assert fetch(admin, group, topic, stable=True) == [(OFFSET_INVALID, UNSTABLE)] * 2

        producer.commit_transaction(30)
        deadline = time.monotonic() + 10  # Kafka writes the markers after EndTxn answers
        while (got := fetch(admin, group, topic, stable=True)) != [(7, None), (3, None)]:
            assert time.monotonic() < deadline, got
            time.sleep(0.1)
    finally:
        consumer.close()
