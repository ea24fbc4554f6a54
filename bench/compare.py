"""kcompat against Apache Kafka on this machine: same run, same client, ratios.

Not a test: it prints a report, appends it to bench/RESULTS.md and ends with one
line ``ratios: produce=X consume=Y p99=Z rss=W`` (kcompat divided by Kafka).

    .venv/bin/python bench/compare.py            # full run (~20-30 min on 2 cores)
    .venv/bin/python bench/compare.py --quick    # < 5 min: headline ratios, acks=1 and all
    .venv/bin/python bench/compare.py --cluster-only   # only the 3-broker RF 3 part (~10 min)

How it works. Apache Kafka 4.4 (``compat_tests.java.kafka_reference.KafkaReference``,
single-node KRaft, jars from Maven Central) is started first, measured, and
stopped; then a kcompat broker (``compat_tests._broker.Broker``) is started with
``--set kcompat.flush.mode=never`` and measured with the identical workloads.
Neither broker fsyncs on acknowledgement: Kafka's default flush policy
(``log.flush.interval.messages`` = Long.MAX_VALUE) leaves flushing to the OS, and
``never`` is kcompat's equivalent. The client is always Kafka's own perf tooling
from ``kafka-tools`` (ProducerPerformance, ConsumerPerformance, EndToEndLatency)
in a separate JVM, so it is identical for both brokers.

Workloads (full run; ``--quick`` keeps 1 partition, acks=1 and acks=all):

* produce: N records of 1 KiB, ``batch.size=65536 linger.ms=5``, unthrottled,
  acks=1 / acks=all x 1 / 6 partitions (ProducerPerformance records/s);
* consume: the acks=1 topics from earliest with ConsumerPerformance
  (``fetch.MB.sec``: time after the group join, so the join is not counted);
* produce latency p50/p99/p99.9 with ProducerPerformance throttled to half of
  Kafka's measured maximum for the same configuration (Kafka runs first);
* end-to-end latency (send -> consumer receives) with EndToEndLatency;
* broker memory: peak RSS (VmHWM) and RSS at the end, from /proc/<pid>/status;
* broker CPU seconds per workload from /proc/<pid>/stat (what bounds it);
* replication (``--cluster``, on by default for the full run, off for ``--quick``):
  the same workloads once more on a 3-broker cluster per side, every topic with
  replication factor 3 — Kafka as 3 KRaft nodes with combined broker+controller
  roles (``KafkaReferenceCluster``, -Xmx512m each, internal topics RF 3,
  min.insync.replicas=2), kcompat as ``compat_tests._cluster.Cluster`` (3 brokers
  in Raft cluster mode, flush.mode=never — but its Raft rounds still fsync every
  replicated entry on each replica, see the report's flush line). Kafka's cluster runs first and the
  latency runs are throttled to half of *its* maximum; broker CPU and RSS are
  summed over the 3 brokers. A workload that fails on one side is reported as
  FAILED with the reason instead of ending the run. Note that acks=all is not
  the same wait: Kafka waits for every in-sync replica (all 3 when healthy),
  kcompat for the Raft commit (a majority, 2 of 3). A line
  ``cluster ratios: ...`` sums it up.

``--profile`` (on by default for the full run) starts one more kcompat broker
and records it with py-spy during a produce run and a consume run, then prints
the top frames by own time and by inclusive time.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compat_tests._broker import Broker, unique_topic  # noqa: E402
from compat_tests._cluster import Cluster  # noqa: E402
from compat_tests.java._jvm import KAFKA_VERSION, java_bin, reference_classpath  # noqa: E402
from compat_tests.java.kafka_reference import KafkaReference, KafkaReferenceCluster  # noqa: E402

TOOLS = "org.apache.kafka.tools"
RECORD_BYTES = 1024
PRODUCER_PROPS = ("batch.size=65536", "linger.ms=5")
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS and the 512M heap its tool scripts use.
CLIENT_JVM = ("-Xmx512m", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
              "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
              "-Djava.awt.headless=true")
KAFKA_HEAP = "1g"  # kafka-server-start.sh's default -Xmx1G
KCOMPAT_ARGS = ("--set", "kcompat.flush.mode=never", "--set", "group.initial.rebalance.delay.ms=0",
                "--set", "admin.port=-1")
CLUSTER_SIZE = 3
CLUSTER_KAFKA_HEAP = "512m"  # per JVM: 3 of them share the machine with the clients
CLUSTER_KCOMPAT_ARGS = ("--set", "kcompat.flush.mode=never",
                        "--set", "group.initial.rebalance.delay.ms=0")  # + _cluster.Cluster's
KCOMPAT_FSYNC_ARGS = ("--set", "group.initial.rebalance.delay.ms=0", "--set", "admin.port=-1")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- process figures from /proc ---------------------------------------------------

def proc_status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# -- running Kafka's tools ----------------------------------------------------------

class ToolError(RuntimeError):
    pass


def run_tool(main: str, *args: str, timeout: float = 900) -> str:
    cmd = [java_bin(), *CLIENT_JVM, "-cp", reference_classpath(), f"{TOOLS}.{main}", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise ToolError(f"{main} exited {out.returncode}\n{out.stdout[-3000:]}\n"
                        f"{out.stderr[-3000:]}")
    return out.stdout


_PP = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def producer_perf(bootstrap: str, topic: str, n: int, acks: str, throughput: int = -1
                  ) -> dict[str, float]:
    out = run_tool("ProducerPerformance", "--topic", topic, "--num-records", str(n),
                   "--record-size", str(RECORD_BYTES), "--throughput", str(throughput),
                   "--command-property", f"bootstrap.servers={bootstrap}", f"acks={acks}",
                   *PRODUCER_PROPS)
    found = [m for m in map(_PP.search, out.splitlines()) if m]
    if not found:
        raise ToolError(f"no ProducerPerformance summary in:\n{out[-3000:]}")
    m = found[-1]
    if int(m.group(1)) != n:
        raise ToolError(f"ProducerPerformance sent {m.group(1)} of {n}")
    keys = ("records", "rec_s", "mib_s", "avg_ms", "max_ms", "p50", "p95", "p99", "p999")
    return dict(zip(keys, (float(g) for g in m.groups()), strict=True))


def consumer_perf(bootstrap: str, topic: str, n: int) -> dict[str, float]:
    out = run_tool("ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                   "--num-records", str(n), "--timeout", "30000", "--group", f"perf-{topic}")
    lines = [ln for ln in out.splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln.startswith("start.time"))
    names = [h.strip() for h in lines[head].split(",")]
    values = [v.strip() for v in lines[head + 1].split(",")]
    row = dict(zip(names, values, strict=False))
    if int(row["data.consumed.in.nMsg"]) != n:
        raise ToolError(f"ConsumerPerformance consumed {row['data.consumed.in.nMsg']} of {n}")
    return {"fetch_mib_s": float(row["fetch.MB.sec"]), "fetch_rec_s": float(row["fetch.nMsg.sec"]),
            "mib_s": float(row["MB.sec"]), "rebalance_ms": float(row["rebalance.time.ms"]),
            "fetch_ms": float(row["fetch.time.ms"])}


_E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")
_E2E_PCT = re.compile(r"50th = (\d+), 99th = (\d+), 99.9th = (\d+)")


def end_to_end(bootstrap: str, topic: str, n: int, acks: str) -> dict[str, float]:
    out = run_tool("EndToEndLatency", bootstrap, topic, str(n), acks, str(RECORD_BYTES))
    avg, pct = _E2E_AVG.search(out), _E2E_PCT.search(out)
    if not avg or not pct:
        raise ToolError(f"no EndToEndLatency summary in:\n{out[-3000:]}")
    return {"avg_ms": float(avg.group(1)), "p50": float(pct.group(1)),
            "p99": float(pct.group(2)), "p999": float(pct.group(3))}


def create_topic(bootstrap: str, topic: str, partitions: int, replication: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, partitions, replication)],
                        operation_timeout=30, request_timeout=30)[topic].result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # every partition in the metadata with a leader and, replicated, a full ISR
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (md is not None and md.error is None and len(md.partitions) == partitions
                and all(p.leader >= 0 and len(p.isrs) >= replication
                        for p in md.partitions.values())):
            return
        time.sleep(0.2)
    raise ToolError(f"topic {topic} did not appear with {partitions} partitions, "
                    f"a leader each and {replication} in-sync replicas")


# -- the plan -----------------------------------------------------------------------

@dataclass
class Plan:
    quick: bool
    records: int            # per unthrottled produce run
    latency_s: int          # seconds of the throttled produce run
    e2e_messages: int
    produce_cases: list[tuple[int, str]]   # (partitions, acks)
    latency_acks: list[str]
    e2e_acks: list[str]


def make_plan(quick: bool, records: int | None) -> Plan:
    if quick:
        return Plan(True, records or 300_000, 10, 1000, [(1, "1"), (1, "all")], ["1", "all"],
                    ["1", "all"])
    return Plan(False, records or 1_000_000, 30, 5000,
                [(1, "1"), (1, "all"), (6, "1"), (6, "all")], ["1", "all"], ["1", "all"])


@dataclass
class Target:
    name: str
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    cpu: dict[str, tuple[float, float]] = field(default_factory=dict)  # key -> (cpu s, wall s)
    peak_rss_kib: int = 0
    end_rss_kib: int = 0
    load: list[str] = field(default_factory=list)
    startup_s: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)  # key -> why it failed (tolerate)


def measure(target: Target, bootstrap: str, pid: int | list[int], plan: Plan,
            kafka: Target | None, only_produce: bool = False, replication: int = 1,
            tolerate: bool = False) -> None:
    """Run ``plan`` against one broker (``pid``) or a cluster (a list: CPU is summed).
    ``tolerate``: a failing workload is recorded in ``target.errors`` and skipped
    instead of ending the comparison (cluster mode, where kcompat is young)."""
    pids = pid if isinstance(pid, list) else [pid]

    def cpu_now() -> float:
        return sum(proc_cpu_s(p) for p in pids)

    def create(topic: str, parts: int) -> None:
        create_topic(bootstrap, topic, parts, replication)

    def timed(key: str, fn: Callable[[], dict[str, float]]) -> None:
        c0, t0 = cpu_now(), time.monotonic()
        try:
            target.figures[key] = fn()
        except (ToolError, subprocess.TimeoutExpired, KeyError, StopIteration, ValueError) as e:
            if not tolerate:
                raise
            target.errors[key] = " ".join(str(e).split())[:300] or type(e).__name__
            print(f"  {target.name:8s} {key:24s} FAILED: {target.errors[key]}", flush=True)
            return
        target.cpu[key] = (cpu_now() - c0, time.monotonic() - t0)
        print(f"  {target.name:8s} {key:24s} {fmt_row(target.figures[key])}  "
              f"broker cpu {target.cpu[key][0]:.1f}s/{target.cpu[key][1]:.1f}s", flush=True)

    target.load.append(loadavg())
    warm = unique_topic("warmup")
    create(warm, 1)
    producer_perf(bootstrap, warm, min(plan.records, 200_000), "1")  # JIT / page cache warm-up
    topics: dict[int, str] = {}
    for parts, acks in plan.produce_cases:
        topic = unique_topic(f"p{parts}-acks{acks}")
        create(topic, parts)
        timed(f"produce p{parts} acks={acks}",
              lambda t=topic, a=acks: producer_perf(bootstrap, t, plan.records, a))
        if acks == "1":
            topics[parts] = topic
    if only_produce:
        return
    for parts, topic in topics.items():
        timed(f"consume p{parts}", lambda t=topic: consumer_perf(bootstrap, t, plan.records))
    for acks in plan.latency_acks:
        ref_fig = (kafka or target).figures.get(f"produce p1 acks={acks}")
        if ref_fig is None:  # (tolerate) the maximum it is half of was not measured
            target.errors[f"latency p1 acks={acks}"] = "no maximum throughput to take half of"
            continue
        rate = max(int(ref_fig["rec_s"] / 2), 100)
        topic = unique_topic(f"lat-acks{acks}")
        create(topic, 1)
        timed(f"latency p1 acks={acks}",
              lambda t=topic, a=acks, r=rate: dict(
                  producer_perf(bootstrap, t, r * plan.latency_s, a, r), rate=r))
    for acks in plan.e2e_acks:
        topic = unique_topic(f"e2e-acks{acks}")
        create(topic, 1)
        timed(f"e2e p1 acks={acks}",
              lambda t=topic, a=acks: end_to_end(bootstrap, t, plan.e2e_messages, a))
    target.load.append(loadavg())


def fmt_row(fig: dict[str, float]) -> str:
    if "fetch_mib_s" in fig:
        return (f"{fig['fetch_mib_s']:7.1f} MiB/s {fig['fetch_rec_s']:9.0f} rec/s "
                f"(join {fig['rebalance_ms']:.0f} ms excluded)")
    if "rate" in fig:
        return (f"at {fig['rate']:.0f} rec/s: p50 {fig['p50']:.0f} p99 {fig['p99']:.0f} "
                f"p99.9 {fig['p999']:.0f} avg {fig['avg_ms']:.1f} max {fig['max_ms']:.0f} ms")
    if "rec_s" in fig:
        return (f"{fig['mib_s']:7.1f} MiB/s {fig['rec_s']:9.0f} rec/s "
                f"(p99 {fig['p99']:.0f} ms under saturation)")
    return (f"p50 {fig['p50']:.0f} p99 {fig['p99']:.0f} p99.9 {fig['p999']:.0f} "
            f"avg {fig['avg_ms']:.2f} ms")


def run_kafka(plan: Plan, workdir: Path) -> Target:
    target = Target("kafka")
    ref = KafkaReference(workdir / "kafka", heap=KAFKA_HEAP)
    t0 = time.monotonic()
    ref.start()
    target.startup_s = time.monotonic() - t0
    assert ref.proc is not None
    try:
        measure(target, ref.bootstrap, ref.proc.pid, plan, None)
        target.peak_rss_kib = proc_status_kib(ref.proc.pid, "VmHWM")
        target.end_rss_kib = proc_status_kib(ref.proc.pid, "VmRSS")
    finally:
        ref.close()
        shutil.rmtree(workdir / "kafka", ignore_errors=True)
    return target


def run_kcompat(name: str, args: tuple[str, ...], plan: Plan, workdir: Path, kafka: Target,
                only_produce: bool = False) -> Target:
    target = Target(name)
    broker = Broker(workdir / name, extra_args=args)
    t0 = time.monotonic()
    broker.start()
    target.startup_s = time.monotonic() - t0
    assert broker.pid is not None
    try:
        measure(target, broker.bootstrap, broker.pid, plan, kafka, only_produce)
        target.peak_rss_kib = proc_status_kib(broker.pid, "VmHWM")
        target.end_rss_kib = proc_status_kib(broker.pid, "VmRSS")
    finally:
        broker.close()
        shutil.rmtree(workdir / name, ignore_errors=True)
    return target


# -- 3-broker clusters, replication factor 3 -----------------------------------------

def sum_status_kib(pids: list[int], key: str) -> int:
    return sum(proc_status_kib(p, key) for p in pids)


def run_kafka_cluster(plan: Plan, workdir: Path) -> Target:
    target = Target("kafka-3")
    ref = KafkaReferenceCluster(workdir / "kafka-cluster", size=CLUSTER_SIZE,
                                heap=CLUSTER_KAFKA_HEAP)
    t0 = time.monotonic()
    ref.start()
    target.startup_s = time.monotonic() - t0
    try:
        measure(target, ref.bootstrap, ref.pids, plan, None, replication=CLUSTER_SIZE,
                tolerate=True)
        target.peak_rss_kib = sum_status_kib(ref.pids, "VmHWM")
        target.end_rss_kib = sum_status_kib(ref.pids, "VmRSS")
    finally:
        ref.close()
        shutil.rmtree(workdir / "kafka-cluster", ignore_errors=True)
    return target


def run_kcompat_cluster(plan: Plan, workdir: Path, kafka: Target) -> Target:
    target = Target("kc-3")
    cluster = Cluster(workdir / "kc-cluster", size=CLUSTER_SIZE, extra_args=CLUSTER_KCOMPAT_ARGS)
    t0 = time.monotonic()
    try:
        cluster.start()
        target.startup_s = time.monotonic() - t0
        pids = [b.pid for b in cluster.brokers.values() if b.pid is not None]
        measure(target, cluster.bootstrap, pids, plan, kafka, replication=CLUSTER_SIZE,
                tolerate=True)
        target.peak_rss_kib = sum_status_kib(pids, "VmHWM")
        target.end_rss_kib = sum_status_kib(pids, "VmRSS")
    finally:
        cluster.close()
        shutil.rmtree(workdir / "kc-cluster", ignore_errors=True)
    return target


def cluster_report(plan: Plan, kafka: Target, kc: Target) -> tuple[list[str], str]:
    lines = [
        f"cluster: {CLUSTER_SIZE} brokers on each side, every topic replication factor "
        f"{CLUSTER_SIZE}, one after the other on loopback of this one machine",
        f"  Kafka: {CLUSTER_SIZE} KRaft nodes, each combined broker+controller "
        f"(controller.quorum.voters over {CLUSTER_SIZE} controller ports), -Xmx{CLUSTER_KAFKA_HEAP} "
        f"G1 each; offsets/transaction topics RF {CLUSTER_SIZE}, min.insync.replicas=2; "
        "acks=all waits for every in-sync replica (3 in steady state)",
        f"  kcompat: compat_tests._cluster.Cluster, `{' '.join(CLUSTER_KCOMPAT_ARGS)}` + "
        "--node-id N, controller.quorum.voters, default.replication.factor=3; acks=all waits "
        "for the Raft commit (leader + 1 follower of 3); min.insync.replicas is not used",
        "  flush policy: Kafka defaults (no fsync anywhere on the produce/replication path); "
        "kcompat kcompat.flush.mode=never: no fsync of partition Raft entries either (only the "
        "metadata log and term/vote changes are synced, cluster/runtime.py _round)",
        f"  load average before/after: kafka {' / '.join(kafka.load)}; kcompat "
        f"{' / '.join(kc.load)}",
        f"  startup (all {CLUSTER_SIZE} ready): kafka {kafka.startup_s:.1f}s, "
        f"kcompat {kc.startup_s:.1f}s",
        "",
        f"{'metric (RF 3)':34s} {'kafka-3':>12s} {'kcompat-3':>12s} {'ratio':>7s}   "
        "cpu of all 3 brokers (kafka | kcompat)",
    ]

    def cell(t: Target, key: str, metric: str, unit: str) -> str:
        if key in t.figures:
            return f"{t.figures[key][metric]:11.1f}{unit:1s}"
        return f"{'FAILED' if key in t.errors else 'n/a':>11s}{unit:1s}"

    def cpu(t: Target, key: str) -> str:
        if key not in t.cpu:
            return "  -"
        c, w = t.cpu[key]
        return f"{100 * c / w:3.0f}%"

    def row(label: str, key: str, metric: str, unit: str = "") -> float | None:
        r = None
        if key in kc.figures and key in kafka.figures:
            r = ratio(kc.figures[key][metric], kafka.figures[key][metric])
        lines.append(f"{label:34s} {cell(kafka, key, metric, unit)} {cell(kc, key, metric, unit)} "
                     f"{fr(r):>7s}   {cpu(kafka, key)} of a core | {cpu(kc, key)}")
        return r

    headline: dict[str, float | None] = {}
    for parts, acks in plan.produce_cases:
        key = f"produce p{parts} acks={acks}"
        r = row(f"{key} (MiB/s)", key, "mib_s")
        if parts == 1:
            headline[f"produce_acks{acks}"] = r
    for parts in sorted({p for p, a in plan.produce_cases if a == "1"}):
        key = f"consume p{parts}"
        r = row(f"{key} (fetch MiB/s)", key, "fetch_mib_s")
        if parts == 1:
            headline["consume"] = r
    for acks in plan.latency_acks:
        key = f"latency p1 acks={acks}"
        if key not in kafka.figures:
            lines.append(f"produce latency acks={acks}: not measured "
                         f"({kafka.errors.get(key) or kc.errors.get(key) or 'no Kafka figure'})")
            continue
        rate = kafka.figures[key]["rate"]
        lines.append(f"produce latency acks={acks} at {rate:.0f} rec/s "
                     f"({rate * RECORD_BYTES / 1048576:.1f} MiB/s, half of Kafka-3's max):")
        for metric, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max_ms", "max")):
            r = row(f"  {label} (ms)", key, metric)
            if metric == "p99":
                headline[f"p99_acks{acks}"] = r
        if key in kc.figures:
            lines.append(f"  {'achieved rec/s':32s} {kafka.figures[key]['rec_s']:11.0f}  "
                         f"{kc.figures[key]['rec_s']:11.0f}")
        for t in (kafka, kc):
            got = t.figures.get(key, {}).get("rec_s", rate)
            if got < 0.97 * rate:
                lines.append(f"  ! {t.name} could not sustain {rate:.0f} rec/s (achieved "
                             f"{got:.0f}): its figures are queueing delay of a saturated "
                             "broker, not latency at equal load")
    for acks in plan.e2e_acks:
        key = f"e2e p1 acks={acks}"
        lines.append(f"end-to-end latency acks={acks} (EndToEndLatency, one message at a time):")
        for metric, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("avg_ms", "avg")):
            r = row(f"  {label} (ms)", key, metric)
            if metric == "p99":
                headline[f"e2e_p99_acks{acks}"] = r
    rss = ratio(kc.peak_rss_kib, kafka.peak_rss_kib)
    headline["rss"] = rss
    lines.append(f"{'peak RSS summed over 3 (MiB)':34s} {kafka.peak_rss_kib / 1024:11.1f}  "
                 f"{kc.peak_rss_kib / 1024:11.1f}  {fr(rss):>7s}")
    lines.append(f"{'RSS at the end, summed (MiB)':34s} {kafka.end_rss_kib / 1024:11.1f}  "
                 f"{kc.end_rss_kib / 1024:11.1f}  "
                 f"{fr(ratio(kc.end_rss_kib, kafka.end_rss_kib)):>7s}")
    for t in (kafka, kc):
        for key, why in t.errors.items():
            lines.append(f"FAILED {t.name} {key}: {why}")
    final = "cluster ratios: " + " ".join(f"{k}={fr(v)}" for k, v in headline.items())
    return lines, final


# -- profiling ----------------------------------------------------------------------


def py_spy_bin() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise ToolError("py-spy not installed (make bench installs the [bench] extra)")
    return found


def spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    # stderr to a file: py-spy keeps writing progress there, and an unread pipe
    # would fill up and stall the sampler.
    with open(out.with_suffix(".log"), "wb") as log:
        proc = subprocess.Popen([py_spy_bin(), "record", "--pid", str(pid), "--rate", "250",
                                 "--format", "raw", "--nolineno", "-o", str(out)],
                                stdout=log, stderr=subprocess.STDOUT)
    time.sleep(1.0)  # attached
    return proc


def stop_spy(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _frame_name(frame: str) -> str:
    # "handle (kcompat/broker/handlers/produce.py)" -> keep as is; drop site-packages prefixes
    return re.sub(r"\(.*?site-packages/", "(", frame)


def aggregate(raw: Path, top: int = 15) -> list[str]:
    """Top frames of a py-spy raw (collapsed) file: own time and inclusive time."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame_name(f) for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return ["(no samples)"]
    lines = [f"{total} samples of a busy broker (idle samples excluded)",
             "own time:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    lines.append("inclusive time (kcompat / kio / trio frames):")
    interesting = [(f, n) for f, n in incl.most_common()
                   if any(k in f for k in ("kcompat/", "kio/", "trio/", "crc32c"))]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in interesting[:top]]
    return lines


def profile(plan: Plan, workdir: Path) -> dict[str, list[str]]:
    broker = Broker(workdir / "profile", extra_args=KCOMPAT_ARGS).start()
    assert broker.pid is not None
    result: dict[str, list[str]] = {}
    try:
        topic = unique_topic("profile")
        create_topic(broker.bootstrap, topic, 1)
        for kind, fn in (
            ("produce p1 acks=1", lambda: producer_perf(broker.bootstrap, topic, plan.records, "1")),
            ("consume p1", lambda: consumer_perf(broker.bootstrap, topic, plan.records)),
        ):
            out = workdir / f"pyspy-{kind.split()[0]}.txt"
            c0, t0 = proc_cpu_s(broker.pid), time.monotonic()
            proc = spy(broker.pid, out)
            try:
                fig = fn()
            finally:
                stop_spy(proc)
            cpu, wall = proc_cpu_s(broker.pid) - c0, time.monotonic() - t0
            head = f"{kind}: {fmt_row(fig)} under py-spy; broker cpu {cpu:.1f}s in {wall:.1f}s"
            result[kind] = [head, *(aggregate(out) if out.exists() else
                                    ["py-spy wrote nothing: " +
                                     out.with_suffix(".log").read_text()[-500:]])]
            print("\n".join(result[kind]), flush=True)
    finally:
        broker.close()
        shutil.rmtree(workdir / "profile", ignore_errors=True)
    return result


# -- report -------------------------------------------------------------------------

def ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def fr(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def machine() -> list[str]:
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kib = proc_status_kib_meminfo()
    java = subprocess.run([java_bin(), "-version"], capture_output=True, text=True).stderr
    import confluent_kafka  # noqa: F401 (version only)
    return [
        f"machine: {os.cpu_count()} cores, {mem_kib / 1048576:.1f} GiB RAM, CPU {model}, "
        f"{platform.system()} {platform.release()}",
        f"versions: Python {platform.python_version()} (kcompat), {java.splitlines()[0]}, "
        f"Apache Kafka {KAFKA_VERSION} (broker and tools)",
    ]


def proc_status_kib_meminfo() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    return 0


def report(plan: Plan, kafka: Target, kc: Target, extra: Target | None,
           prof: dict[str, list[str]] | None) -> tuple[list[str], str]:
    lines = machine()
    lines += [
        "flush policy: no fsync on acknowledgement on either side — Kafka defaults "
        "(log.flush.interval.messages=Long.MAX_VALUE), kcompat --set kcompat.flush.mode=never",
        f"brokers: Kafka KRaft single node (combined broker+controller, -Xmx{KAFKA_HEAP} G1); "
        f"kcompat `{' '.join(KCOMPAT_ARGS)}` (a Raft quorum of one); both on loopback, "
        "one after the other",
        f"client: Kafka {KAFKA_VERSION} ProducerPerformance / ConsumerPerformance / "
        f"EndToEndLatency, JVM {' '.join(CLIENT_JVM)}",
        f"workload: {plan.records} x {RECORD_BYTES} B records per produce run, "
        f"producer {' '.join(PRODUCER_PROPS)} (no compression); latency runs {plan.latency_s} s "
        f"throttled to half of Kafka's max; EndToEndLatency {plan.e2e_messages} messages",
        f"load average before/after: kafka {' / '.join(kafka.load)}; "
        f"kcompat {' / '.join(kc.load)}",
        f"startup: kafka {kafka.startup_s:.1f}s, kcompat {kc.startup_s:.1f}s",
        "",
        f"{'metric':34s} {'kafka':>12s} {'kcompat':>12s} {'ratio':>7s}   broker cpu (kafka | kcompat)",
    ]

    def row(label: str, key: str, metric: str, unit: str = "") -> float | None:
        a, b = kc.figures[key][metric], kafka.figures[key][metric]
        r = ratio(a, b)
        ck, cc = kafka.cpu[key], kc.cpu[key]
        lines.append(f"{label:34s} {b:11.1f}{unit:1s} {a:11.1f}{unit:1s} {fr(r):>7s}   "
                     f"{100 * ck[0] / ck[1]:3.0f}% of a core | {100 * cc[0] / cc[1]:3.0f}%")
        return r

    headline: dict[str, float | None] = {}
    for parts, acks in plan.produce_cases:
        key = f"produce p{parts} acks={acks}"
        r = row(f"{key} (MiB/s)", key, "mib_s")
        if (parts, acks) == (1, "1"):
            headline["produce"] = r
    for parts in sorted({p for p, a in plan.produce_cases if a == "1"}):
        key = f"consume p{parts}"
        r = row(f"{key} (fetch MiB/s)", key, "fetch_mib_s")
        if parts == 1:
            headline["consume"] = r
    for acks in plan.latency_acks:
        key = f"latency p1 acks={acks}"
        rate = kafka.figures[key]["rate"]
        lines.append(f"produce latency acks={acks} at {rate:.0f} rec/s "
                     f"({rate * RECORD_BYTES / 1048576:.1f} MiB/s):")
        for metric, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max_ms", "max")):
            r = row(f"  {label} (ms)", key, metric)
            if acks == "1" and metric == "p99":
                headline["p99"] = r
        lines.append(f"  {'achieved rec/s':32s} {kafka.figures[key]['rec_s']:11.0f}  "
                     f"{kc.figures[key]['rec_s']:11.0f}")
    for acks in plan.e2e_acks:
        key = f"e2e p1 acks={acks}"
        lines.append(f"end-to-end latency acks={acks} (EndToEndLatency, one message at a time):")
        for metric, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("avg_ms", "avg")):
            row(f"  {label} (ms)", key, metric)
    rss = ratio(kc.peak_rss_kib, kafka.peak_rss_kib)
    headline["rss"] = rss
    lines.append(f"{'broker peak RSS, VmHWM (MiB)':34s} {kafka.peak_rss_kib / 1024:11.1f}  "
                 f"{kc.peak_rss_kib / 1024:11.1f}  {fr(rss):>7s}")
    lines.append(f"{'broker RSS at the end (MiB)':34s} {kafka.end_rss_kib / 1024:11.1f}  "
                 f"{kc.end_rss_kib / 1024:11.1f}  "
                 f"{fr(ratio(kc.end_rss_kib, kafka.end_rss_kib)):>7s}")
    lines.append("single node on both sides here; the 3-broker RF3 comparison is the "
                 "cluster section (full `make bench`, or `--cluster`)")
    if extra is not None:
        lines.append("")
        lines.append("extra: kcompat in its default flush mode (acks_all: acks=all waits for the "
                     "group-committed fsync; acks=1 does not fsync):")
        for key, fig in extra.figures.items():
            base = kafka.figures[key]["mib_s"]
            cpu = extra.cpu[key]
            lines.append(f"  {key:32s} {fig['mib_s']:7.1f} MiB/s  ratio to Kafka "
                         f"{fr(ratio(fig['mib_s'], base))}  (p99 {fig['p99']:.0f} ms under "
                         f"saturation, broker cpu {100 * cpu[0] / cpu[1]:.0f}%)")
    if prof:
        lines.append("")
        lines.append("py-spy profile of the kcompat broker (flush.mode=never):")
        for kind_lines in prof.values():
            lines += kind_lines
    final = ("ratios: " + " ".join(f"{k}={fr(headline.get(k))}"
                                   for k in ("produce", "consume", "p99", "rss")))
    return lines, final


def median_target(runs: list[Target]) -> Target:
    """Per-figure median over rounds (a single round is returned as it is)."""
    if len(runs) == 1:
        return runs[0]
    out = Target(runs[0].name, startup_s=statistics.median(r.startup_s for r in runs))
    for key, fig in runs[0].figures.items():
        out.figures[key] = {m: statistics.median(r.figures[key][m] for r in runs) for m in fig}
        out.cpu[key] = (statistics.median(r.cpu[key][0] for r in runs),
                        statistics.median(r.cpu[key][1] for r in runs))
    out.peak_rss_kib = int(statistics.median(r.peak_rss_kib for r in runs))
    out.end_rss_kib = int(statistics.median(r.end_rss_kib for r in runs))
    out.load = [x for r in runs for x in r.load]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="headline ratios only, < 5 minutes")
    ap.add_argument("--records", type=int, help="records per produce run")
    ap.add_argument("--rounds", type=int, default=None,
                    help="Kafka-then-kcompat rounds; figures are per-round medians "
                         "(default 2 for --quick, 1 for the full run)")
    ap.add_argument("--profile", action=argparse.BooleanOptionalAction, default=None,
                    help="py-spy the kcompat broker (default: on for the full run)")
    ap.add_argument("--fsync-extra", action=argparse.BooleanOptionalAction, default=None,
                    help="also run kcompat's default flush mode (default: on for the full run)")
    ap.add_argument("--cluster", action=argparse.BooleanOptionalAction, default=None,
                    help="also compare 3-broker clusters with replication factor 3 "
                         "(default: on for the full run, off for --quick)")
    ap.add_argument("--cluster-only", action="store_true",
                    help="only the 3-broker cluster comparison (skips the single-node one)")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()
    plan = make_plan(args.quick, args.records)
    do_profile = (not args.quick) if args.profile is None else args.profile
    rounds = args.rounds or (2 if args.quick else 1)
    do_extra = (not args.quick) if args.fsync_extra is None else args.fsync_extra
    do_cluster = args.cluster_only or ((not args.quick) if args.cluster is None else args.cluster)
    if args.cluster_only:
        run_cluster_only(plan, args)
        return
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="kcompat-compare-"))
    cluster_lines: list[str] = []
    try:
        kafka_runs, kc_runs = [], []
        for i in range(rounds):
            print(f"round {i + 1}/{rounds}: Apache Kafka {KAFKA_VERSION} ...", flush=True)
            kafka_runs.append(run_kafka(plan, workdir))
            print(f"round {i + 1}/{rounds}: kcompat (flush.mode=never) ...", flush=True)
            kc_runs.append(run_kcompat("kcompat", KCOMPAT_ARGS, plan, workdir, kafka_runs[-1]))
        kafka, kc = median_target(kafka_runs), median_target(kc_runs)
        extra = None
        if do_extra:
            print("kcompat (default flush mode acks_all) ...", flush=True)
            fsync_plan = Plan(plan.quick, plan.records, 0, 0,
                              [c for c in plan.produce_cases if c[1] == "all"], [], [])
            extra = run_kcompat("kc-fsync", KCOMPAT_FSYNC_ARGS, fsync_plan, workdir, kafka,
                                only_produce=True)
        prof = None
        if do_profile:
            print("profiling kcompat with py-spy ...", flush=True)
            prof = profile(plan, workdir)
        if do_cluster:
            cluster_lines = cluster_section(plan, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    lines, final = report(plan, kafka, kc, extra, prof)
    if cluster_lines:
        lines = [("replication: single node on both sides above; replication factor 3 on "
                  "3 brokers below" if ln.startswith("replication:") else ln) for ln in lines]
        lines += ["", *cluster_lines]
    if rounds > 1:
        lines.insert(2, f"rounds: {rounds} (Kafka then kcompat each round); every figure is the "
                        f"median over the rounds")
    elapsed = time.monotonic() - started
    lines.append(f"wall time of the whole comparison: {elapsed:.0f} s")
    print()
    print("\n".join(lines))
    if not args.no_results:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        with open(args.results, "a") as f:
            f.write(f"\n## bench/compare.py{' --quick' if plan.quick else ''} — {stamp}\n\n")
            f.write(f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`\n\n```\n")
            f.write("\n".join(lines) + "\n" + final + "\n```\n")
    print(final)


def cluster_section(plan: Plan, workdir: Path) -> list[str]:
    """Kafka-3 then kcompat-3, both measured with ``plan``; report lines (the last
    one is ``cluster ratios: ...``)."""
    # Anything that ends a side early (a cluster that does not start, a topic that
    # is never ready) is reported, not raised: the single-node report must survive.
    try:
        print(f"Apache Kafka {KAFKA_VERSION}, {CLUSTER_SIZE} KRaft nodes, RF {CLUSTER_SIZE} ...",
              flush=True)
        kafka = run_kafka_cluster(plan, workdir)
        print(f"kcompat, {CLUSTER_SIZE} brokers, RF {CLUSTER_SIZE} (flush.mode=never) ...",
              flush=True)
        kc = run_kcompat_cluster(plan, workdir, kafka)
    except Exception as e:  # noqa: BLE001 - see above
        why = " ".join(str(e).split())[:500]
        print(f"cluster comparison FAILED: {type(e).__name__}: {why}", flush=True)
        return [f"cluster ({CLUSTER_SIZE} brokers, RF {CLUSTER_SIZE}): FAILED: "
                f"{type(e).__name__}: {why}", "cluster ratios: n/a"]
    lines, final = cluster_report(plan, kafka, kc)
    return [*lines, final]


def run_cluster_only(plan: Plan, args: argparse.Namespace) -> None:
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="kcompat-compare-"))
    try:
        body = cluster_section(plan, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    final = body.pop()
    lines = machine()
    lines += [
        f"client: Kafka {KAFKA_VERSION} ProducerPerformance / ConsumerPerformance / "
        f"EndToEndLatency, JVM {' '.join(CLIENT_JVM)}",
        f"workload: {plan.records} x {RECORD_BYTES} B records per produce run, "
        f"producer {' '.join(PRODUCER_PROPS)} (no compression); latency runs {plan.latency_s} s "
        f"throttled to half of Kafka-3's max; EndToEndLatency {plan.e2e_messages} messages",
        *body,
        f"wall time of the whole comparison: {time.monotonic() - started:.0f} s",
    ]
    print()
    print("\n".join(lines))
    if not args.no_results:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        with open(args.results, "a") as f:
            f.write(f"\n## bench/compare.py --cluster-only{' --quick' if plan.quick else ''} "
                    f"— {stamp}\n\n")
            f.write(f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`\n\n```\n")
            f.write("\n".join(lines) + "\n" + final + "\n```\n")
    print(final)


if __name__ == "__main__":
    main()
