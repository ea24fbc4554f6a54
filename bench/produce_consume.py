"""Benchmark: produce then consume N bytes of 1 KiB records with confluent-kafka.

Not a test: it prints figures and appends them to bench/RESULTS.md.

    .venv/bin/python bench/produce_consume.py                 # 1 GiB, own broker
    .venv/bin/python bench/produce_consume.py --total-mib 128 # quicker
    .venv/bin/python bench/produce_consume.py --bootstrap 127.0.0.1:9092

Without --bootstrap it starts a kcompat broker subprocess on a free port with a
temporary data directory (default flush mode: fsync before acks=all acks).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compat_tests._broker import Broker, unique_topic  # noqa: E402


def produce(bootstrap: str, topic: str, partitions: int, count: int, size: int,
            acks: str) -> float:
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
        "batch.size": 65536, "queue.buffering.max.kbytes": 1048576,
        "queue.buffering.max.messages": 1000000,
    })
    payload = os.urandom(size)
    failures = []

    def on_delivery(err, _msg):  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} deliveries failed, first: {failures[0]}")
    return elapsed


def consume(bootstrap: str, topic: str, partitions: int, count: int) -> float:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
        "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    start = time.perf_counter()
    deadline = start + 600
    while seen < count and time.perf_counter() < deadline:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if seen < count:
        raise SystemExit(f"consumed only {seen} of {count} records")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap")
    ap.add_argument("--total-mib", type=int, default=1024)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--acks", default="all")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    args = ap.parse_args()
    count = args.total_mib * 1024 * 1024 // args.record_bytes
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = Broker(Path(tempfile.mkdtemp(prefix="kcompat-bench-"))).start()
        bootstrap = broker.bootstrap
    try:
        topic = unique_topic("bench")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        p_s = produce(bootstrap, topic, args.partitions, count, args.record_bytes, args.acks)
        c_s = consume(bootstrap, topic, args.partitions, count)
    finally:
        if broker is not None:
            broker.stop()
    mib = count * args.record_bytes / (1024 * 1024)
    lines = [
        f"produce: {mib / p_s:8.1f} MiB/s {count / p_s:10.0f} records/s "
        f"({count} x {args.record_bytes} B, acks={args.acks}, {args.partitions} partition(s))",
        f"consume: {mib / c_s:8.1f} MiB/s {count / c_s:10.0f} records/s",
    ]
    print("\n".join(lines))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    with open(args.results, "a") as f:
        f.write(f"\n## bench/produce_consume.py — {stamp}\n\n")
        f.write(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
                f"{platform.python_version()}; broker: kcompat single node, "
                f"flush mode acks_all; client: confluent-kafka (librdkafka), 1 process.\n")
        f.write(f"Command: `{' '.join(sys.argv)}`\n\n```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
