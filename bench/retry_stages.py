"""Where a record's time from send to its dead-letter topic goes, stage by stage.

One broker (``compat_tests._broker.Broker``, defaults plus an admin port), a
6-partition topic ``t``, its retry topic ``t.retry`` (created on first use, 3
attempts, backoffs 2 + 4 + 8 s) and ``t.dlq``. ``--records`` records (100 B) are
produced to ``t``; a retrier thread — the soak's (``bench/soak.py``): one consumer
group on ``t`` and ``t.retry`` that nacks every record (``kcompat.ext.nack``), then
flushes its producer and commits after each poll — and a reader of ``t.dlq`` note
when each record was seen at each attempt. Prints, per attempt, the time since the
stage before (a backoff plus what the broker and the retrier added), send to
dead-letter topic, where the retrier's time went (consume, nack, flush, commit), and
from the broker's /metrics the mean delivery lateness and the Produce requests'
mean latency. ``--root`` runs the kcompat of another tree (a ``git archive``
snapshot, for before/after). Nothing is appended to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BACKOFFS_S = (2.0, 4.0, 8.0)


def quantiles(xs: list[float]) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    return (f"p50 {xs[len(xs) // 2]:.2f} s, p99 {xs[int(len(xs) * 0.99)]:.2f} s, "
            f"max {xs[-1]:.2f} s")


class Retrier:
    """The soak's retrier, timing each part of its loop."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.seen: dict[tuple[int, int], float] = {}  # (record, attempt) -> when
        self.errors: dict[str, int] = {}
        self.spent = {"consume": 0.0, "nack": 0.0, "flush": 0.0, "commit": 0.0}
        self.polls = 0
        self.stop = False

    def run(self) -> None:
        from confluent_kafka import Consumer, Producer

        from kcompat.ext.nack import nack

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "retrier",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "topic.metadata.refresh.interval.ms": 1000, "log_level": 0})
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "log_level": 0})
        c.subscribe(["t", "t.retry"])
        while not self.stop:
            t0 = time.time()
            msgs = c.consume(num_messages=2000, timeout=0.1)
            t1 = time.time()
            for m in msgs:
                if m.error():
                    name = m.error().name()
                    self.errors[name] = self.errors.get(name, 0) + 1
                    continue
                attempt = next((v for k, v in (m.headers() or []) if k == "kc-attempt"), b"0")
                self.seen[(int(m.key()), int(attempt))] = t1
                for _ in range(10_000):
                    try:
                        nack(p, m, "bench")
                        break
                    except BufferError:
                        p.poll(0.05)
            t2 = time.time()
            self.spent["consume"] += t1 - t0
            if msgs:
                self.polls += 1
                p.flush(30)
                t3 = time.time()
                try:
                    c.commit(asynchronous=False)
                except Exception:  # noqa: BLE001 - a poll of errors only has no offset
                    pass
                self.spent["nack"] += t2 - t1
                self.spent["flush"] += t3 - t2
                self.spent["commit"] += time.time() - t3
        c.close()


def reader(bootstrap: str, dead: dict[int, float], stop: list[bool]) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dead-reader",
                  "auto.offset.reset": "earliest", "log_level": 0})
    c.subscribe(["t.dlq"])
    while not stop[0]:
        for m in c.consume(num_messages=2000, timeout=0.1):
            if not m.error():
                dead[int(m.key())] = time.time()
    c.close()


def metric(text: str, name: str) -> float:
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith(name))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--root", default=str(ROOT), help="the tree whose kcompat runs")
    ap.add_argument("--timeout-s", type=float, default=180.0)
    args = ap.parse_args()
    root = str(Path(args.root).resolve())
    sys.path.insert(0, root)
    os.environ["PYTHONPATH"] = root + os.pathsep + os.environ.get("PYTHONPATH", "")
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from compat_tests._broker import Broker, free_port

    port = free_port()
    broker = Broker(Path(tempfile.mkdtemp(prefix="retry-stages-")), extra_args=(
        "--set", "group.initial.rebalance.delay.ms=0", "--set", f"admin.port={port}"))
    broker.start()
    try:
        run(args, broker.bootstrap, port, AdminClient, NewTopic, Producer)
    finally:
        broker.stop()


def run(args: Any, bootstrap: str, port: int, admin_cls: Any, topic_cls: Any,
        producer_cls: Any) -> None:
    n = args.records
    admin = admin_cls({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([topic_cls("t", 6, 1), topic_cls("t.dlq", 6, 1)]).values():
        f.result()
    retrier, dead, stop = Retrier(bootstrap), {}, [False]
    threads = [threading.Thread(target=retrier.run, daemon=True),
               threading.Thread(target=reader, args=(bootstrap, dead, stop), daemon=True)]
    for t in threads:
        t.start()
    p = producer_cls({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    send = {}
    for i in range(n):
        send[i] = time.time()
        p.produce("t", key=str(i).encode(), value=b"x" * 100, partition=i % 6)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(60)
    until = time.time() + args.timeout_s
    while len(dead) < n and time.time() < until:
        time.sleep(0.5)
    retrier.stop, stop[0] = True, True
    print(f"records {n:,}; dead-lettered {len(dead):,}; retrier errors {retrier.errors}")
    for k in range(4):
        took = [retrier.seen[(i, k)] - (send[i] if k == 0 else retrier.seen[(i, k - 1)])
                for i in range(n) if (i, k) in retrier.seen and (k == 0 or (i, k - 1)
                                                                  in retrier.seen)]
        what = "send to first poll" if k == 0 else f"after attempt {k - 1} (backoff " \
            f"{BACKOFFS_S[k - 1]:g} s)"
        print(f"attempt {k} seen by the retrier, {what}: {quantiles(took)}")
    print("dead-letter topic after the last attempt:",
          quantiles([dead[i] - retrier.seen[(i, 3)] for i in dead if (i, 3) in retrier.seen]))
    print("send to dead-letter topic:", quantiles([dead[i] - send[i] for i in dead]))
    spent = ", ".join(f"{k} {v:.1f} s" for k, v in retrier.spent.items())
    print(f"the retrier's time: {spent}; {retrier.polls} polls with records, "
          f"{len(retrier.seen) / max(retrier.polls, 1):,.0f} records each")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    count = metric(text, "kcompat_delayed_delivery_lateness_seconds_count")
    late = metric(text, "kcompat_delayed_delivery_lateness_seconds_sum")
    produces = metric(text, 'kcompat_request_latency_seconds_count{api="Produce"}')
    produce_s = metric(text, 'kcompat_request_latency_seconds_sum{api="Produce"}')
    print(f"broker: delivery lateness mean {late / max(count, 1):.3f} s over {count:,.0f} "
          f"moves; Produce requests {produces:,.0f}, mean {produce_s / max(produces, 1) * 1e3:.1f}"
          " ms")


if __name__ == "__main__":
    main()
