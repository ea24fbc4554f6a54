"""librdkafka reading a topic whose recent records are all delayed sees no
error event: Fetch answers never give it record-less batches only
(``kcompat.broker.storage.hole_reads``). Before, each such answer doubled the
consumer's partition fetch size and, from the eleventh, it reported
MSG_SIZE_TOO_LARGE ("Message at offset N might be too large to fetch"), as the
1M delayed soak showed (76 on the delayed topic's consumer)."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer

from compat_tests._broker import Broker, unique_topic
from compat_tests._cluster import Cluster
from compat_tests.confluent._helpers import create_topic
from tests.integration._hole_reader import spawn, values_read

BATCHES = 24  # each one delayed record: a batch stored holding no record
DELAY_MS = 8_000  # all of them delivered after the last was produced


def test_librdkafka_reads_a_tail_of_hole_batches_without_an_error(
        broker: Broker, tmp_path: Path) -> None:
    topic = unique_topic("holes")
    create_topic(broker.bootstrap, topic, partitions=1)
    _read_a_tail_of_holes(broker.bootstrap, topic, tmp_path)


def test_librdkafka_reads_a_tail_of_hole_batches_at_rf3_without_an_error(
        tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster")
    try:
        cluster.start()
        topic = unique_topic("holes3")
        cluster.create_topic(topic, 1, 3)
        _read_a_tail_of_holes(cluster.bootstrap, topic, tmp_path)
    finally:
        cluster.close()


def _read_a_tail_of_holes(bootstrap: str, topic: str, tmp_path: Path) -> None:
    """A reader at the log end while BATCHES batches of one delayed record
    each are stored holding no record, then a plain record and the deliveries."""
    out = str(tmp_path / "reader.json")
    want = BATCHES + 1
    reader = spawn(bootstrap, topic, want, out, 60)
    try:
        deadline = time.monotonic() + 30
        while not Path(out + ".ready").exists():
            assert reader.poll() is None and time.monotonic() < deadline, "reader never fetched"
            time.sleep(0.05)
        time.sleep(0.5)  # at the log end, long-polling
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 0})
        for i in range(BATCHES):  # each read at the tail as a batch without records
            p.produce(topic, b"delayed-%d" % i, partition=0,
                      headers=[("kc-delay-ms", b"%d" % DELAY_MS)])
            p.flush(10)
            time.sleep(0.1)
        p.produce(topic, b"plain", partition=0)
        assert p.flush(10) == 0
        assert reader.wait(90) == 0
    finally:
        if reader.poll() is None:
            reader.kill()
    got = values_read(out)
    assert sorted(got) == sorted(["plain"] + [f"delayed-{i}" for i in range(BATCHES)])


def test_a_consumer_gets_past_a_tail_of_hole_batches(broker: Broker) -> None:
    """Record-less batches nothing follows (records delayed for an hour) are
    held back a while (``hole_reads.TAIL_HOLD_S``), then answered: a consumer
    reading from them reaches the high watermark, as a read up to it expects
    (Spark, read-to-end loops)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = unique_topic("tailholes")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    for i in range(3):
        producer.send(topic, b"later-%d" % i, partition=0,
                      headers=[("kc-delay-ms", b"3600000")]).get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    try:
        end = consumer.end_offsets([tp])[tp]
        assert end == 3
        seen = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"position {consumer.position(tp)} of {end}"
            for records in consumer.poll(timeout_ms=200).values():
                seen += [r.value for r in records]
        assert seen == []
    finally:
        consumer.close()
