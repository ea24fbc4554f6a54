"""Differential: how a produce is refused, on Apache Kafka 4.4 and on kcompat,
through kafka-python's protocol classes (an independent codec).

A compacted topic (``cleanup.policy=compact`` or ``compact,delete``) refuses a
batch holding records without a key: INVALID_RECORD, each keyless record named
in ``record_errors`` (batch index, message) and the partition's error message
(Produce v8+), the code alone before v8; nothing of the batch is stored. The
same request must get the same answer from both brokers.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from compat_tests._broker import Broker, unique_topic
from compat_tests.java.kafka_reference import KafkaReference
from tests.integration._raw import RawConnection

PD = ProduceRequest.TopicProduceData
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
NOT_YET_SERVED = (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER)


def _batch(keys: list[bytes | None]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    now = int(time.time() * 1000)
    for i, key in enumerate(keys):
        b.append(i, timestamp=now, key=key, value=b"v%d" % i, headers=[])
    return bytes(b.build())


def _produce(bootstrap: str, topic: str, records: bytes, version: int) -> tuple[Any, ...]:
    conn = RawConnection(bootstrap, timeout=20)
    try:
        req = ProduceRequest[version](transactional_id=None, acks=-1, timeout_ms=10_000,
                                      topic_data=[PD(name=topic, partition_data=[
                                          PD.PartitionProduceData(index=0, records=records)])])
        part = conn.request(req, ProduceResponse[version]).responses[0].partition_responses[0]
        end = conn.request(ListOffsetsRequest[5](
            replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=0, timestamp=-1)])]), ListOffsetsResponse[5])
    finally:
        conn.close()
    errors = [(e.batch_index, e.batch_index_error_message)
              for e in getattr(part, "record_errors", [])]
    return (part.error_code, getattr(part, "error_message", None), errors,
            end.topics[0].partitions[0].offset)


def _produce_led(bootstrap: str, topic: str, records: bytes, version: int) -> tuple[Any, ...]:
    """``_produce`` again (for up to ~5 s) while it answers NOT_LEADER_OR_FOLLOWER
    or UNKNOWN_TOPIC_OR_PARTITION: Kafka does for a moment after CreateTopics, until
    the new topic's metadata reaches the broker that serves the produce (full runs
    saw both, 6 and 3, where kcompat answered 87). Every client retries both, and
    nothing is stored meanwhile."""
    for _ in range(50):
        answer = _produce(bootstrap, topic, records, version)
        if answer[0] not in NOT_YET_SERVED:
            break
        time.sleep(0.1)
    return answer


def _create(bootstrap: str, topic: str, policy: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": policy})])
    finally:
        admin.close()


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_keyless_records_to_a_compacted_topic_are_refused_as_kafka_does(
        kafka_reference: KafkaReference, module_broker: Broker, policy: str) -> None:
    topic = unique_topic("compact-keys")
    answers = {}
    for name, bootstrap in (("kafka", kafka_reference.bootstrap),
                            ("kcompat", module_broker.bootstrap)):
        _create(bootstrap, topic, policy)
        answers[name] = [
            _produce_led(bootstrap, topic, _batch([b"a", None, b"b", None, None, None]), 9),
            _produce_led(bootstrap, topic, _batch([None]), 7),
            _produce_led(bootstrap, topic, _batch([b"a", b""]), 9),  # an empty key is a key
        ]
    for got, want in zip(answers["kcompat"], answers["kafka"], strict=True):
        for g, w in zip(got, want, strict=True):
            assert g == w
    refused, old, stored = answers["kcompat"]
    assert refused[0] == 87 and [i for i, _m in refused[2]] == [1, 3, 4, 5]
    assert f"{topic}-0" in refused[2][0][1] and refused[3] == 0  # nothing stored
    assert old[:3] == (87, None, []) and stored[0] == 0 and stored[3] == 2
