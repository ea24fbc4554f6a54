"""Delayed delivery: lateness, memory per pending record, produce cost (issue 13).

Three measurements, each against a fresh single-node kcompat broker
(``kcompat.flush.mode=never``, as ``compare.py``):

* ``--pending N --spread-s S`` (default 100000 over 60 s): a confluent-kafka
  producer sends N records of 100 bytes, each with ``kc-deliver-at`` spread
  evenly over S seconds starting ``--lead-s`` from now, to a 6-partition topic;
  the broker's RSS (VmRSS) is read before, after they are all pending, and at
  the end; a consumer reads every delivered record and its lateness is the
  time it was received minus its due time (end to end: the broker's delivery
  plus the fetch). Prints p50/p99/max, duplicates and losses.
* the produce rate of that producer: every record delayed vs none delayed
  (the same records without the header, to another topic).
* ``--baseline TREE``: plain-topic produce throughput (Kafka's
  ProducerPerformance, 1 KiB records, acks=1, 1 partition — compare.py's
  workload) of this tree vs another checkout of kcompat (``PYTHONPATH=TREE``),
  alternating, ``--rounds`` each, medians: rule 1's "free when unused".

Figures are printed and appended to bench/RESULTS.md with the machine load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare import create_topic, loadavg, machine, proc_status_kib, producer_perf  # noqa: E402
from compat_tests._broker import Broker  # noqa: E402

VALUE = b"x" * 100
FLAGS = ("--set", "kcompat.flush.mode=never", "--set", "admin.port=-1")


def _produce(bootstrap: str, topic: str, n: int, due: list[int] | None) -> float:
    """Records/s for ``n`` records (with ``kc-deliver-at`` when ``due``)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 2000,
                  "queue.buffering.max.messages": 1_000_000, "log_level": 0})
    start = time.perf_counter()
    for i in range(n):
        headers = [("kc-deliver-at", b"%d" % due[i])] if due is not None else None
        while True:
            try:
                p.produce(topic, key=b"%d" % i, value=VALUE, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(300)
    if left:
        raise RuntimeError(f"{left} records not acknowledged")
    return n / (time.perf_counter() - start)


def _lateness(bootstrap: str, topic: str, n: int, timeout_s: float
              ) -> tuple[list[float], int, int]:
    """(lateness in s of each delivered record, duplicates, missing)."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 10, "log_level": 0})
    c.subscribe([topic])
    seen: dict[bytes, float] = {}
    dupes = 0
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < n and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=0.005):
                if m.error():
                    continue
                now = time.time()
                due = int(dict(m.headers() or [])[b"kc-deliver-at".decode()]) / 1000
                key = m.key() or b""
                if key in seen:
                    dupes += 1
                seen[key] = now - due
    finally:
        c.close()
    return list(seen.values()), dupes, n - len(seen)


def delayed(args: argparse.Namespace, workdir: Path) -> list[str]:
    broker = Broker(workdir / "delayed", extra_args=FLAGS).start()
    assert broker.pid is not None
    try:
        create_topic(broker.bootstrap, "plain", 6)
        create_topic(broker.bootstrap, "delayed", 6)
        plain_rate = _produce(broker.bootstrap, "plain", min(args.pending, 200_000), None)
        rss0 = proc_status_kib(broker.pid, "VmRSS")
        t0 = int(time.time() * 1000) + int(args.lead_s * 1000)
        n = args.pending
        due = [t0 + int(args.spread_s * 1000 * i / n) for i in range(n)]
        load_before = loadavg()
        delayed_rate = _produce(broker.bootstrap, "delayed", n, due)
        rss1 = proc_status_kib(broker.pid, "VmRSS")
        ingest_left_s = (t0 - time.time() * 1000) / 1000
        late, dupes, missing = _lateness(broker.bootstrap, "delayed", n,
                                         args.lead_s + args.spread_s + 120)
        rss2 = proc_status_kib(broker.pid, "VmRSS")
        load_after = loadavg()
    finally:
        broker.close()
    late.sort()
    q = statistics.quantiles(late, n=100) if len(late) > 1 else [0.0] * 99
    growth = (rss1 - rss0) / 1024
    lines = [
        f"* {n} records pending, due evenly over {args.spread_s:g} s "
        f"(first due {args.lead_s:g} s after the produce started; "
        f"{'all' if ingest_left_s > 0 else 'NOT all'} pending before the first was due)",
        f"* lateness (received - due): p50 {q[49] * 1000:.0f} ms, p99 {q[98] * 1000:.0f} ms, "
        f"max {late[-1] * 1000:.0f} ms; duplicates {dupes}, missing {missing}",
        f"* broker RSS: {rss0 / 1024:.0f} MiB before, {rss1 / 1024:.0f} MiB with all pending "
        f"(+{growth:.0f} MiB, {growth * 1024 * 1024 / n:.0f} B per pending record), "
        f"{rss2 / 1024:.0f} MiB at the end",
        f"* produce rate, confluent-kafka, 100 B records, 6 partitions: every record delayed "
        f"{delayed_rate:,.0f} rec/s vs plain {plain_rate:,.0f} rec/s "
        f"(ratio {delayed_rate / plain_rate:.2f})",
        f"* load average before / after: {load_before} / {load_after}",
    ]
    return lines


def plain_ratio(args: argparse.Namespace, workdir: Path) -> list[str]:
    trees = {"this tree": None, f"baseline {args.baseline}": args.baseline}
    probe = subprocess.run([sys.executable, "-c", "import kcompat; print(kcompat.__file__)"],
                           env={**os.environ, "PYTHONPATH": args.baseline, "PYTHONSAFEPATH": "1"},
                           cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                           text=True, check=True)
    if not probe.stdout.startswith(str(Path(args.baseline).resolve())):
        raise SystemExit(f"the baseline broker would not run {args.baseline}: {probe.stdout}")
    rates: dict[str, list[float]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for t, (name, tree) in enumerate(trees.items()):
            env = {"PYTHONPATH": tree, "PYTHONSAFEPATH": "1"} if tree else {}  # not the cwd
            broker = Broker(workdir / f"plain-{r}-{t}", extra_args=FLAGS, env=env).start()
            try:
                create_topic(broker.bootstrap, "p", 1)
                producer_perf(broker.bootstrap, "p", 100_000, "1")  # warm-up
                fig = producer_perf(broker.bootstrap, "p", args.records, "1")
                rates[name].append(fig["mib_s"])
                print(f"round {r + 1} {name}: {fig['mib_s']:.1f} MiB/s", flush=True)
            finally:
                broker.close()
    this, base = (statistics.median(v) for v in rates.values())
    return [f"* plain-topic produce (ProducerPerformance, {args.records} x 1 KiB, acks=1, "
            f"1 partition), median of {args.rounds}: this tree {this:.1f} MiB/s, baseline "
            f"{base:.1f} MiB/s — ratio {this / base:.2f} (rounds: "
            + "; ".join(f"{k}: {', '.join(f'{x:.1f}' for x in v)}" for k, v in rates.items())
            + f"); load {loadavg()}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pending", type=int, default=100_000)
    ap.add_argument("--spread-s", type=float, default=60.0)
    ap.add_argument("--lead-s", type=float, default=30.0,
                    help="first due time after the produce starts (room to ingest)")
    ap.add_argument("--baseline", help="a kcompat checkout without the extensions")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--skip-delayed", action="store_true")
    args = ap.parse_args()
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kcompat-bench-delayed-") as tmp:
        if not args.skip_delayed:
            lines += delayed(args, Path(tmp))
        if args.baseline:
            lines += plain_ratio(args, Path(tmp))
    print("\n".join(lines))
    results = Path(__file__).with_name("RESULTS.md")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cmd = " ".join(["bench/delayed.py", *sys.argv[1:]])
    with results.open("a") as f:
        f.write(f"\n## Delayed delivery (issue 13) — {stamp}\n\n`{cmd}`; "
                f"{'; '.join(machine())}\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
