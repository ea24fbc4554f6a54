"""Differential: log compaction on Apache Kafka 4.4 and on kcompat (issue 18 item 1).

The same batches (kafka-python's ``DefaultRecordBatchBuilder``, sent by raw
Produce requests, so both logs get byte-identical batches and roll their
256 KiB segments at the same offsets: ``internal.segment.bytes``, the internal
key Kafka's own tests use, since ``segment.bytes`` is at least 1 MiB) go to a
compacted topic on both brokers: many versions of 200 keys, some tombstones,
~1 MiB. Once each broker's cleaner
has run (Kafka's with ``log.cleaner.backoff.ms`` set to 200 ms as a dynamic
cluster-wide config, kcompat's by flag), a consumer reading from the beginning
gets the same (offset, key, value) list from both — the latest record of every
key below the active segment at its original offset, tombstones kept (a long
``delete.retention.ms``), every record of the active segment — and both logs
end at the same offset. That list is also checked against the one the
produced sequence implies, so the two brokers cannot agree on a wrong answer.

DeleteRecords on a compact-only topic: both answer POLICY_VIOLATION with low
watermark -1 and delete nothing; on ``compact,delete`` both delete.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
)

from compat_tests._broker import Broker, running, unique_topic
from compat_tests._compaction import (
    Item,
    create_topic,
    latest_per_key,
    read_partition_fast,
    segment_bases,
    wait_for,
)
from compat_tests.java._differential import BROKER, incremental_alter, produce_batch, record_batch
from compat_tests.java.kafka_reference import KafkaReference
from tests.integration._raw import RawConnection

BACKOFF = "log.cleaner.backoff.ms"
SEGMENT = 256 << 10
CONFIGS = {"cleanup.policy": "compact", "internal.segment.bytes": str(SEGMENT),
           "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "600000"}
BATCHES, PER_BATCH, KEYS = 10, 100, 200


@pytest.fixture(scope="module")
def cleaning_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from running(Broker(tmp_path_factory.mktemp("compaction-diff"),
                              extra_args=("--admin-port", "-1", "--set", f"{BACKOFF}=200")))


def _set_backoff(bootstrap: str, value: str | None) -> None:
    """The cluster-wide dynamic default of ``log.cleaner.backoff.ms`` (None: delete it)."""
    op = 0 if value is not None else 1  # SET, DELETE
    error, message = incremental_alter(bootstrap, "", [(BACKOFF, op, value)], False, BROKER)
    assert error == 0, message


def _batches() -> list[list[tuple[bytes, bytes | None]]]:
    rnd = random.Random(18)
    out = []
    for b in range(BATCHES):
        batch: list[tuple[bytes, bytes | None]] = []
        for i in range(PER_BATCH):
            key = b"key-%03d" % rnd.randrange(KEYS)
            value = None if rnd.random() < 0.05 else (b"v%d.%d-" % (b, i)).ljust(1000, b"x")
            batch.append((key, value))
        out.append(batch)
    return out


def _produce(bootstrap: str, topic: str, batches: list[list[tuple[bytes, bytes | None]]]
             ) -> list[Item]:
    conn = RawConnection(bootstrap, timeout=20)
    written: list[Item] = []
    now = int(time.time() * 1000)
    try:
        for batch in batches:
            part = produce_batch(conn, topic, record_batch(batch, now))
            assert part.error_code == 0, part
            written += [(part.base_offset + i, k, v) for i, (k, v) in enumerate(batch)]
    finally:
        conn.close()
    return written


def _cleaned(bootstrap: str, topic: str, pdir: Path, written: list[Item]) -> tuple[list[Item], int]:
    def check() -> tuple[list[Item], int]:
        got, end = read_partition_fast(bootstrap, topic)
        active = segment_bases(pdir)[-1]
        assert active > 0, f"{pdir}: no segment rolled"
        want = latest_per_key(written, active, drop_tombstones=False)
        assert got == want, f"{bootstrap}: {len(got)} records read, {len(want)} expected"
        return got, active
    return wait_for(check, 25, f"{topic} compacted on {bootstrap}", interval_s=0.5)


def test_compacted_log_reads_the_same_as_kafka(kafka_reference: KafkaReference,
                                               cleaning_broker: Broker) -> None:
    topic = unique_topic("compact-diff")
    batches = _batches()
    _set_backoff(kafka_reference.bootstrap, "200")
    try:
        results = {}
        for name, bootstrap, data_dir in (
                ("kafka", kafka_reference.bootstrap, kafka_reference.data_dir),
                ("kcompat", cleaning_broker.bootstrap, cleaning_broker.data_dir)):
            create_topic(bootstrap, topic, CONFIGS)
            written = _produce(bootstrap, topic, batches)
            assert [o for o, _k, _v in written] == list(range(BATCHES * PER_BATCH))
            results[name] = (written, data_dir / f"{topic}-0", bootstrap)
        views = {name: _cleaned(bootstrap, topic, pdir, written)
                 for name, (written, pdir, bootstrap) in results.items()}
    finally:
        _set_backoff(kafka_reference.bootstrap, None)
    (kafka_view, kafka_active), (ours, our_active) = views["kafka"], views["kcompat"]
    assert our_active == kafka_active, "the segments rolled at other offsets"
    assert kafka_active >= 2 * SEGMENT // 1030, "fewer than two segments cleaned"
    assert ours == kafka_view
    assert len(ours) < BATCHES * PER_BATCH // 2
    assert any(v is None for _o, _k, v in ours), "no tombstone kept (delete.retention.ms)"


def _delete_records(bootstrap: str, topic: str, offset: int) -> tuple[int, int]:
    R = DeleteRecordsRequest
    req = R(version=2, timeout_ms=10_000, topics=[R.DeleteRecordsTopic(
        name=topic, partitions=[R.DeleteRecordsTopic.DeleteRecordsPartition(
            partition_index=0, offset=offset)])])
    conn = RawConnection(bootstrap, timeout=20)
    try:
        part = conn.request(req, DeleteRecordsResponse[2]).topics[0].partitions[0]
    finally:
        conn.close()
    return part.error_code, part.low_watermark


def test_delete_records_policy_as_kafka(kafka_reference: KafkaReference,
                                        cleaning_broker: Broker) -> None:
    answers: dict[str, list[tuple[int, int]]] = {}
    for name, bootstrap in (("kafka", kafka_reference.bootstrap),
                            ("kcompat", cleaning_broker.bootstrap)):
        answers[name] = []
        for policy in ("compact", "compact,delete"):
            topic = unique_topic("compact-dr")
            create_topic(bootstrap, topic, {"cleanup.policy": policy})
            _produce(bootstrap, topic, [[(b"k%d" % i, b"v") for i in range(5)]])
            answers[name] += [_delete_records(bootstrap, topic, 3),
                              _delete_records(bootstrap, topic, -1)]
    assert answers["kcompat"] == answers["kafka"]
    assert answers["kafka"][0] == (44, -1)  # POLICY_VIOLATION
