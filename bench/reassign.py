"""Partition reassignment under a replication throttle (issue 19): how long a
large partition takes to move and what it costs the producers meanwhile,
kcompat side by side with a 3-node Apache Kafka 4.4.0 KRaft cluster in the same run.

Not a test: it asserts nothing, prints figures, appends a section to
bench/RESULTS.md and ends with one ``reassign: ...`` line.

    .venv/bin/python bench/reassign.py                       # 1 GiB at 10 MiB/s
    .venv/bin/python bench/reassign.py --size-mib 200 --side kcompat

Per side (Apache Kafka first, then kcompat), 3 brokers (Kafka: ``KafkaReferenceCluster``,
3 combined broker+controller nodes; kcompat: ``compat_tests._cluster.Cluster`` with
``kcompat.flush.mode=never`` as in ``compare.py``'s cluster part):

* ``big``: one partition, replicas [1, 2], filled with ``--size-mib`` of
  incompressible 1 KiB records (confluent-kafka, acks=all, linger.ms=20);
* ``probe``: one partition on [1, 2, 3] led by broker 1 (the broker the move
  reads from), where a probe producer (acks=all, one 1 KiB record every 10 ms,
  ``linger.ms=0``) measures the delivery latency a producer sees;
* baseline: the probe alone for ``--baseline-s`` (20 s);
* the throttle: ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` = ``--rate-mib`` MiB/s on every broker
  (IncrementalAlterConfigs of BROKER "1".."3"), and on Kafka also
  ``leader/follower.replication.throttled.replicas=*`` on ``big`` (Kafka throttles
  only the replicas listed; kcompat throttles every replica catching up);
* the move: ``kcompat topics reassign big --partition 0 --replicas 2,3 --wait``
  (the CLI's AlterPartitionReassignments / ListPartitionReassignments, the same
  requests against both) while the probe runs; time from the request to the end
  of the reassignment (ListPartitionReassignments empty); then the replicas are
  checked (Metadata lists [2, 3]) and the probe's p50 / p99 / max during the move
  are set against the baseline's.

Target (issue 19), printed as met / not met, never asserted: a 1 GiB partition
under a 10 MiB/s throttle moves in about 100 s with the producer's p99 within
1.5x of the unthrottled baseline.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from bench.compare import loadavg, machine  # noqa: E402
from compat_tests._cluster import Cluster  # noqa: E402
from compat_tests.java._jvm import KAFKA_VERSION  # noqa: E402
from compat_tests.java.kafka_reference import KafkaReferenceCluster  # noqa: E402

KCOMPAT_ARGS = ("--set", "kcompat.flush.mode=never")
RECORD = 1024
PROBE_EVERY_S = 0.01


@dataclass
class Result:
    side: str
    fill_s: float = 0.0
    move_s: float | None = None
    replicas_after: list[int] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)  # probe latencies, ms
    during: list[float] = field(default_factory=list)
    error: str = ""


class Probe:
    """One acks=all record every 10 ms to ``probe``; delivery latencies in ms."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all",
                                  "log_level": 0})
        self.latencies: list[float] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._value = os.urandom(RECORD)

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            # open loop: one record every PROBE_EVERY_S whatever the latency (serving
            # delivery reports meanwhile), not one as soon as the last is acknowledged
            while (left := due - time.monotonic()) > 0:
                self.producer.poll(left)
            due = max(due + PROBE_EVERY_S, time.monotonic())
            sent = time.monotonic()

            def done(err: Any, _msg: Any, sent: float = sent) -> None:
                if err is None:
                    self.latencies.append((time.monotonic() - sent) * 1000)
                else:
                    self.failed += 1

            self.producer.produce("probe", self._value, partition=0, on_delivery=done)
            self.producer.poll(0)
        self.producer.flush(30)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def take(self) -> list[float]:
        out, self.latencies = self.latencies, []
        return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fill(bootstrap: str, size_mib: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                         "batch.size": 1 << 20, "log_level": 0})
    value = os.urandom(RECORD)
    started = time.monotonic()
    for _ in range(size_mib * 1024):
        while True:
            try:
                producer.produce("big", value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(600) == 0, "fill not acknowledged"
    return time.monotonic() - started


def set_throttle(admin: AdminClient, rate: int, kafka: bool) -> None:
    resources = [ConfigResource("BROKER", str(n), incremental_configs=[
        ConfigEntry(k, str(rate), incremental_operation=AlterConfigOpType.SET)
        for k in ("leader.replication.throttled.rate", "follower.replication.throttled.rate")])
        for n in (1, 2, 3)]
    if kafka:
        resources.append(ConfigResource("TOPIC", "big", incremental_configs=[
            ConfigEntry(k, "*", incremental_operation=AlterConfigOpType.SET)
            for k in ("leader.replication.throttled.replicas",
                      "follower.replication.throttled.replicas")]))
    for resource in resources:  # confluent-kafka: one BROKER resource per call
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)


def run_side(name: str, bootstrap: str, args: argparse.Namespace, kafka: bool) -> Result:
    result = Result(name)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for topic, replicas in (("big", [1, 2]), ("probe", [1, 2, 3])):
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(60)
    time.sleep(2)  # leaders elected
    print(f"  filling big-0 with {args.size_mib} MiB", flush=True)
    result.fill_s = fill(bootstrap, args.size_mib)
    probe = Probe(bootstrap).start()
    try:
        time.sleep(args.baseline_s)
        result.baseline = probe.take()
        set_throttle(admin, args.rate_mib * 1024 * 1024, kafka)
        print(f"  moving big-0 from [1, 2] to [2, 3] at {args.rate_mib} MiB/s", flush=True)
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "kcompat", "topics", "reassign", "big", "--partition", "0",
             "--replicas", "2,3", "--wait", "--bootstrap-server", bootstrap.split(",")[0],
             "--timeout-ms", str(int(args.move_timeout_s * 1000))],
            capture_output=True, text=True, timeout=args.move_timeout_s + 60)
        if run.returncode == 0:
            result.move_s = time.monotonic() - started
        else:
            result.error = run.stderr.strip()[-300:]
        result.during = probe.take()
    finally:
        probe.stop()
    md = admin.list_topics("big", timeout=30).topics["big"].partitions[0]
    result.replicas_after = list(md.replicas)
    return result


def report(results: list[Result], args: argparse.Namespace) -> tuple[list[str], str]:
    lines = [f"{args.size_mib} MiB partition (1 KiB records), [1, 2] -> [2, 3], throttle "
             f"{args.rate_mib} MiB/s; probe producer acks=all every 10 ms to a partition led "
             f"by broker 1", "",
             "| figure | " + " | ".join(r.side for r in results) + " |",
             "|---|" + "---|" * len(results)]

    def row(label: str, fn: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(fn(r) for r in results) + " |")

    row("fill (s)", lambda r: f"{r.fill_s:.1f}")
    row("move under the throttle (s)",
        lambda r: f"{r.move_s:.1f}" if r.move_s is not None else f"failed: {r.error}")
    row("expected at the rate (s)", lambda r: f"{args.size_mib / args.rate_mib:.0f}")
    row("replicas after", lambda r: str(r.replicas_after))
    row("probe p50 / p99 / max, baseline (ms)", lambda r: (
        f"{pct(r.baseline, .5):.1f} / {pct(r.baseline, .99):.1f} / "
        f"{max(r.baseline, default=float('nan')):.1f}"))
    row("probe p50 / p99 / max, during the move (ms)", lambda r: (
        f"{pct(r.during, .5):.1f} / {pct(r.during, .99):.1f} / "
        f"{max(r.during, default=float('nan')):.1f}"))
    row("p99 during / baseline", lambda r: f"{pct(r.during, .99) / pct(r.baseline, .99):.2f}")
    finals = []
    for r in results:
        ratio = pct(r.during, .99) / pct(r.baseline, .99)
        met = (r.move_s is not None and r.move_s <= 1.5 * args.size_mib / args.rate_mib
               and ratio <= 1.5)
        finals.append(f"{r.side.split()[0].lower()}: move={r.move_s or 0:.0f}s "
                      f"p99x={ratio:.2f} target={'met' if met else 'not met'}")
    return lines, "reassign: " + "; ".join(finals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rate-mib", type=int, default=10)
    ap.add_argument("--baseline-s", type=float, default=20.0)
    ap.add_argument("--move-timeout-s", type=float, default=600.0)
    ap.add_argument("--side", choices=("kafka", "kcompat", "both"), default="both")
    ap.add_argument("--kafka-heap", default="1g")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    loads = [loadavg()]
    workdir = Path(tempfile.mkdtemp(prefix="kcompat-bench-reassign-"))
    results: list[Result] = []
    try:
        if args.side in ("kafka", "both"):
            print(f"Apache Kafka {KAFKA_VERSION}, 3 KRaft nodes:", flush=True)
            kafka = KafkaReferenceCluster(workdir / "kafka", size=3, heap=args.kafka_heap)
            kafka.start()
            try:
                results.append(run_side(f"Apache Kafka {KAFKA_VERSION}", kafka.bootstrap,
                                        args, kafka=True))
            finally:
                kafka.close()
        if args.side in ("kcompat", "both"):
            print("kcompat, 3 brokers:", flush=True)
            cluster = Cluster(workdir / "kcompat", size=3, extra_args=KCOMPAT_ARGS)
            cluster.start()
            try:
                results.append(run_side("kcompat", cluster.live_bootstrap(), args, kafka=False))
            finally:
                cluster.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    loads.append(loadavg())
    lines, final = report(results, args)
    head = [*machine(), f"load average before / after: {loads[0]} / {loads[1]}"]
    print("\n".join([*head, "", *lines]))
    if not args.no_results:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        cmd = " ".join(["bench/reassign.py", *sys.argv[1:]])
        with open(args.results, "a") as f:
            f.write(f"\n## Partition reassignment under a throttle (issue 19) — {stamp}\n\n"
                    f"`{cmd}`\n\n" + "; ".join(head) + "\n\n" + "\n".join(lines)
                    + "\n\n`" + final + "`\n")
    print(final)


if __name__ == "__main__":
    main()
