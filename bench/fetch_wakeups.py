"""Produce next to idle long-polling consumers: the cost of waking fetches.

Not a test: it prints a table and appends it to bench/RESULTS.md.

    .venv/bin/python bench/fetch_wakeups.py
    .venv/bin/python bench/fetch_wakeups.py --tree /tmp/old-kcompat   # another source tree

One kcompat broker (bench/compare.py's flags) and ``--idle`` long-polling
consumers of an idle topic of 4 partitions (a separate process keeps each of
its connections waiting in a Fetch of max_wait 500 ms, min_bytes 1, at the end
of its partition, sending the next one as soon as one is answered — what idle
consumers do). Kafka's ProducerPerformance then writes ``--records`` 1 KiB
records (acks=1, ``batch.size=65536 linger.ms=5``) to another topic, once with
the idle consumers and once without; the figures are its records/s and the
broker's CPU seconds per GiB produced. ``--tree`` runs the broker from another
checkout of kcompat (e.g. the commit before per-partition wake-ups, where
every append woke every waiting fetch).
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import selectors
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from compare import (  # noqa: E402
    KCOMPAT_ARGS,
    create_topic,
    loadavg,
    machine,
    proc_cpu_s,
    producer_perf,
)

from compat_tests._broker import Broker, unique_topic  # noqa: E402

IDLE_PARTITIONS = 4


def _fetch_frame(topic: str, partition: int, cid: int) -> bytes:
    from kafka.protocol.consumer.fetch import FetchRequest
    ft = FetchRequest.FetchTopic
    req = FetchRequest[12](
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[ft(topic=topic, partitions=[ft.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20)])])
    req.with_header(correlation_id=cid, client_id="idle")
    payload = bytes(req.encode(header=True))
    return struct.pack(">i", len(payload)) + payload


def idle_consumers(bootstrap: str, topic: str, count: int, stop: object) -> None:
    """``count`` connections, each always waiting in a Fetch at the end of its partition."""
    host, port = bootstrap.rsplit(":", 1)
    sel = selectors.DefaultSelector()
    frames = {}
    for i in range(count):
        s = socket.create_connection((host, int(port)))
        frames[s] = _fetch_frame(topic, i % IDLE_PARTITIONS, i)
        s.sendall(frames[s])
        sel.register(s, selectors.EVENT_READ, bytearray())
    while not stop.is_set():  # type: ignore[attr-defined]
        for key, _ev in sel.select(0.2):
            s, buf = key.fileobj, key.data
            data = s.recv(65536)  # type: ignore[union-attr]
            if not data:
                return
            buf += data
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                del buf[:4 + struct.unpack(">i", buf[:4])[0]]
                s.sendall(frames[s])  # type: ignore[union-attr]


class TreeBroker(Broker):
    """A broker run from another kcompat source tree (``-P``: the working
    directory, this checkout, does not come first on ``sys.path``)."""

    def command(self) -> list[str]:
        cmd = super().command()
        return [cmd[0], "-P", *cmd[1:]]


def _produce_run(broker: Broker, topic: str, records: int) -> dict[str, float]:
    assert broker.pid is not None
    cpu0 = proc_cpu_s(broker.pid)
    fig = producer_perf(broker.bootstrap, topic, records, "1")
    cpu = proc_cpu_s(broker.pid) - cpu0
    return {"rec_s": fig["rec_s"], "cpu_per_gib": cpu / fig["gib"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--idle", type=int, default=100)
    ap.add_argument("--tree", type=Path, default=None,
                    help="run the broker from this kcompat source tree")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    env = {"PYTHONPATH": str(args.tree)} if args.tree else {}
    kind = TreeBroker if args.tree else Broker
    broker = kind(Path(tempfile.mkdtemp(prefix="kcompat-wakeups-")), extra_args=KCOMPAT_ARGS,
                  env=env).start()
    lines = []
    try:
        idle, hot = unique_topic("idle"), unique_topic("hot")
        create_topic(broker.bootstrap, idle, IDLE_PARTITIONS)
        create_topic(broker.bootstrap, hot, 1)
        producer_perf(broker.bootstrap, hot, args.records // 3, "1")  # warm-up
        quiet = _produce_run(broker, hot, args.records)
        stop = multiprocessing.Event()
        proc = multiprocessing.Process(target=idle_consumers,
                                       args=(broker.bootstrap, idle, args.idle, stop))
        proc.start()
        time.sleep(2.0)
        assert broker.pid is not None
        c0, t0 = proc_cpu_s(broker.pid), time.monotonic()
        time.sleep(3.0)
        idle_cpu = (proc_cpu_s(broker.pid) - c0) / (time.monotonic() - t0)
        busy = _produce_run(broker, hot, args.records)
        stop.set()
        proc.join(10)
        load = loadavg()
    finally:
        broker.close()
    tree = str(args.tree) if args.tree else "this checkout"
    lines = [f"broker from {tree}; {args.idle} idle long-polling consumers "
             f"(alone they cost {idle_cpu * 100:.0f} % of a core)",
             f"{'':26} {'records/s':>10} {'broker CPU-s/GiB':>17}",
             f"{'no idle consumers':26} {quiet['rec_s']:10.0f} {quiet['cpu_per_gib']:17.2f}",
             f"{f'{args.idle} idle consumers':26} {busy['rec_s']:10.0f} "
             f"{busy['cpu_per_gib']:17.2f}"]
    print("\n".join(lines) + f"\n(load {load})")
    if args.no_results:
        return
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    with open(args.results, "a") as f:
        f.write(f"\n## bench/fetch_wakeups.py — {stamp}\n\n" + "\n".join(machine()) + "\n")
        f.write(f"Command: `{' '.join(sys.argv)}`; load average after: {load}.\n\n```\n"
                + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
