"""A full disk, for real: a broker process whose data directory is a small
tmpfs the test mounts (8 MiB), filled by a confluent-kafka producer.

What must hold (docs/architecture.md, principle 10, ``kcompat.broker.replication.disk_faults``):
once the disk is full, produce answers KAFKA_STORAGE_ERROR (librdkafka
reports ``KafkaError.KAFKA_STORAGE_ERROR``, code 56, with retries off), the
broker process stays up, Metadata still answers with the partition's leader,
a consumer still reads every acknowledged record, and
``kcompat_storage_errors_total{kind="enospc"}`` counts the failures
(``kcompat_storage_offline_partitions`` the partition); when a
filler file is deleted, produce succeeds again after the backoff, and every
acknowledged record — before and after — is read back. Before the fix the
first failed write took the broker down.

Needs root (mount). Skipped, naming the refusal, where mounting is refused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from ._broker import unique_topic
from ._dedup import AdminBroker
from .confluent._helpers import admin_client, create_topic

DISK_BYTES = 8 << 20
VALUE_BYTES = 16 << 10
LEFT_FREE = 1_500_000  # what the filler file leaves for the producer to fill


def _mount_tmpfs(target: Path, size: int) -> None:
    """mount -t tmpfs -o size=SIZE; OSError (its errno's text) if refused."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    done = libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", 0,
                      f"size={size},mode=0755".encode())
    if done != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount -t tmpfs on {target}: {os.strerror(code)}")


def _unmount(target: Path) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.umount2(str(target).encode(), 0) != 0:
        subprocess.run(["umount", "-l", str(target)], check=False)  # still busy: lazily


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        _mount_tmpfs(disk, DISK_BYTES)
    except OSError as e:
        pytest.skip(f"cannot mount a size-limited tmpfs: {e}")
    try:
        yield disk
    finally:
        _unmount(disk)


def _producer(bootstrap: str, retries: int) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": retries,
                     "enable.idempotence": False, "linger.ms": 0,
                     "message.timeout.ms": 10_000, "retry.backoff.ms": 200})


def _produce(producer: Producer, topic: str, values: list[bytes]
             ) -> tuple[list[bytes], list[KafkaError]]:
    """Send ``values`` and wait for each delivery report: (acked, errors)."""
    acked: list[bytes] = []
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]
        else:
            errors.append(err)

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=report)
    producer.flush(30)
    return acked, errors


def _read_all(bootstrap: str, topic: str) -> set[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"),
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        seen: set[bytes] = set()
        deadline = time.monotonic() + 30
        position = 0
        while position < end and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            seen.add(msg.value())
            position = msg.offset() + 1
        assert position >= end, f"read to {position} of {end}"
        return seen
    finally:
        consumer.close()


def test_a_full_disk_refuses_writes_serves_reads_and_recovers(
        small_disk: Path, tmp_path: Path) -> None:
    broker = AdminBroker(tmp_path / "broker")
    broker.data_dir = small_disk / "data"  # the log on the small disk, the broker's log not
    b = broker.start()
    try:
        topic = unique_topic("full")
        create_topic(b.bootstrap, topic, partitions=1)
        filler = small_disk / "filler"
        free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
        with open(filler, "wb") as f:
            f.write(b"\0" * max(0, free - LEFT_FREE))
        producer = _producer(b.bootstrap, retries=0)
        acked: list[bytes] = []
        refused: list[KafkaError] = []
        n = 0
        while not refused and n < 400:  # ~1.5 MB of room in 16 KiB records
            values = [b"%06d" % (n + i) + b"x" * VALUE_BYTES for i in range(10)]
            n += 10
            ok, errors = _produce(producer, topic, values)
            acked += ok
            refused += errors
        assert refused, f"the disk never filled ({len(acked)} records acknowledged)"
        assert refused[0].code() == KafkaError.KAFKA_STORAGE_ERROR, refused[0]
        assert acked, "nothing was acknowledged before the disk filled"
        assert b.running, "the broker stopped on a full disk"
        # the control plane and reads carry on
        md = admin_client(b.bootstrap).list_topics(topic=topic, timeout=10)
        assert md.topics[topic].error is None and md.topics[topic].partitions[0].leader >= 0
        assert set(acked) <= _read_all(b.bootstrap, topic)
        assert b.metric("kcompat_storage_errors_total", kind="enospc", op="write") >= 1
        assert b.metric("kcompat_storage_offline_partitions") >= 1
        # still full: still refused, still running
        _ok, again = _produce(producer, topic, [b"still-full" + b"x" * VALUE_BYTES])
        assert [e.code() for e in again] == [KafkaError.KAFKA_STORAGE_ERROR]
        # space returns: the next attempt after the backoff succeeds
        filler.unlink()
        retrying = _producer(b.bootstrap, retries=20)
        after, failed = _produce(retrying, topic, [b"after-%d" % i for i in range(20)])
        assert not failed and len(after) == 20, failed
        acked += after
        assert b.running
        assert b.metric("kcompat_storage_offline_partitions") == 0
        assert set(acked) <= _read_all(b.bootstrap, topic)
        # and after a restart, from the disk
        b.restart()
        assert set(acked) <= _read_all(b.bootstrap, topic)
    finally:
        broker.close()
