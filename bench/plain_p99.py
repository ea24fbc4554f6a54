"""A plain producer's acks=all latency beside a saturating producer: kcompat and Apache Kafka.

Issue 31 asks that a plain producer's p99 under extension load stay within twice
its unloaded p99, and ``soak.py`` measures it on kcompat alone. This bench gives
the same measurement its reference: the same probe, the same loads, one broker
after the other on this machine, Apache Kafka 4.4.0 included. Per side:

* a fresh single broker: Apache Kafka (``KafkaReference``, its defaults: no fsync
  on acknowledgement), kcompat with its default ``kcompat.flush.mode=acks_all``
  (fsync before an acks=all answer), and kcompat with ``flush.mode=never`` (Kafka's
  durability);
* a warm-up that is not counted (``--warm`` records of the plain load: Kafka's JIT);
* the probe: a process of its own (its own client and connection) that sends one
  acks=all record of 100 B every 100 ms to a 1-partition topic and waits for its
  ack, as ``soak.py``'s plain producer does, through three phases: idle (``--idle-s``),
  a plain load, then a delayed load;
* the loads: ``soak.produce``, confluent-kafka as fast as it goes, acks=all,
  ``--records`` of 100 B to 6 partitions; the delayed load carries ``kc-delay-ms``
  5..60 s on every record (to Kafka those are headers like any other: the same bytes,
  no extension work).

It prints, per side and phase, the probe's p50 / p99 / max and its p99 against the
idle phase's, with the load's rate; ``--results`` appends them to bench/RESULTS.md.

    .venv/bin/python bench/plain_p99.py                 # ~5 min
    .venv/bin/python bench/plain_p99.py --sides kcompat --records 300000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import KAFKA_BENCH_OVERRIDES, KAFKA_HEAP, loadavg  # noqa: E402
from bench.soak import (  # noqa: E402
    BROKER_FLAGS,
    PARTITIONS,
    PROBE_TIMEOUT_S,
    create_topic,
    machine_line,
    pct,
    produce,
    steady_produce,
    tree_line,
)
from compat_tests._broker import Broker  # noqa: E402

SIDES = ("kafka", "kcompat", "kcompat-never")
PHASES = ("idle", "plain", "delayed")


def probe_main(out_path: str, stop_path: str, bootstrap: str, topic: str) -> None:
    """The probe process: ``soak.steady_produce`` until ``stop_path`` exists, a JSON
    line per record (its send time and latency)."""
    with open(out_path, "a", buffering=1) as out:
        steady_produce(bootstrap, topic, lambda: os.path.exists(stop_path),
                       lambda rec: out.write(json.dumps(rec) + "\n"))


def delayed_headers(n: int) -> list[list[tuple[str, bytes]]]:
    """Each record's ``kc-delay-ms``, made ahead: the load's client does no more per
    record than for the plain load."""
    rng = random.Random(31)
    return [[("kc-delay-ms", b"%d" % rng.randint(5_000, 60_000))] for _ in range(n)]


def run_side(side: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One broker, its warm-up, the probe through idle, plain and delayed phases."""
    if side == "kafka":
        from compat_tests.java.kafka_reference import KafkaReference

        broker: Any = KafkaReference(work / "kafka", heap=KAFKA_HEAP,
                                     overrides=KAFKA_BENCH_OVERRIDES).start()
        bootstrap = broker.bootstrap
    else:
        flags = BROKER_FLAGS + (("--set", "kcompat.flush.mode=never")
                                if side == "kcompat-never" else ())
        broker = Broker(work / side, extra_args=flags)
        broker.start(timeout=60)
        bootstrap = broker.bootstrap
    try:
        for topic, parts in (("probe", 1), ("warm", PARTITIONS), ("plain", PARTITIONS),
                             ("delayed", PARTITIONS)):
            create_topic(bootstrap, topic, parts, 1)
        deadline = time.time() + 600
        headers = delayed_headers(args.records)
        warm = produce(bootstrap, "warm", args.warm, deadline)
        print(f"  {side}: warm-up {warm.rate:,.0f} rec/s", flush=True)
        out, stop = work / f"{side}.probe.jsonl", work / f"{side}.probe.stop"
        probe = subprocess.Popen([sys.executable, __file__, "--probe", str(out), str(stop),
                                  bootstrap, "probe"])
        marks = {"idle": time.time()}
        time.sleep(args.idle_s)
        marks["plain"] = time.time()
        plain = produce(bootstrap, "plain", args.records, deadline)
        marks["delayed"] = time.time()
        delayed = produce(bootstrap, "delayed", args.records, deadline,
                          headers_of=headers.__getitem__)
        marks["end"] = time.time()
        stop.touch()
        probe.wait(timeout=PROBE_TIMEOUT_S + 10)
    finally:
        broker.close()
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    by_phase: dict[str, list[float]] = {p: [] for p in PHASES}
    failed = 0
    for s in samples:
        failed += not s["ok"]
        for phase, nxt in zip(PHASES, (*PHASES[1:], "end"), strict=True):
            if marks[phase] <= s["t"] < marks[nxt] and s["ok"]:
                by_phase[phase].append(s["s"] * 1000)
    return {"side": side, "rates": {"plain": plain.rate, "delayed": delayed.rate},
            "failed": failed + plain.failed + delayed.failed, "phases": by_phase}


def report(results: list[dict[str, Any]], args: argparse.Namespace, load: list[str]) -> list[str]:
    lines = [f"`bench/plain_p99.py --records {args.records} --warm {args.warm} "
             f"--idle-s {args.idle_s:g}`; one broker per side, one after the other", "",
             machine_line(), "", tree_line(), "", "load averages: " + " | ".join(load), "",
             "| side | phase | load rec/s | probe samples | p50 | p99 | max | p99 / idle p99 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        idle99 = pct(r["phases"]["idle"], 0.99)
        for phase in PHASES:
            xs = r["phases"][phase]
            rate = "-" if phase == "idle" else f"{r['rates'][phase]:,.0f}"
            if not xs:
                lines.append(f"| {r['side']} | {phase} | {rate} | 0 | - | - | - | - |")
                continue
            lines.append(f"| {r['side']} | {phase} | {rate} | {len(xs)} | {pct(xs, 0.5):.1f} ms | "
                         f"{pct(xs, 0.99):.1f} ms | {max(xs):.1f} ms | "
                         f"{pct(xs, 0.99) / idle99:.1f}x |")
        if r["failed"]:
            lines.append(f"| {r['side']} | failed records | {r['failed']} | | | | | |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sides", default=",".join(SIDES), help=f"of {', '.join(SIDES)}")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per load")
    ap.add_argument("--warm", type=int, default=2_000_000, help="warm-up records per side")
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--results", action="store_true", help="append to bench/RESULTS.md")
    ap.add_argument("--probe", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        probe_main(*args.probe)
        return
    sides = [s for s in args.sides.split(",") if s]
    unknown = set(sides) - set(SIDES)
    if unknown:
        ap.error(f"unknown side(s): {', '.join(sorted(unknown))}")
    load = [loadavg()]
    results = []
    with tempfile.TemporaryDirectory(prefix="kc-plain-p99-") as tmp:
        for side in sides:
            print(f"== {side}", flush=True)
            results.append(run_side(side, Path(tmp), args))
            load.append(loadavg())
    lines = report(results, args, load)
    print("\n".join(lines))
    if args.results:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with open(ROOT / "bench" / "RESULTS.md", "a") as f:
            f.write(f"\n## A plain producer's p99 beside a saturating producer, kcompat and "
                    f"Apache Kafka (issue 31) — {stamp}\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
