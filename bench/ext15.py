"""Filtered views and deduplication windows (issue 15): what the features cost.

    .venv/bin/python bench/ext15.py              # ~2.5-3 min on 2 cores (make bench-ext)
    .venv/bin/python bench/ext15.py --quick      # 100k records, 1 round, no RSS run: ~30 s
    .venv/bin/python bench/ext15.py --profile    # + cProfile of the view and dedup code

Apache Kafka has neither views nor dedup windows, so every comparison is kcompat
with the feature vs kcompat without it, on one single-node broker subprocess
(``compat_tests._broker.Broker``, ``kcompat.flush.mode=never`` as in
``compare.py``, the admin HTTP port on a free port for the metrics):

* **views.** A ``--partitions`` (4) topic holds ``--records`` (200k) records of
  ``--value-bytes`` (200) B with headers ``region`` (``eu`` for 1 in 9, else one
  of 8 others) and ``amount`` (0-999), written by a confluent-kafka producer.
  Two views select about 10 % (``region = 'eu' AND amount >= 100``) and 90 %
  (``amount >= 100``). One confluent-kafka ``Consumer`` (assign every partition
  at offset 0, ``enable.partition.eof``) reads the source, then each view, to
  the end, twice: the first read of a view is *cold* (the broker decodes each
  source batch and rebuilds it without the non-matching records), the second
  *warm* (the rebuilt batches come from the broker's cache, 64 MiB: a view
  bigger than that is cold on every read). ``--read-rounds`` (3) rounds, each
  with new views (a ``-- round k`` comment makes the filter text, the cache
  key, new); medians. Time runs from ``assign`` to the last expected record
  (the connection is made before; the read then goes on to every EOF to check
  that nothing follows). Figures: records delivered/s, source records
  covered/s, value MB/s received, the bytes the broker sent
  (``kcompat_topic_bytes_out_total{topic}``), the broker's and this process's
  CPU seconds, and the broker's VmRSS before and after the reads.
* **dedup produce.** The same records (each with a unique 20-byte
  ``kc-dedup-id`` and a unique value) produced by a confluent-kafka
  ``Producer`` (acks=all, linger.ms=5; record i to partition i % 4, as dedup
  is per partition) to a fresh topic with dedup off,
  ``kc.dedup.window.ms=60000`` + ``kc.dedup.by=header`` and ``...=content``
  (``kc.dedup.max.entries`` left at 100000 per partition: 50k ids each),
  ``--rounds`` (3) times in alternation (median), with the broker's CPU per
  record; then the same records again to each dedup topic (every one a
  duplicate, taken out as holes).
* **dedup memory.** In this process, tracemalloc around a
  ``kcompat.ext.dedup.DedupIndex`` filled with ``--mem-ids`` (1M) ids in
  batches of 100: header ids of 20 bytes and content ids (``content_id`` of
  the 200-byte values); also the CPU time of check + add per id without
  tracemalloc. Then (``--rss-ids``, 1M; skipped if the measured header-dedup
  produce rate says it would take over 2 min) the broker's VmRSS growth while
  a 1-partition topic with ``kc.dedup.max.entries`` above that takes that many
  unique ids, after a plain topic took the same records (the control).

``--profile`` runs ``ViewReader.filter_records`` in-process over the source's
segment bytes under cProfile (where a cold view read spends its time), and the
dedup work of the produce path (decode, ids, index) over a dedup topic's
stored batches, timed per step and under cProfile.
Figures are printed and appended to bench/RESULTS.md with the machine load.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import cpu_model, proc_cpu_s, proc_status_kib  # noqa: E402
from compat_tests._broker import Broker, free_port  # noqa: E402
from kcompat.ext.dedup import DedupIndex, content_id  # noqa: E402

REGIONS = ("us", "ap", "sa", "af", "me", "oc", "na", "ca")  # + "eu" for 1 in 9
VIEWS = {  # name -> filter; about 10 % and 90 % of the records
    "10%": "region = 'eu' AND amount >= 100",
    "90%": "amount >= 100",
}
EXPECT: dict[str, Callable[[dict[str, bytes]], bool]] = {  # the same, client-side
    "10%": lambda h: h["region"] == b"eu" and int(h["amount"]) >= 100,
    "90%": lambda h: int(h["amount"]) >= 100,
}
WINDOW_MS = 60_000
RSS_LIMIT_S = 120.0


# -- helpers ----------------------------------------------------------------------------

def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine() -> str:
    import platform

    import confluent_kafka

    model = cpu_model()
    return (f"machine: nproc {os.cpu_count()}, CPU {model}, {platform.system()} "
            f"{platform.release()}; Python {platform.python_version()}, confluent-kafka "
            f"{confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})")


def metrics(admin_port: int) -> dict[str, float]:
    """``name{labels}`` -> value from the broker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def bytes_out(admin_port: int, topic: str) -> float:
    return metrics(admin_port).get(f'kcompat_topic_bytes_out_total{{topic="{topic}"}}', 0.0)


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def create(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None
           ) -> None:
    from confluent_kafka.admin import NewTopic

    a = admin(bootstrap)
    a.create_topics([NewTopic(topic, partitions, -1 if partitions < 0 else 1,
                              config=config or {})],
                    operation_timeout=30, request_timeout=30)[topic].result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = a.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and md.partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} did not get leaders")


Rec = tuple[bytes, list[tuple[str, bytes]]]  # value, headers


def records(n: int, value_bytes: int, dedup_id: bool) -> Iterator[Rec]:
    """The workload: unique values, region/amount headers (and a 20-byte kc-dedup-id)."""
    rnd = random.Random(15)
    pad = b"v" * value_bytes
    for i in range(n):
        region = b"eu" if rnd.randrange(9) == 0 else REGIONS[rnd.randrange(8)].encode()
        headers = [("region", region), ("amount", b"%d" % rnd.randrange(1000))]
        if dedup_id:
            headers.append(("kc-dedup-id", b"order-%014d" % i))
        yield (b"%012d:" % i + pad)[:value_bytes], headers


def produce(bootstrap: str, topic: str, recs: list[Rec], partitions: int, acks: str = "all"
            ) -> float:
    """Records/s of one confluent-kafka producer writing ``recs``, record i to
    partition i % ``partitions`` (dedup is per partition: a copy sent again must
    meet its first copy)."""
    from confluent_kafka import Producer

    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000, "log_level": 0})
    p.list_topics(topic, timeout=10)  # connected before the clock starts
    start = time.perf_counter()
    for i, (value, headers) in enumerate(recs):
        while True:
            try:
                p.produce(topic, value, headers=headers, partition=i % partitions,
                          on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(300)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"{topic}: {left} records unacknowledged, errors {errors[:3]}")
    return len(recs) / elapsed


@dataclass
class Read:
    what: str
    records: int
    seconds: float
    value_bytes: int
    wire_bytes: float
    broker_cpu_s: float
    client_cpu_s: float

    def line(self, source_records: int) -> str:
        return (f"{self.records / self.seconds:,.0f} rec/s delivered "
                f"({source_records / self.seconds:,.0f} source rec/s covered), "
                f"{self.value_bytes / self.seconds / 1e6:.1f} MB/s of values, "
                f"{self.wire_bytes / 1e6:.1f} MB sent ({self.wire_bytes / self.seconds / 1e6:.1f}"
                f" MB/s); {self.records} records in {self.seconds:.2f} s, "
                f"broker cpu {self.broker_cpu_s:.2f} s, client cpu {self.client_cpu_s:.2f} s")


def read_to_end(broker: Broker, admin_port: int, topic: str, partitions: int, want: int,
                what: str) -> Read:
    """Assign every partition at offset 0 and read: timed until ``want`` records came,
    then on to each partition's EOF (no record may follow)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    assert broker.pid is not None
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"ext15-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "fetch.wait.max.ms": 100, "log_level": 0})
    try:
        c.list_topics(topic, timeout=10)
        out0, cpu0 = bytes_out(admin_port, topic), proc_cpu_s(broker.pid)
        client0 = time.process_time()
        start = time.perf_counter()
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        eof: set[int] = set()
        n = size = 0
        seconds = cpu = client = 0.0
        deadline = time.monotonic() + 300
        while len(eof) < partitions or n < want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: {n} of {want} records, "
                                   f"no EOF on {partitions - len(eof)} partitions")
            for m in c.consume(num_messages=10_000, timeout=0.005):
                err = m.error()
                if err is None:
                    n += 1
                    size += len(m.value())
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                else:
                    raise RuntimeError(f"{topic}: {err}")
            if n >= want and not seconds:
                seconds = time.perf_counter() - start
                cpu = proc_cpu_s(broker.pid) - cpu0
                client = time.process_time() - client0
        time.sleep(0.05)  # the last response's bytes are counted after it is sent
        wire = bytes_out(admin_port, topic) - out0
    finally:
        c.close()
    return Read(what, n, seconds, size, wire, cpu, client)


# -- 1. views ---------------------------------------------------------------------------

def view_section(broker: Broker, admin_port: int, args: argparse.Namespace,
                 recs: list[Rec]) -> list[str]:
    """``--read-rounds`` rounds of: the source read once, then per filter a NEW view
    (its filter text ends in a ``-- round k`` comment, so the broker's cache, keyed
    by the text, starts empty) read twice: cold, warm. Medians per kind of read."""
    assert broker.pid is not None
    src = f"orders-{uuid.uuid4().hex[:6]}"
    create(broker.bootstrap, src, args.partitions)
    rate = produce(broker.bootstrap, src, recs, args.partitions, acks="1")
    print(f"  source {src}: {len(recs)} records written ({rate:,.0f} rec/s)", flush=True)
    expect = {label: sum(EXPECT[label](dict(h)) for _, h in recs) for label in VIEWS}
    time.sleep(1.0)
    rss0 = proc_status_kib(broker.pid, "VmRSS")
    reads: dict[str, list[Read]] = {}

    def read(topic: str, want: int, what: str) -> None:
        r = read_to_end(broker, admin_port, topic, args.partitions, want, what)
        if r.records != want:
            raise RuntimeError(f"{topic}: read {r.records} records, expected {want}")
        reads.setdefault(what, []).append(r)
        print(f"  {what}: {r.line(len(recs))}", flush=True)

    for k in range(args.read_rounds):
        read(src, len(recs), "source")
        for label, flt in VIEWS.items():
            name = f"{src}-v{label[:-1]}-{k}"
            create(broker.bootstrap, name, -1,
                   {"kc.view.of": src, "kc.view.filter": f"{flt} -- round {k}"})
            read(name, expect[label], f"{label} view, cold")
            read(name, expect[label], f"{label} view, warm")
    rss1 = proc_status_kib(broker.pid, "VmRSS")
    counted = {k: v for k, v in metrics(admin_port).items()
               if k.startswith("kcompat_view_records")}

    def med(rs: list[Read], f: Callable[[Read], float]) -> float:
        return statistics.median(f(r) for r in rs)

    base = med(reads["source"], lambda r: r.seconds)
    lines = ["| read | records | time: median (min-max) | rec/s delivered | source rec/s "
             "covered | value MB/s | bytes sent (broker) | broker cpu | client cpu "
             "| time / source's |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for what, rs in reads.items():
        t = med(rs, lambda r: r.seconds)
        lines.append(
            f"| {what} | {rs[0].records:,} | {t:.2f} s ({min(r.seconds for r in rs):.2f}-"
            f"{max(r.seconds for r in rs):.2f}) | {rs[0].records / t:,.0f} "
            f"| {len(recs) / t:,.0f} | {med(rs, lambda r: r.value_bytes) / t / 1e6:.1f} "
            f"| {med(rs, lambda r: r.wire_bytes) / 1e6:.1f} MB "
            f"| {med(rs, lambda r: r.broker_cpu_s):.2f} s "
            f"| {med(rs, lambda r: r.client_cpu_s):.2f} s | {t / base:.1f}x |")
    views = len(VIEWS) * args.read_rounds
    lines += ["", "Filters: " + "; ".join(f"{k} `{v}` ({expect[k]:,} of {len(recs):,})"
                                           for k, v in VIEWS.items())
              + f". {args.read_rounds} rounds (medians). Broker VmRSS {rss0 / 1024:.0f} MiB "
              f"before the reads, {rss1 / 1024:.0f} MiB after them ({views} views, each "
              "read cold then warm: their rebuilt batches in the cache)."]
    if counted:
        first = {label: f"{src}-v{label[:-1]}-0" for label in VIEWS}
        lines += ["", "`kcompat_view_records_total{view,result}` of each view over its two reads: "
                  + "; ".join(
                      f"{label} matched {counted.get(_vr(first[label], 'matched'), -1):,.0f}, "
                      f"filtered {counted.get(_vr(first[label], 'filtered'), -1):,.0f} "
                      f"(client-side: 2 x {expect[label]:,} and 2 x {len(recs) - expect[label]:,})"
                      for label in VIEWS)]
    else:
        lines += ["", "(`kcompat_view_records_total{view,result}` is not on /metrics.)"]
    if args.profile:
        lines += ["", *profile_views(broker, src, args.partitions)]
    return lines


def _vr(view: str, result: str) -> str:
    return f'kcompat_view_records_total{{result="{result}",view="{view}"}}'


def profile_views(broker: Broker, src: str, partitions: int) -> list[str]:
    """cProfile of ``ViewReader.filter_records`` over the source's segment bytes
    (in this process: the same code the broker runs for a cold read)."""
    from kcompat.broker.storage.views import ViewReader

    chunks = []
    for p in range(partitions):
        for path in sorted((broker.data_dir / f"{src}-{p}").glob("*.log")):
            data = path.read_bytes()
            chunks.append((p, data))
    out = []
    for label, flt in VIEWS.items():
        reader = ViewReader()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for p, data in chunks:
            reader.filter_records("v", flt, src, p, data)
        prof.disable()
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        for p, data in chunks:
            reader.filter_records("v", flt, src, p, data)
        warm = time.perf_counter() - t0
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
        body = [ln.replace(f"{ROOT}/", "") for ln in s.getvalue().splitlines() if ln.strip()]
        start = next((i for i, ln in enumerate(body) if "ncalls" in ln), 0)
        out += [f"cProfile of filter_records, view {label}, in-process: cold {cold:.2f} s "
                f"(under the profiler), warm (cached) {warm * 1000:.0f} ms", "```",
                *body[start:start + 13], "```"]
    return out


# -- 2. dedup produce -------------------------------------------------------------------

def dedup_section(broker: Broker, admin_port: int, args: argparse.Namespace,
                  recs: list[Rec]) -> tuple[list[str], float]:
    modes: dict[str, dict[str, str]] = {
        "off": {},
        "header": {"kc.dedup.window.ms": str(WINDOW_MS), "kc.dedup.by": "header"},
        "content": {"kc.dedup.window.ms": str(WINDOW_MS), "kc.dedup.by": "content"},
    }
    assert broker.pid is not None
    pid = broker.pid
    rates: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    again: dict[str, float] = {}
    again_cpu: dict[str, float] = {}
    topics: dict[str, str] = {}
    for r in range(args.rounds):
        order = list(modes) if r % 2 == 0 else list(reversed(modes))
        for mode in order:
            topic = f"dedup-{mode}-{uuid.uuid4().hex[:6]}"
            create(broker.bootstrap, topic, args.partitions, modes[mode])
            cpu0 = proc_cpu_s(pid)
            rates[mode].append(produce(broker.bootstrap, topic, recs, args.partitions))
            cpu[mode].append((proc_cpu_s(pid) - cpu0) / len(recs) * 1e6)
            topics[mode] = topic
            print(f"  produce, dedup {mode}: {rates[mode][-1]:,.0f} rec/s, broker cpu "
                  f"{cpu[mode][-1]:.1f} µs per record", flush=True)
    for mode in ("header", "content"):
        cpu0 = proc_cpu_s(pid)
        again[mode] = produce(broker.bootstrap, topics[mode], recs, args.partitions)
        again_cpu[mode] = (proc_cpu_s(pid) - cpu0) / len(recs) * 1e6
        print(f"  produce again, dedup {mode} (all duplicates): {again[mode]:,.0f} rec/s, "
              f"broker cpu {again_cpu[mode]:.1f} µs per record", flush=True)
    m = metrics(admin_port)
    dup = {mode: m.get(f'kcompat_dedup_duplicates_total{{topic="{topics[mode]}"}}', -1)
           for mode in ("header", "content")}
    med = {mode: statistics.median(v) for mode, v in rates.items()}
    prof = []
    if args.profile:
        for mode in ("header", "content"):
            prof += profile_dedup(broker, topics[mode], mode, args.partitions)
    lines = ["| kc.dedup | produce rec/s (median) | runs | vs off | broker cpu per record "
             "| the same records again (all duplicates) |", "|---|---|---|---|---|---|"]
    for mode in modes:
        runs = " / ".join(f"{x:,.0f}" for x in rates[mode])
        rel = f"{med[mode] / med['off']:.2f}"
        second = (f"{again[mode]:,.0f} rec/s, broker cpu {again_cpu[mode]:.1f} µs per "
                  f"record, {dup[mode]:,.0f} dropped"
                  if mode in again else "-")
        label = "off" if mode == "off" else f"window {WINDOW_MS} ms, by={mode}"
        us = statistics.median(cpu[mode])
        lines.append(f"| {label} | {med[mode]:,.0f} | {runs} | {rel} | {us:.1f} µs | {second} |")
    if prof:
        lines += ["", *prof]
    return lines, med["header"]


def profile_dedup(broker: Broker, topic: str, by: str, partitions: int) -> list[str]:
    """What the leader's produce path adds per batch (``dedup_windows.take_duplicates``
    then ``stored``): decode the records, take their ids, check and add them; timed
    in-process over the topic's stored batches, then under cProfile."""
    from kcompat.ext.dedup import record_id
    from kcompat.wire.batch import iter_headers
    from kcompat.wire.records import decode_batch

    batches = []
    for p in range(partitions):
        for path in sorted((broker.data_dir / f"{topic}-{p}").glob("*.log")):
            data = path.read_bytes()
            batches += [(p, data[pos:pos + h.size]) for pos, h in iter_headers(data)
                        if not h.is_control]

    def run() -> tuple[float, float, float, int]:
        index = {p: DedupIndex(WINDOW_MS) for p in range(partitions)}
        t_dec = t_id = t_idx = 0.0
        n = 0
        for p, batch in batches:
            t0 = time.perf_counter()
            recs = decode_batch(batch)
            t1 = time.perf_counter()
            ids = [record_id(by, r.key, r.value, r.headers) for r in recs]
            t2 = time.perf_counter()
            index[p].check(ids, 1)
            index[p].add(ids, 1)
            t3 = time.perf_counter()
            t_dec, t_id, t_idx, n = t_dec + t1 - t0, t_id + t2 - t1, t_idx + t3 - t2, n + len(ids)
        return t_dec / n * 1e6, t_id / n * 1e6, t_idx / n * 1e6, n

    dec, ids_us, idx_us, n = run()
    prof = cProfile.Profile()
    prof.runcall(run)
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(8)
    body = [ln.replace(f"{ROOT}/", "") for ln in s.getvalue().splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(body) if "ncalls" in ln), 0)
    return [f"In-process, the dedup work of the produce path (by={by}, {n:,} stored records, "
            f"{len(batches)} batches): decode_batch {dec:.1f} µs + record ids {ids_us:.1f} µs "
            f"+ index check/add {idx_us:.1f} µs per record; cProfile:", "```",
            *body[start:start + 9], "```"]


# -- 3. dedup memory --------------------------------------------------------------------

def index_memory(n: int, make: Callable[[int], bytes]) -> tuple[float, float]:
    """(bytes per id under tracemalloc, microseconds of check+add per id without it)."""
    def fill() -> DedupIndex:
        index = DedupIndex(10**9, n + 1)
        now = 1_000_000
        for start in range(0, n, 100):
            ids = [make(i) for i in range(start, min(start + 100, n))]
            index.check(ids, now)
            index.add(ids, now, start)
            now += 1
        return index

    gc.collect()
    t0 = time.perf_counter()
    idx = fill()
    per_id_us = (time.perf_counter() - t0) / n * 1e6
    del idx
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    idx = fill()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(idx) == n
    del idx
    return (after - before) / n, per_id_us


def memory_section(broker: Broker, admin_port: int, args: argparse.Namespace,
                   header_rate: float | None) -> list[str]:
    n = args.mem_ids
    pad = b"v" * args.value_bytes

    def header(i: int) -> bytes:
        return b"order-%014d" % i

    def content(i: int) -> bytes:
        return content_id(None, (b"%012d:" % i + pad)[:args.value_bytes])

    lines = []
    for label, make, note in (("header ids of 20 B", header, "the ids' bytes objects included"),
                              ("content ids (16-B BLAKE2b)", content,
                               f"of {args.value_bytes}-B values, hashing included in the time")):
        per_id, us = index_memory(n, make)
        lines.append(f"* DedupIndex, {n:,} {label}: {per_id:.0f} B per id = "
                     f"{per_id * 1e6 / 2**20:.0f} MiB per 1M ids (tracemalloc, {note}); "
                     f"check + add {us:.2f} µs per id")
        print("  " + lines[-1], flush=True)
    if not args.rss_ids:
        return lines
    n = args.rss_ids
    if header_rate is None or n / header_rate > RSS_LIMIT_S:
        lines.append(f"* broker RSS with {n:,} ids: skipped (at {header_rate or 0:,.0f} rec/s "
                     f"it would take over {RSS_LIMIT_S:.0f} s)")
        return lines
    assert broker.pid is not None
    small = [(b"%012d" % i, [("kc-dedup-id", b"order-%014d" % i)]) for i in range(n)]
    plain = f"rss-plain-{uuid.uuid4().hex[:6]}"
    dedup = f"rss-dedup-{uuid.uuid4().hex[:6]}"
    create(broker.bootstrap, plain, 1)
    create(broker.bootstrap, dedup, 1, {"kc.dedup.window.ms": str(10 * 60_000),
                                        "kc.dedup.by": "header",
                                        "kc.dedup.max.entries": str(n * 2)})
    rss0 = proc_status_kib(broker.pid, "VmRSS")
    t0 = time.monotonic()
    produce(broker.bootstrap, plain, small, 1)
    rss1 = proc_status_kib(broker.pid, "VmRSS")
    produce(broker.bootstrap, dedup, small, 1)
    rss2 = proc_status_kib(broker.pid, "VmRSS")
    took = time.monotonic() - t0
    held = metrics(admin_port).get(f'kcompat_dedup_window_ids{{topic="{dedup}"}}', -1)
    growth = (rss2 - rss1) * 1024
    lines.append(
        f"* broker VmRSS, {n:,} unique 20-B header ids into a 1-partition dedup topic "
        f"(12-B values): {rss0 / 1024:.0f} MiB at the start, {rss1 / 1024:.0f} MiB after the "
        f"same records to a plain topic (control, +{(rss1 - rss0) / 1024:.0f} MiB), "
        f"{rss2 / 1024:.0f} MiB after the dedup topic: +{growth / 2**20:.0f} MiB = "
        f"{growth / n:.0f} B per id (index holds {held:,.0f} ids); {took:.0f} s")
    print("  " + lines[-1], flush=True)
    del small
    return lines


# -- main -------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=None, help="default 200000, --quick 100000")
    ap.add_argument("--value-bytes", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="dedup produce rounds (median)")
    ap.add_argument("--read-rounds", type=int, default=3, help="view read rounds (median)")
    ap.add_argument("--mem-ids", type=int, default=1_000_000)
    ap.add_argument("--rss-ids", type=int, default=None,
                    help="ids for the broker RSS run (default 1000000, --quick 0 = skip)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile ViewReader.filter_records in-process")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()
    args.records = args.records or (100_000 if args.quick else 200_000)
    if args.rss_ids is None:
        args.rss_ids = 0 if args.quick else 1_000_000
    if args.quick:
        args.rounds = args.read_rounds = 1
    loads = [load()]
    t0 = time.monotonic()
    recs = list(records(args.records, args.value_bytes, dedup_id=True))
    with tempfile.TemporaryDirectory(prefix="kcompat-bench-ext15-") as tmp:
        admin_port = free_port()
        broker = Broker(Path(tmp) / "kcompat", extra_args=(
            "--set", "kcompat.flush.mode=never", "--set", f"admin.port={admin_port}")).start()
        try:
            print(f"kcompat on {broker.bootstrap} (admin :{admin_port})", flush=True)
            print("views:", flush=True)
            views = view_section(broker, admin_port, args, recs)
            loads.append(load())
            print("dedup produce:", flush=True)
            dedup, header_rate = dedup_section(broker, admin_port, args, recs)
            loads.append(load())
            del recs
            print("dedup memory:", flush=True)
            mem = memory_section(broker, admin_port, args, header_rate)
        finally:
            broker.close()
    loads.append(load())
    total = time.monotonic() - t0
    lines = [
        "Apache Kafka has no views and no dedup windows: each figure is kcompat with the "
        "feature vs kcompat without it (one broker subprocess, `kcompat.flush.mode=never`; "
        "clients in the bench process).", "",
        f"**Views** — {args.records:,} records of {args.value_bytes} B (headers region, amount),"
        f" {args.partitions} partitions; one confluent-kafka Consumer, assign at offset 0, timed "
        "to the last expected record (then on to every partition's EOF: nothing more came); "
        "cold = first read of a new view (the broker decodes and rebuilds each batch), warm = "
        "second read (its rebuilt-batch cache, 64 MiB); bytes sent = "
        "`kcompat_topic_bytes_out_total{topic}` delta (a source read re-sends the batch cut "
        "at the end of each 1 MiB partition read; a view drops it).", "", *views, "",
        f"**Dedup produce** — the same {args.records:,} records, each with a unique 20-B "
        "`kc-dedup-id` and a unique value, confluent-kafka Producer acks=all linger.ms=5, "
        f"fresh topic of {args.partitions} partitions per run, {args.rounds} round(s) "
        "alternating order.", "", *dedup, "",
        "**Dedup memory**", "", *mem, "",
        f"Load average (1/5/15 min) at start / after views / after dedup produce / at end: "
        f"{' / '.join(loads)}; nproc {os.cpu_count()}; total {total:.0f} s",
    ]
    print("\n".join(lines))
    if not args.no_results:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        cmd = " ".join(["bench/ext15.py", *sys.argv[1:]])
        with (ROOT / "bench" / "RESULTS.md").open("a") as f:
            f.write(f"\n## Filtered views and dedup windows (issue 15) — {stamp}\n\n"
                    f"`{cmd}`; {machine()}\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
