"""Restart with a delayed backlog after a long history (issue 31: bounded state).

One node, defaults. First ``--delivered`` records with ``kc-delay-ms`` 1,000 are
produced and delivered (the history), then ``--pending`` records with a delay of
an hour (the backlog), confluent-kafka, acks=all, linger 5 ms, 100 B values, to
a 6-partition topic. Then: the bytes of ``__kc_schedule`` on disk and its log
starts, a kill -9 and a start on the same data dir, and

* restart-to-ready: start until the broker's ready line;
* Metadata and produce: until a Metadata request and an acks=all produce of a
  plain record are answered;
* schedule loaded: until every schedule partition logged "delivering N
  scheduled records" (its leader holds the whole schedule again);
* delivery resumed: until a record produced after the restart with
  ``kc-delay-ms`` 1 arrives at a consumer;

and the disk bytes after the restart. ``--no-results``: do not append to
bench/RESULTS.md.

    .venv/bin/python bench/schedule_restart.py --delivered 2000000 --pending 1000000
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.compare import publish  # noqa: E402
from compat_tests._broker import Broker, unique_topic  # noqa: E402
from kcompat.broker.controller.internal_topics import partition_for  # noqa: E402

PARTITIONS = 6


def produce(bootstrap: str, topic: str, count: int, delay_ms: int) -> float:
    """Records/s of ``count`` delayed records, acks=all."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "queue.buffering.max.messages": 500_000})
    headers = [("kc-delay-ms", b"%d" % delay_ms)]
    value = b"v" * 100
    start = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, key=b"%d" % i, partition=i % PARTITIONS,
                                 headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(600)
    if left:
        raise RuntimeError(f"{left} records not acknowledged")
    return count / (time.monotonic() - start)


def schedule_disk(data_dir: Path) -> int:
    return sum(f.stat().st_size for d in data_dir.glob("__kc_schedule-*")
               for f in d.iterdir() if f.is_file())


def log_starts(bootstrap: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-starts"})
    try:
        meta = consumer.list_topics("__kc_schedule", timeout=10)
        parts = sorted(meta.topics["__kc_schedule"].partitions)
        return [consumer.get_watermark_offsets(TopicPartition("__kc_schedule", p),
                                               timeout=10)[0] for p in parts]
    finally:
        consumer.close()


def loaded_lines(broker: Broker, since: int) -> int:
    text = broker.tail(100_000)
    return len(re.findall(r"delivering \d+ scheduled records", text)) - since


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delivered", type=int, default=2_000_000)
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    from confluent_kafka import Consumer, Producer

    work = Path(tempfile.mkdtemp(prefix="kc-restart-"))
    broker = Broker(work / "broker", extra_args=("--set", "admin.port=-1")).start()
    try:
        topic = unique_topic("backlog")
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        history_rate = produce(broker.bootstrap, topic, args.delivered, 1_000)
        pending_rate = produce(broker.bootstrap, topic, args.pending, 3_600_000)
        time.sleep(10)  # the last snapshot check passes
        disk_before = schedule_disk(broker.data_dir)
        starts = log_starts(broker.bootstrap)
        before = len(re.findall(r"delivering \d+ scheduled records", broker.tail(100_000)))
        # the schedule partitions holding the backlog (each logs its count when it leads)
        holding = len({partition_for(f"{topic}-{i}", len(starts)) for i in range(PARTITIONS)})
        broker.kill()
        t0 = time.monotonic()
        broker.start(timeout=300)
        ready = time.monotonic() - t0
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        acked: list[float] = []
        producer.produce(topic, b"plain", partition=0,
                         on_delivery=lambda e, m: acked.append(time.monotonic()))
        producer.flush(120)
        produce_s = acked[0] - t0 if acked else float("nan")
        probe = f"probe-{time.time()}".encode()
        producer.produce(topic, b"probe", key=probe, partition=1, headers=[("kc-delay-ms", b"1")])
        producer.flush(120)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-probe",
                             "auto.offset.reset": "latest"})
        from confluent_kafka import TopicPartition
        consumer.assign([TopicPartition(topic, 1, int(
            consumer.get_watermark_offsets(TopicPartition(topic, 1))[1]) - 2)])
        resumed = loaded = float("nan")
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and (resumed != resumed or loaded != loaded):
            msg = consumer.poll(0.2)
            now = time.monotonic() - t0
            if msg is not None and not msg.error() and msg.key() == probe and resumed != resumed:
                resumed = now
            if loaded != loaded and loaded_lines(broker, before) >= holding:
                loaded = now
        consumer.close()
        disk_after = schedule_disk(broker.data_dir)
        load = os.getloadavg()
        lines = [
            f"\n## Restart with a delayed backlog (bounded schedule log) — "
            f"{time.strftime('%Y-%m-%d %H:%M')}\n",
            f"`bench/schedule_restart.py --delivered {args.delivered} --pending {args.pending}`"
            f" — one node, defaults; load average at the end {load[0]:.2f} / {load[1]:.2f} "
            f"(1 / 5 min, 2 cores).\n",
            f"* history produce {history_rate:,.0f} records/s (delay 1 s), backlog produce "
            f"{pending_rate:,.0f} records/s (delay 1 h)",
            f"* `__kc_schedule` on disk before the kill: {disk_before / 1e6:,.1f} MB "
            f"(log starts {starts}); after the restart: {disk_after / 1e6:,.1f} MB",
            f"* kill -9, then: ready {ready:.1f} s, plain produce acknowledged {produce_s:.1f} s, "
            f"every schedule partition loaded {loaded:.1f} s, a 1 ms-delayed record "
            f"delivered {resumed:.1f} s after the start",
        ]
        publish(lines, append=not args.no_results)
        return 0
    finally:
        broker.close()


if __name__ == "__main__":
    sys.exit(main())
