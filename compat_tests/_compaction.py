"""Helpers of the log-compaction suites (``test_compaction.py``, the Java
differential test, ``bench/compaction.py``).

- ``produce`` writes (key, value) pairs with kafka-python and returns the offset
  the broker acknowledged for each.
- ``read_partition`` reads a partition from its log start to the high watermark
  with kafka-python, as a fresh consumer would (offset, key, value).
- ``stored_records`` decodes a replica's segment files straight from a data dir
  with kafka-python's ``MemoryRecords`` (CRC checked): what is on disk, control
  batches included — the proof that every replica cleaned the same way.
- ``latest_per_key`` is the expected view of a compacted log: below the cleaned
  point the latest record of each key at the offset it was written, above it
  every record.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Item = tuple[int, bytes | None, bytes | None]  # (offset, key, value)


@dataclass(frozen=True)
class StoredRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    control: bool
    transactional: bool
    producer_id: int


def create_topic(bootstrap: str, name: str, configs: dict[str, str], partitions: int = 1,
                 replication: int = 1, assignment: list[list[int]] | None = None) -> None:
    """CreateTopics (confluent-kafka); ``assignment``: the replicas of each
    partition, the first one its preferred leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    new = NewTopic(name, partitions, replication, config=configs) if assignment is None \
        else NewTopic(name, len(assignment), replica_assignment=assignment, config=configs)
    futures = admin.create_topics([new], operation_timeout=20, request_timeout=20)
    futures[name].result(timeout=30)


def alter_topic(bootstrap: str, name: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET of topic configs (confluent-kafka)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)


def produce(bootstrap: str, topic: str, pairs: Iterable[tuple[bytes, bytes | None]],
            partition: int = 0, **config: Any) -> list[Item]:
    """Send every pair (kafka-python, acks=all, batched); (offset, key, value) of each.
    Batches of at most 2 KiB: a batch larger than the topic's segment size is
    RECORD_LIST_TOO_LARGE, on Kafka as on kcompat."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             batch_size=2048, **config)
    try:
        sent = [(producer.send(topic, key=k, value=v, partition=partition), k, v)
                for k, v in pairs]
        producer.flush(timeout=60)
        return [(f.get(timeout=30).offset, k, v) for f, k, v in sent]
    finally:
        producer.close(timeout=10)


def read_partition(bootstrap: str, topic: str, partition: int = 0,
                   isolation_level: str = "read_uncommitted",
                   timeout_s: float = 30.0) -> tuple[list[Item], int]:
    """Every record from the log start up to the end offset when reading started
    (the last stable offset for read_committed), and that end offset."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, partition)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level=isolation_level, fetch_max_wait_ms=100)
    try:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning(tp)
        out: list[Item] = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, \
                f"read {len(out)} records, position {consumer.position(tp)} of end {end}"
            for recs in consumer.poll(timeout_ms=200).values():
                out.extend((r.offset, r.key, r.value) for r in recs)
        return out, end
    finally:
        consumer.close()


def latest_per_key(written: Sequence[Item], cleaned_to: int,
                   drop_tombstones: bool = True) -> list[Item]:
    """A compacted log's expected content: below ``cleaned_to`` only the last
    record of each key (a tombstone too, unless ``drop_tombstones``), from
    ``cleaned_to`` on every record; sorted by offset."""
    last: dict[bytes | None, Item] = {}
    for item in written:
        if item[0] < cleaned_to:
            last[item[1]] = item
    kept = [i for i in last.values() if i[2] is not None or not drop_tombstones]
    return sorted(kept + [i for i in written if i[0] >= cleaned_to])


def segment_bases(pdir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in pdir.glob("*.log"))


def stored_records(pdir: Path) -> list[StoredRecord]:
    """Every record of a partition directory's segment files, decoded by
    kafka-python (CRC of each batch checked)."""
    from kafka.record.memory_records import MemoryRecords

    out: list[StoredRecord] = []
    for base in segment_bases(pdir):
        data = (pdir / f"{base:020d}.log").read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            if length <= 0 or data[pos + 16] != 2:
                break  # a zero tail
            records = MemoryRecords(data[pos:pos + 12 + length])
            batch = records.next_batch()
            assert batch is not None and batch.validate_crc(), f"bad batch at {pdir}/{base}+{pos}"
            for r in batch:
                out.append(StoredRecord(r.offset, r.key, r.value, batch.is_control_batch,
                                        batch.is_transactional, batch.producer_id))
            pos += 12 + length
    return out


def wait_for(check: Callable[[], Any], timeout_s: float, what: str,
             interval_s: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy; its last falsy answer
    (or exception) is in the failure message. A segment file gone between
    listing a directory and reading it (the cleaner swapped it) is polled
    again, like a failed assertion."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (AssertionError, FileNotFoundError) as e:
            last = e
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s; last: {str(last)[:2000]}")


def produce_fast(bootstrap: str, topic: str, pairs: Iterable[tuple[bytes, bytes | None]],
                 partition: int = 0) -> list[Item]:
    """``produce`` through confluent-kafka (librdkafka: bulk loads)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 256 * 1024, "log_level": 0})
    out: list[Item] = []
    errors: list[Any] = []

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            out.append((msg.offset(), msg.key(), msg.value()))

    for k, v in pairs:
        while True:
            try:
                producer.produce(topic, key=k, value=v, partition=partition, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0, "records left unsent"
    assert not errors, errors[:3]
    return sorted(out)


def read_partition_fast(bootstrap: str, topic: str, partition: int = 0,
                        timeout_s: float = 60.0) -> tuple[list[Item], int]:
    """``read_partition`` through confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader",
                         "enable.auto.commit": False, "log_level": 0,
                         "enable.partition.eof": True})
    try:
        _low, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING
        out: list[Item] = []
        deadline = time.monotonic() + timeout_s
        position = 0
        while position < end:
            assert time.monotonic() < deadline, f"read {len(out)} records of end {end}"
            for msg in consumer.consume(10000, 0.5):
                if msg.error() is None:
                    out.append((msg.offset(), msg.key(), msg.value()))
                    position = msg.offset() + 1
                else:
                    position = max(position, consumer.position(
                        [TopicPartition(topic, partition)])[0].offset)
        return out, end
    finally:
        consumer.close()
