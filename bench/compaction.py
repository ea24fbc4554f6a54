"""Log compaction (issue 18 item 1): cleaner throughput and what a running
cleaner costs producers, kcompat against Apache Kafka 4.4.0 in the same run.

    .venv/bin/python bench/compaction.py            # 200 MiB backlog (make bench-compaction)
    .venv/bin/python bench/compaction.py --quick    # 40 MiB, shorter probes: < 2 min

For each broker (Kafka first: ``KafkaReference``, then a kcompat ``Broker`` with
``kcompat.flush.mode=never`` as in ``compare.py``; both with
``log.cleaner.backoff.ms=200``), one at a time on this machine:

0. *warm-up*: a backlog of a tenth of the size is cleaned as in 2 (the
   JVM's JIT compiles Kafka's cleaner), not counted.
1. *idle*: after a 2-s warm-up, a latency probe — a confluent-kafka producer
   (acks=all, linger.ms=0) sending one 200-B record every 5 ms to a plain
   topic, latency from ``produce()`` to its delivery callback — runs
   ``--probe-s`` seconds while no cleaner has work.
2. *alone*: ``--mib`` MiB of records (values 100 B..1 KiB, uniform; keys drawn
   from ``--keys`` keys) go to a 1-partition compacted topic (``segment.bytes``
   8 MiB, ``min.cleanable.dirty.ratio`` 0.01) created with
   ``min.compaction.lag.ms`` = 1 h, so the cleaner leaves it alone while it
   fills. IncrementalAlterConfigs sets ``min.compaction.lag.ms`` = 0 and the
   clock starts; it stops when the non-active segment files (``*.log`` in the
   partition dir, read from the outside, as Kafka's JMX is not used) hold at
   most 1.3 x the key and value bytes of the latest record of every key — less
   than one dirty segment, so every dirty segment has been rewritten.
   Throughput = the backlog's non-active bytes / that time; broker CPU seconds
   over the same span from /proc; for kcompat also the ``kcompat_cleaner_*``
   metrics (bytes read and written, records removed).
3. *with the probe*: the same with a second backlog (a new topic) while the
   probe produces, for the latency while cleaning.
4. after each: a confluent-kafka consumer reads the topic from the beginning;
   below the active segment every key must appear once (checked, not timed).

Figures are printed and appended to bench/RESULTS.md with the load average.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import loadavg, machine, proc_cpu_s  # noqa: E402
from bench.ext15 import metrics  # noqa: E402
from compat_tests._broker import Broker, free_port  # noqa: E402
from compat_tests._compaction import alter_topic, create_topic, segment_bases  # noqa: E402
from compat_tests.java.kafka_reference import KafkaReference  # noqa: E402

SEGMENT = 8 << 20
PROBE_INTERVAL_S = 0.005
CLEANER_ARGS = {"log.cleaner.backoff.ms": "200"}


@dataclass
class Clean:
    """One backlog cleaned: alone, or with the probe producing meanwhile."""

    backlog_bytes: int = 0
    backlog_records: int = 0
    load_s: float = 0.0
    clean_s: float = 0.0
    after_bytes: int = 0
    cpu_s: float = 0.0
    kept: int = 0
    probe: list[float] = field(default_factory=list)  # latencies while cleaning, ms
    extra: str = ""

    @property
    def mib_s(self) -> float:
        return self.backlog_bytes / 2**20 / self.clean_s

    @property
    def mib_cpu_s(self) -> float:
        return self.backlog_bytes / 2**20 / max(self.cpu_s, 0.01)


@dataclass
class Figures:
    name: str
    idle: list[float] = field(default_factory=list)  # probe latencies with no cleaning, ms
    alone: Clean = field(default_factory=Clean)
    busy: Clean = field(default_factory=Clean)
    loads: list[str] = field(default_factory=list)


def latest_bytes(mib: int, keys: int) -> int:
    """Key and value bytes of the latest record of every key (the compacted log's
    payload, without record and batch overhead)."""
    last: dict[bytes, int] = {}
    for k, v in pairs(mib, keys):
        last[k] = len(k) + len(v)
    return sum(last.values())


def pairs(mib: int, keys: int) -> Iterator[tuple[bytes, bytes]]:
    rnd = random.Random(18)
    total, i = 0, 0
    pad = b"x" * 1024
    while total < mib << 20:
        size = rnd.randint(100, 1024)
        value = (b"%d-" % i + pad)[:size]
        total += size
        i += 1
        yield b"key-%06d" % rnd.randrange(keys), value


def load_backlog(bootstrap: str, topic: str, mib: int, keys: int) -> tuple[int, float]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                  "batch.size": 1 << 20, "queue.buffering.max.kbytes": 256 << 10,
                  "log_level": 0})
    errors: list[Any] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    n = 0
    t0 = time.perf_counter()
    for k, v in pairs(mib, keys):
        while True:
            try:
                p.produce(topic, key=k, value=v, partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
        if n % 5000 == 0:
            p.poll(0)
    left = p.flush(300)
    if left or errors:
        raise RuntimeError(f"backlog: {left} unsent, errors {errors[:3]}")
    return n, time.perf_counter() - t0


class Probe:
    """One record every ``PROBE_INTERVAL_S`` (acks=all, linger.ms=0); latencies in ms."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "linger.ms": 0, "log_level": 0})
        self.producer.list_topics(topic, timeout=10)

    def run(self, until: Callable[[], bool], max_s: float) -> list[float]:
        out: list[float] = []
        errors: list[Any] = []

        def sent(t0: float) -> Callable[[Any, Any], None]:
            def cb(err: Any, _msg: Any) -> None:
                if err is None:
                    out.append((time.perf_counter() - t0) * 1000)
                else:
                    errors.append(err)
            return cb

        deadline = time.monotonic() + max_s
        value = b"p" * 200
        nxt = time.perf_counter()
        while not until() and time.monotonic() < deadline:
            self.producer.produce(self.topic, value, partition=0, on_delivery=sent(
                time.perf_counter()))
            self.producer.poll(0)
            nxt += PROBE_INTERVAL_S
            while (delay := nxt - time.perf_counter()) > 0:
                self.producer.poll(delay)  # delivery callbacks as they come
        self.producer.flush(30)
        if errors:
            raise RuntimeError(f"probe: {errors[:3]}")
        return out


def nonactive_bytes(pdir: Path) -> int:
    """Bytes of the segment files but the active one's, Kafka's ``.cleaned`` and
    ``.swap`` files of a pass in flight included (not its ``.deleted`` ones)."""
    active = f"{segment_bases(pdir)[-1]:020d}.log"
    return sum(p.stat().st_size for p in pdir.glob("*.log*")
               if p.name != active and not p.name.endswith(".deleted"))


def check_compacted(bootstrap: str, topic: str, pdir: Path) -> int:
    """Keys read below the active segment (each must come once)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    active = segment_bases(pdir)[-1]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 0})
    seen: set[bytes] = set()
    try:
        c.assign([TopicPartition(topic, 0, -2)])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for m in c.consume(10000, 0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return len(seen)
                    raise RuntimeError(str(m.error()))
                if m.offset() < active:
                    if m.key() in seen:
                        raise RuntimeError(f"key {m.key()!r} twice below {active}")
                    seen.add(m.key())
        raise RuntimeError("no end of partition in 120 s")
    finally:
        c.close()


def clean_backlog(name: str, bootstrap: str, pid: int, data_dir: Path,
                  args: argparse.Namespace, probe: Probe | None,
                  kc_metrics: Callable[[], dict[str, float]] | None, mib: int) -> Clean:
    """Load a held-back backlog, release it, time its cleaning (``probe``: producing
    meanwhile), check the result."""
    c = Clean()
    topic = f"compacted-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT),
                                    "min.cleanable.dirty.ratio": "0.01",
                                    "min.compaction.lag.ms": "3600000"})
    pdir = data_dir / f"{topic}-0"
    c.backlog_records, c.load_s = load_backlog(bootstrap, topic, mib, args.keys)
    time.sleep(1.0)  # a last roll or flush settles
    c.backlog_bytes = nonactive_bytes(pdir)
    target = int(latest_bytes(mib, args.keys) * 1.3)
    if target >= SEGMENT:
        raise SystemExit(f"{args.keys} keys compact to ~{target:,} B, not below one segment "
                         f"({SEGMENT:,} B): the end of a pass could not be told from outside")
    m0 = kc_metrics() if kc_metrics else {}
    cpu0 = proc_cpu_s(pid)
    done_at: list[float] = []

    def watch() -> None:
        while not done_at:
            try:
                if nonactive_bytes(pdir) <= target:
                    done_at.append(time.perf_counter())
                    return
            except FileNotFoundError:  # a segment swapped while listed
                pass
            time.sleep(0.05)

    t0 = time.perf_counter()
    alter_topic(bootstrap, topic, {"min.compaction.lag.ms": "0"})
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    if probe is not None:
        c.probe = probe.run(lambda: bool(done_at), args.max_clean_s)
    watcher.join(timeout=args.max_clean_s)
    if not done_at:
        raise RuntimeError(f"{name}: not compacted in {args.max_clean_s:.0f} s "
                           f"({nonactive_bytes(pdir):,} non-active bytes left)")
    c.clean_s = done_at[0] - t0
    c.cpu_s = proc_cpu_s(pid) - cpu0
    c.after_bytes = nonactive_bytes(pdir)
    if kc_metrics:
        time.sleep(0.5)
        m1 = kc_metrics()

        def d(key: str) -> float:
            return m1.get(key, 0.0) - m0.get(key, 0.0)
        c.extra = (f"{d('kcompat_cleaner_passes_total'):.0f} pass(es), "
                   f"{d('kcompat_cleaner_bytes_read_total') / 2**20:.0f} MiB read, "
                   f"{d('kcompat_cleaner_bytes_written_total') / 2**20:.1f} MiB written, "
                   f"{d('kcompat_cleaner_records_removed_total'):,.0f} records removed")
    c.kept = check_compacted(bootstrap, topic, pdir)
    how = "with the probe" if probe is not None else "alone"
    print(f"  {name}: {c.backlog_bytes / 2**20:.0f} MiB ({c.backlog_records:,} records, "
          f"loaded in {c.load_s:.1f} s) cleaned {how} in {c.clean_s:.2f} s "
          f"({c.mib_s:.1f} MiB/s, broker cpu {c.cpu_s:.1f} s), {c.kept:,} keys once below "
          "the active segment" + (f"; probe p99 {pct(c.probe, 99):.1f} ms" if probe else ""),
          flush=True)
    return c


def run(name: str, bootstrap: str, pid: int, data_dir: Path, args: argparse.Namespace,
        kc_metrics: Callable[[], dict[str, float]] | None) -> Figures:
    fig = Figures(name, loads=[loadavg()])
    probe_topic = f"probe-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, probe_topic, {})
    probe = Probe(bootstrap, probe_topic)
    probe.run(lambda: False, 2.0)  # warm-up (connections, the JVM's JIT), not counted
    warm = clean_backlog(name, bootstrap, pid, data_dir, args, None, kc_metrics,
                         max(10, args.mib // 10))  # the cleaner's code warm too
    print(f"  {name}: (warm-up pass over {warm.backlog_bytes / 2**20:.0f} MiB, not counted)",
          flush=True)
    fig.idle = probe.run(lambda: False, args.probe_s)
    print(f"  {name}: idle probe {args.probe_s:.0f} s, p99 {pct(fig.idle, 99):.1f} ms",
          flush=True)
    fig.loads.append(loadavg())
    fig.alone = clean_backlog(name, bootstrap, pid, data_dir, args, None, kc_metrics, args.mib)
    fig.loads.append(loadavg())
    fig.busy = clean_backlog(name, bootstrap, pid, data_dir, args, probe, kc_metrics, args.mib)
    fig.loads.append(loadavg())
    return fig


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q / 100))]


def run_kafka(args: argparse.Namespace, workdir: Path) -> Figures:
    ref = KafkaReference(workdir / "kafka", overrides=CLEANER_ARGS)
    ref.start()
    try:
        assert ref.proc is not None
        return run("Apache Kafka 4.4.0", ref.bootstrap, ref.proc.pid, ref.data_dir, args, None)
    finally:
        ref.close()


def run_kcompat(args: argparse.Namespace, workdir: Path) -> Figures:
    admin_port = free_port()
    extra = ["--set", "kcompat.flush.mode=never", "--set", f"admin.port={admin_port}"]
    for k, v in CLEANER_ARGS.items():
        extra += ["--set", f"{k}={v}"]
    broker = Broker(workdir / "kcompat", extra_args=tuple(extra)).start()
    try:
        assert broker.pid is not None
        return run("kcompat", broker.bootstrap, broker.pid, broker.data_dir, args,
                   lambda: metrics(admin_port))
    finally:
        broker.close()


def lat(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{pct(xs, 50):.1f} / {pct(xs, 99):.1f} / {max(xs):.1f} ms ({len(xs)})"


def rows(f: Figures) -> list[str]:
    out = []
    for how, c in (("alone", f.alone), ("with the probe", f.busy)):
        out.append(
            f"| {f.name} | {how} | {c.backlog_bytes / 2**20:.0f} MiB, {c.backlog_records:,} "
            f"| {c.clean_s:.2f} s | {c.mib_s:.1f} MiB/s | {c.cpu_s:.1f} s "
            f"| {c.mib_cpu_s:.0f} MiB | {c.after_bytes / 2**20:.1f} MiB, {c.kept:,} keys "
            f"| {lat(f.idle) if c is f.busy else '-'} | {lat(c.probe)} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=None, help="backlog MiB (200; --quick 40)")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--probe-s", type=float, default=None, help="idle probe (10 s; --quick 4)")
    ap.add_argument("--max-clean-s", type=float, default=600.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()
    args.mib = args.mib or (40 if args.quick else 200)
    args.probe_s = args.probe_s or (4.0 if args.quick else 10.0)
    t0 = time.monotonic()
    loads = [loadavg()]
    with tempfile.TemporaryDirectory(prefix="kcompat-bench-compaction-") as tmp:
        print("Apache Kafka 4.4.0:", flush=True)
        kafka = run_kafka(args, Path(tmp))
        loads.append(loadavg())
        print("kcompat:", flush=True)
        kc = run_kcompat(args, Path(tmp))
    loads.append(loadavg())
    total = time.monotonic() - t0
    ratio = kc.alone.mib_s / kafka.alone.mib_s
    cpu_ratio = kc.alone.mib_cpu_s / kafka.alone.mib_cpu_s
    busy_ratio = kc.busy.mib_s / kafka.busy.mib_s
    p99_ratio = pct(kc.busy.probe, 99) / pct(kafka.busy.probe, 99)
    lines = [
        f"Per broker: a backlog of {args.mib} MiB (values 100 B..1 KiB uniform, "
        f"{args.keys:,} keys, 1 partition, segment.bytes {SEGMENT >> 20} MiB) held back by "
        "min.compaction.lag.ms = 1 h, released by IncrementalAlterConfigs and cleaned "
        "*alone*; then a second such backlog cleaned *with the probe* producing (each broker "
        "first cleaned a tenth-size backlog, not counted: the JVM's JIT). Cleaned = "
        "the non-active segment files hold at most 1.3 x the key+value bytes of the latest "
        "record per key, less than one dirty segment (seen from outside, polled every 50 ms; "
        "the cleaners wake every 200 ms). Probe: confluent-kafka, acks=all, linger.ms=0, one "
        "200-B record per 5 ms to another topic of the same broker; latency = produce() to "
        "delivery callback, p50 / p99 / max (samples), idle = before any backlog. Broker CPU "
        "= /proc utime+stime over the cleaning span (probe serving included); MiB per cpu-s "
        "= backlog / that CPU, less sensitive to the machine's load than wall time.", "",
        "| broker | cleaned | backlog (MiB, records) | time to clean | throughput "
        "| broker cpu | MiB per cpu-s | after (non-active), keys once | probe idle "
        "p50/p99/max | probe while cleaning p50/p99/max |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows(kafka), *rows(kc), "",
        f"kcompat / Kafka, cleaning alone: {ratio:.2f}x the throughput, {cpu_ratio:.2f}x per "
        f"broker cpu-s; with the probe: {busy_ratio:.2f}x the throughput, probe p99 while "
        f"cleaning {p99_ratio:.2f}x. kcompat_cleaner_* deltas: alone {kc.alone.extra}; with "
        f"the probe {kc.busy.extra}.",
        f"Load average (1/5/15 min) at start / after Kafka / at end: {' / '.join(loads)}; "
        f"per broker (start / after idle probe / after alone / after with probe): Kafka "
        f"{' / '.join(kafka.loads)}; kcompat {' / '.join(kc.loads)}; total {total:.0f} s",
    ]
    print("\n".join(lines))
    print(f"ratios: cleaner_throughput={ratio:.2f} per_cpu={cpu_ratio:.2f} "
          f"with_probe={busy_ratio:.2f} probe_p99_cleaning={p99_ratio:.2f}")
    if not args.no_results:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        cmd = " ".join(["bench/compaction.py", *sys.argv[1:]])
        with (ROOT / "bench" / "RESULTS.md").open("a") as f:
            f.write(f"\n## Log compaction (issue 18 item 1) — {stamp}\n\n`{cmd}`; "
                    + "; ".join(machine()) + f"; nproc {os.cpu_count()}\n\n"
                    + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
