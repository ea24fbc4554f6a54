"""Large batches of delayed records are split in the broker's CPU worker
process, on another core (``broker.cpu_process``): started on the first
such batch, it takes the next ones; their records are delivered exactly once
with ``kc-scheduled-offset`` naming their holes; a bad header in such a
batch is refused with its message; and a worker killed (kill -9) between
batches costs nothing — the next batch is split in a thread, and the worker
starts again and takes the one after."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaConsumer
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from compat_tests._broker import Broker, free_port, unique_topic
from tests.integration._raw import RawConnection
from tests.integration.test_admin_http import Admin, create_topic, value

PD = ProduceRequest.TopicProduceData
RECORDS = 1000  # per batch: about 130 kB, past the process's 32 kB threshold
INVALID_RECORD = 87


def _batch(tag: int, delay: bytes = b"300", bad_at: int = -1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 22)
    now = int(time.time() * 1000)
    for i in range(RECORDS):
        b.append(i, timestamp=now, key=b"%d-%d" % (tag, i), value=b"v" * 100,
                 headers=[("kc-delay-ms", b"abc" if i == bad_at else delay)])
    return bytes(b.build())


def _produce(conn: RawConnection, topic: str, records: bytes) -> tuple[int, int, str | None]:
    req = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        PD(name=topic, partition_data=[PD.PartitionProduceData(index=0, records=records)])])
    answer = conn.request(req, ProduceResponse[9]).responses[0].partition_responses[0]
    return int(answer.error_code), int(answer.base_offset), answer.error_message


def _workers(broker: Broker) -> list[int]:
    """The broker's CPU worker processes (its children running cpu_worker)."""
    assert broker.proc is not None
    found = []
    for task in Path(f"/proc/{broker.proc.pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if b"kcompat.broker.cpu_worker" in cmdline:
                found.append(int(child))
    return found


def _until(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_large_delayed_batches_are_split_by_the_cpu_worker_and_delivered_once(
        tmp_path: Path) -> None:
    port = free_port()
    broker = Broker(tmp_path / "broker", extra_args=("--set", f"admin.port={port}")).start()
    admin = Admin(port)
    conn = RawConnection(broker.bootstrap)
    try:
        topic = unique_topic("cpuworker")
        create_topic(broker, topic)
        assert _workers(broker) == [], "no worker before a delayed batch wants one"
        stored = {}  # base offset of each batch stored
        code, stored[0], _ = _produce(conn, topic, _batch(0))  # in a thread; starts the worker
        assert code == 0
        _until("the worker started", lambda: value(admin.samples(), "kcompat_cpu_worker_up") == 1)
        assert len(_workers(broker)) == 1
        code, stored[1], _ = _produce(conn, topic, _batch(1))
        assert code == 0
        samples = admin.samples()
        assert value(samples, "kcompat_cpu_worker_splits_total") == 1
        assert value(samples, "kcompat_cpu_worker_moved_records_total") == RECORDS

        # a bad header: the whole batch refused, the reason named, the worker kept
        code, _, message = _produce(conn, topic, _batch(9, bad_at=RECORDS // 2))
        assert code == INVALID_RECORD and message is not None and "kc-delay-ms" in message
        assert value(admin.samples(), "kcompat_cpu_worker_up") == 1

        [first] = _workers(broker)
        os.kill(first, signal.SIGKILL)
        _until("the worker's death seen", lambda: first not in _workers(broker))
        code, stored[2], _ = _produce(conn, topic, _batch(2))  # a thread again
        assert code == 0
        _until("a new worker", lambda: len(_workers(broker)) == 1
               and value(admin.samples(), "kcompat_cpu_worker_up") == 1)
        assert value(admin.samples(), "kcompat_cpu_worker_starts_total") == 2
        [second] = _workers(broker)
        code, stored[3], _ = _produce(conn, topic, _batch(3))
        assert code == 0
        assert value(admin.samples(), "kcompat_cpu_worker_splits_total") == 2

        consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                 auto_offset_reset="earliest", consumer_timeout_ms=1000)
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 4 * RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got += records
        consumer.close()
        keys = sorted(r.key for r in got)
        assert keys == sorted(b"%d-%d" % (tag, i) for tag in range(4) for i in range(RECORDS))
        for r in got:  # each names its hole: the offset its producer's batch gave it
            tag, i = map(int, r.key.split(b"-"))
            assert dict(r.headers)["kc-scheduled-offset"] == b"%d" % (stored[tag] + i)
    finally:
        conn.close()
        broker.close()
    _until("the worker ends with its broker", lambda: not Path(f"/proc/{second}").exists(), 10)
