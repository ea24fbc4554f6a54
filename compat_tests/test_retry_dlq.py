"""Retry topics and dead-letter topics with real clients (docs/extensions.md).

A consumer group of kafka-python or confluent-kafka subscribes to a topic and
its retry topic and fails on every record of one key, handing it back with
the optional helper ``kcompat.ext.nack.nack`` (a plain produce to
``<topic>.retry``). The record must come back in the retry topic three times,
each after its backoff (``kc.retry.backoff.ms`` doubling), never earlier,
with ``kc-attempt`` 1, 2, 3; then it must be in ``<topic>.dlq`` once, with
the ``kc-dlq-*`` and Spring ``kafka_dlt-*`` context; ``kcompat dlq replay
--execute`` puts it back into the topic. Every other record is seen once and
never retried. On a single broker and in a 3-broker cluster (``gbroker``).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from compat_tests._broker import unique_topic
from compat_tests._deployment import Deployment
from compat_tests._group_member import kafka_python_learn_topics
from kcompat.ext.nack import nack

pytestmark = pytest.mark.timeout(120)

BACKOFF_MS = 300
SLACK_EARLY_S = 0.05  # the broker's due time counts from its receipt of the nack
LATE_BOUND_S = 3.0  # delivery lateness plus poll intervals on a loaded 2-core machine


def _setup(dep: Deployment) -> str:
    topic = unique_topic("retry")
    admin = KafkaAdminClient(bootstrap_servers=dep.bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, 2, dep.replication, topic_configs={
            "kc.retry.backoff.ms": str(BACKOFF_MS)})])
        producer = KafkaProducer(bootstrap_servers=dep.bootstrap)
        try:  # a client's Metadata auto-creates the retry topic, shaped like its topic
            deadline = time.monotonic() + 20
            while not producer.partitions_for(topic + ".retry"):
                assert time.monotonic() < deadline, "the retry topic was not created"
                time.sleep(0.2)
            assert len(producer.partitions_for(topic + ".retry")) == 2
            producer.send(topic, key=b"bad", value=b"poison", partition=1).get(timeout=20)
            for i in range(5):
                producer.send(topic, key=b"good-%d" % i, value=b"ok", partition=i % 2)
            producer.flush(timeout=20)
        finally:
            producer.close()
        resource = ConfigResource(ConfigResourceType.TOPIC, topic + ".retry")
        described = admin.describe_configs([resource])["topic"][topic + ".retry"]
        assert described["kc.retry.of"]["value"] == topic
        assert described["kc.retry.backoff.ms"]["value"] == str(BACKOFF_MS)  # inherited
    finally:
        admin.close()
    return topic


class _Seen:
    def __init__(self) -> None:
        self.rows: list[tuple[float, str, int, int, bytes, dict[str, bytes]]] = []
        self.nacked_at: list[float] = []


def _kafka_python(dep: Deployment, topic: str, seen: _Seen, done: Any) -> None:
    consumer = KafkaConsumer(bootstrap_servers=dep.bootstrap, group_id=unique_topic("g"),
                             auto_offset_reset="earliest", metadata_max_age_ms=1000)
    producer = KafkaProducer(bootstrap_servers=dep.bootstrap, acks="all")
    try:
        consumer.subscribe([topic, topic + ".retry"])
        # its first assignment must cover both topics: a kafka-python 3.0.12 leader that
        # rejoins for metadata can orphan that rebalance (kafka_python/FINDINGS.md)
        kafka_python_learn_topics(consumer, [topic, topic + ".retry"])
        deadline = time.monotonic() + 60
        while not done() and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=100).values():
                for r in records:
                    headers = {k: v for k, v in r.headers}
                    seen.rows.append((time.monotonic(), r.topic, r.partition, r.offset,
                                      r.key, headers))
                    if r.key == b"bad":
                        seen.nacked_at.append(time.monotonic())  # before the broker has it
                        nack(producer, r, "boom", consumer="kafka-python").get(timeout=20)
    finally:
        consumer.close()
        producer.close()


def _confluent(dep: Deployment, topic: str, seen: _Seen, done: Any) -> None:
    from confluent_kafka import Consumer, Producer

    consumer = Consumer({"bootstrap.servers": dep.bootstrap, "group.id": unique_topic("g"),
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms":
                         1000})
    producer = Producer({"bootstrap.servers": dep.bootstrap})
    try:
        consumer.subscribe([topic, topic + ".retry"])
        deadline = time.monotonic() + 60
        while not done() and time.monotonic() < deadline:
            m = consumer.poll(0.1)
            if m is None or m.error():
                continue
            headers = {k: v for k, v in (m.headers() or [])}
            seen.rows.append((time.monotonic(), m.topic(), m.partition(), m.offset(), m.key(),
                              headers))
            if m.key() == b"bad":
                seen.nacked_at.append(time.monotonic())  # before the broker has it
                nack(producer, m, "boom", consumer="confluent")
                assert producer.flush(20) == 0
    finally:
        consumer.close()


def _dead_letters(dep: Deployment, topic: str) -> list[Any]:
    consumer = KafkaConsumer(bootstrap_servers=dep.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=800)
    try:
        if not consumer.partitions_for_topic(topic + ".dlq"):
            return []
        consumer.subscribe([topic + ".dlq"])
        return list(consumer)
    finally:
        consumer.close()


# both clients on a single node, kafka-python also in the cluster (the broker side
# is the same for both clients; the suite stays short)
@pytest.mark.parametrize(("gbroker", "client"), [("single", "kafka-python"),
                                                 ("single", "confluent"),
                                                 ("rf1", "kafka-python")], indirect=["gbroker"])
def test_a_failing_record_is_retried_with_backoff_then_dead_lettered(
        gbroker: Deployment, client: str) -> None:
    topic = _setup(gbroker)
    seen = _Seen()
    run = _kafka_python if client == "kafka-python" else _confluent
    run(gbroker, topic, seen, lambda: len(seen.nacked_at) >= 4)
    bad = [row for row in seen.rows if row[4] == b"bad"]
    assert [(row[1], row[5].get("kc-attempt")) for row in bad] == [
        (topic, None), (topic + ".retry", b"1"), (topic + ".retry", b"2"),
        (topic + ".retry", b"3")], bad
    original = bad[0]
    for n, (row, nacked) in enumerate(zip(bad[1:], seen.nacked_at, strict=False), start=1):
        waited = row[0] - nacked
        backoff_s = BACKOFF_MS * 2 ** (n - 1) / 1000
        assert backoff_s - SLACK_EARLY_S <= waited <= backoff_s + LATE_BOUND_S, (n, waited)
    good = sorted(row[4] for row in seen.rows if row[4] != b"bad")
    assert good == [b"good-%d" % i for i in range(5)]  # once each, never retried

    deadline = time.monotonic() + 20
    letters = _dead_letters(gbroker, topic)
    while not letters and time.monotonic() < deadline:
        time.sleep(0.3)
        letters = _dead_letters(gbroker, topic)
    assert len(letters) == 1
    letter = letters[0]
    h = {k: v for k, v in letter.headers}
    assert (letter.key, letter.value) == (b"bad", b"poison")
    assert h["kc-dlq-original-topic"] == topic.encode()
    assert h["kc-dlq-original-partition"] == b"%d" % original[2]
    assert h["kc-dlq-original-offset"] == b"%d" % original[3]
    assert h["kc-dlq-attempts"] == b"3" and h["kc-dlq-error"] == b"boom"
    assert h["kafka_dlt-original-topic"] == topic.encode()
    assert struct.unpack(">i", h["kafka_dlt-original-partition"]) == (original[2],)
    assert struct.unpack(">q", h["kafka_dlt-original-offset"]) == (original[3],)
    assert h["kafka_dlt-exception-message"] == b"boom"
    assert letter.partition == original[2]  # dead letters keep their partition

    replay = subprocess.run(
        [sys.executable, "-m", "kcompat", "dlq", "replay", topic + ".dlq", "--execute",
         "--json", "--bootstrap-server", gbroker.bootstrap],
        capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["executed"] is True
    consumer = KafkaConsumer(topic, bootstrap_servers=gbroker.bootstrap,
                             auto_offset_reset="earliest")
    back: list[Any] = []
    try:
        deadline = time.monotonic() + 20
        while len(back) < 2 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                back += [r for r in records if r.key == b"bad"]
    finally:
        consumer.close()
    assert len(back) == 2 and back[1].partition == original[2]
    assert back[1].offset > original[3] and back[1].value == b"poison"
    assert not [k for k, _v in back[1].headers if k.startswith(("kc-", "kafka_dlt-"))]
