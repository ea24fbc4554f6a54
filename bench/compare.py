"""kcompat against Apache Kafka on this machine: same run, same client, ratios.

Not a test: it prints a report, appends it to bench/RESULTS.md and ends with one
line ``ratios: produce=X consume=Y p99=Z rss=W cpu_per_gib_produce=A
cpu_per_gib_consume=B`` (kcompat divided by Kafka; for the cpu-per-GiB ratios
lower is better, as for p99 and rss).

    .venv/bin/python bench/compare.py            # full steady-state run (~60-70 min on 2 cores)
    .venv/bin/python bench/compare.py --quick    # ~5 min: short runs, acks=1 and all
    .venv/bin/python bench/compare.py --cluster-only   # only the 3-broker RF 3 part (~25-30 min)
    .venv/bin/python bench/compare.py --only produce-acks1-1p,consume-1p,latency-acks1
                                                 # the headline workloads only (~13 min)

How it works. Apache Kafka 4.4 (``compat_tests.java.kafka_reference.KafkaReference``,
single-node KRaft, jars from Maven Central) is started first, measured, and
stopped; then a kcompat broker (``compat_tests._broker.Broker``) is started with
``--set kcompat.flush.mode=never`` and measured with the identical workloads.
Neither broker fsyncs on acknowledgement: Kafka's default flush policy
(``log.flush.interval.messages`` = Long.MAX_VALUE) leaves flushing to the OS, and
``never`` is kcompat's equivalent. The client is always Kafka's own perf tooling
from ``kafka-tools`` (ProducerPerformance, ConsumerPerformance, EndToEndLatency)
in a separate JVM, so it is identical for both brokers.

Steady state (the full run, ``--only`` and ``--cluster-only``; not ``--quick``).
Each side first does a warm-up that is not counted: it produces ``--records``
(default 1,500,000 x 1 KiB, ~10-15 s) to a topic of one partition and reads it
back once, so the broker JVM's JIT has compiled the produce and fetch paths, the
page cache holds the log, and kcompat's lazily imported modules are loaded. The
warm-up's 5-s progress windows after the first (or its overall rate) give the
warmed produce rate; every measured produce run is then sized to last at least
``--duration`` seconds (default 60): records = 1.15 x duration x the highest
rate seen so far on that side (the warm-up's or an earlier measured run's); a
run that still ends under 97 % of the duration (the broker got faster than the
estimate: the load of this shared machine changes) is not counted and is run
again, sized by its own rate (at most 3 attempts; the report says so). A
measured consume run reads the topic its acks=1 produce run just wrote, from
the earliest offset, with ConsumerPerformance, pass after pass (each pass a new
group) until the passes' fetch time adds up to the duration.
Each measured topic is deleted once used (Kafka with
``log.segment.delete.delay.ms=0``), and the next run starts only when the files
are gone, so the disk holds one run's data at a time (up to ~15 GiB).
The broker's CPU (/proc utime+stime, summed over the brokers of a cluster) is
read over each measured run; the report gives broker CPU-seconds per GiB
produced and per GiB consumed (GiB of record values, 1 KiB each, in and out;
RF 3 replication is inside the figure) next to throughput and latency.
``--quick`` keeps its short fixed runs (300,000 records, a 200,000-record
warm-up) and still reports cpu-per-GiB, from those short runs.

Workloads (full run; ``--quick`` keeps 1 partition, acks=1 and acks=all):

* produce: 1 KiB records, ``batch.size=65536 linger.ms=5``, unthrottled,
  acks=1 / acks=all x 1 / 6 partitions (ProducerPerformance records/s);
* several producers at once: 12 partitions written by 3 ProducerPerformance
  processes together (acks=1, the same properties), as separate applications
  would write one topic; the figure is all of them over the longest run
  (``produce p12 acks=1 x3``), and the broker CPU per GiB is of all of it;
* consume: the acks=1 topics from earliest with ConsumerPerformance
  (``fetch.MB.sec``: time after the group join, so the join is not counted);
* produce latency p50/p99/p99.9 with ProducerPerformance throttled to half of
  Kafka's measured maximum for the same configuration (Kafka runs first);
* end-to-end latency (send -> consumer receives) with EndToEndLatency;
* broker memory: peak RSS (VmHWM) and RSS at the end, from /proc/<pid>/status;
* broker CPU seconds per workload from /proc/<pid>/stat (what bounds it);
* replication (``--cluster``, on by default for the full run, off for ``--quick``):
  the same workloads once more, steady state as well, on a 3-broker cluster per side, every topic with
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

``--only NAME[,NAME...]`` restricts the plan (and turns the profile, the fsync
extra and the cluster part off unless asked for): ``produce-acks1-1p``,
``produce-acksall-1p``, ``produce-acks1-6p``, ``produce-acksall-6p``,
``produce-acks1-12p-x3``, ``consume-1p``, ``consume-6p``, ``latency-acks1``, ``latency-acksall``,
``e2e-acks1``, ``e2e-acksall``. A consume run brings the acks=1 produce run of its
partition count (it reads what that run wrote), a latency run the 1-partition
produce run of its acks (it is throttled to half of Kafka's maximum there).

Duration of the full run on this 2-core machine: per single-node side a
warm-up (30-50 s), 5 produce runs of >= 60 s (80-120 s in practice: the 1.15
margin, slower acks=all runs, now and then a run repeated because it was too
short), 2 consume runs of >= 60 s (70-100 s with the joins and the last pass),
2 latency runs of 30 s and 2 end-to-end runs: ~14-17 min per side, ~28-34 min
for both; the fsync extra ~5 min, the profile ~1 min, the cluster part
~25-30 min: ~60-70 min in all (``--duration 30`` takes ~25 min off). Measured:
``--only produce-acks1-1p,consume-1p,latency-acks1,produce-acksall-1p`` took
13 min, ``--cluster-only --only produce-acks1-1p,consume-1p`` 9 min,
at a load average of 10-22 on the 2 cores.

``--profile`` (on by default for the full run) starts one more kcompat broker
and records it with py-spy during a produce run and a consume run, then prints
the top frames by own time and by inclusive time.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
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
GIB = 1 << 30
STEADY_S = 60.0          # default length of a measured steady-state produce / consume run
STEADY_WARMUP = 1_500_000  # default records of the steady-state warm-up (~1.4 GiB)
SIZING_MARGIN = 1.15     # measured produce runs get this much more than the estimate asks
MAX_ATTEMPTS = 3         # a produce run shorter than planned is run again, sized by its rate
# Kafka deletes a deleted topic's files after file.delete.delay.ms (60 s by default);
# the steady-state runs delete each measured topic and wait for its files to go.
KAFKA_BENCH_OVERRIDES = {"log.segment.delete.delay.ms": "0"}


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


def publish(lines: list[str], *, append: bool) -> None:
    """Print a bench's section and, unless told not to, append it to bench/RESULTS.md."""
    print("\n".join(lines))
    if append:
        with (ROOT / "bench" / "RESULTS.md").open("a") as f:
            f.write("\n".join(lines) + "\n")


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


# ProducerPerformance's progress line every 5 s (no percentiles; the summary has them)
_PP_WINDOW = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec \(")


def producer_perf(bootstrap: str, topic: str, n: int, acks: str, throughput: int = -1,
                  config: Path | None = None) -> dict[str, float]:
    """One ProducerPerformance run; figures of its summary line, plus ``gib`` (record
    values sent), ``secs`` (its length) and ``window_rec_s`` (the best of its 5-s
    progress windows after the first, the warmed rate; the whole-run rate when it had
    none — a window cut short by the end of the run can be lower). ``config``: a
    client properties file (``--command-config``: a secured listener's settings)."""
    out = run_tool("ProducerPerformance", "--topic", topic, "--num-records", str(n),
                   "--record-size", str(RECORD_BYTES), "--throughput", str(throughput),
                   *_command_config(config),
                   "--command-property", f"bootstrap.servers={bootstrap}", f"acks={acks}",
                   *PRODUCER_PROPS)
    found = [m for m in map(_PP.search, out.splitlines()) if m]
    if not found:
        raise ToolError(f"no ProducerPerformance summary in:\n{out[-3000:]}")
    m = found[-1]
    if int(m.group(1)) != n:
        raise ToolError(f"ProducerPerformance sent {m.group(1)} of {n}")
    keys = ("records", "rec_s", "mib_s", "avg_ms", "max_ms", "p50", "p95", "p99", "p999")
    fig = dict(zip(keys, (float(g) for g in m.groups()), strict=True))
    windows = [float(w.group(2)) for w in map(_PP_WINDOW.match, out.splitlines())
               if w and "th," not in w.string]
    fig["window_rec_s"] = max(windows[1:] or windows or [fig["rec_s"]])
    fig["gib"] = n * RECORD_BYTES / GIB
    fig["secs"] = n / fig["rec_s"] if fig["rec_s"] else 0.0
    return fig


def producers_perf(bootstrap: str, topic: str, n: int, acks: str, producers: int
                   ) -> dict[str, float]:
    """``producers`` ProducerPerformance runs at once on one topic, ``n`` records
    each (one process per producer, as separate applications would be): the
    throughput of all together over the longest run, and the worst of their
    latencies."""
    if producers == 1:
        return producer_perf(bootstrap, topic, n, acks)
    with concurrent.futures.ThreadPoolExecutor(producers) as pool:
        figs = list(pool.map(lambda _i: producer_perf(bootstrap, topic, n, acks),
                             range(producers)))
    secs = max(f["secs"] for f in figs)
    records = float(n * producers)
    fig = {key: max(f[key] for f in figs) for key in ("max_ms", "p50", "p95", "p99", "p999")}
    fig.update(records=records, rec_s=records / secs, mib_s=records * RECORD_BYTES / (1 << 20) / secs,
               avg_ms=statistics.fmean(f["avg_ms"] for f in figs),
               window_rec_s=sum(f["window_rec_s"] for f in figs), gib=records * RECORD_BYTES / GIB,
               secs=secs, producers=float(producers))
    return fig


def _command_config(config: Path | None) -> tuple[str, ...]:
    return ("--command-config", str(config)) if config is not None else ()


def consumer_perf(bootstrap: str, topic: str, n: int, config: Path | None = None
                  ) -> dict[str, float]:
    out = run_tool("ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                   "--num-records", str(n), "--timeout", "30000", *_command_config(config),
                   "--group", unique_topic(f"perf-{topic}"))
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        head = next(i for i, ln in enumerate(lines) if ln.startswith("start.time"))
        names = [h.strip() for h in lines[head].split(",")]
        values = [v.strip() for v in lines[head + 1].split(",")]
        row = dict(zip(names, values, strict=False))
        row["data.consumed.in.nMsg"]  # noqa: B018 - the summary row is there
    except (StopIteration, IndexError, KeyError):
        raise ToolError(f"no ConsumerPerformance summary in:\n{out[-3000:]}") from None
    if int(row["data.consumed.in.nMsg"]) != n:
        raise ToolError(f"ConsumerPerformance consumed {row['data.consumed.in.nMsg']} of {n}")
    return {"fetch_mib_s": float(row["fetch.MB.sec"]), "fetch_rec_s": float(row["fetch.nMsg.sec"]),
            "mib_s": float(row["MB.sec"]), "rebalance_ms": float(row["rebalance.time.ms"]),
            "fetch_ms": float(row["fetch.time.ms"]), "gib": n * RECORD_BYTES / GIB,
            "secs": float(row["fetch.time.ms"]) / 1000, "passes": 1.0}


def consumer_passes(bootstrap: str, topic: str, n: int, min_s: float,
                    config: Path | None = None) -> dict[str, float]:
    """ConsumerPerformance over the whole topic (``n`` records), pass after pass with a
    new group each, until the passes' fetch time adds up to ``min_s`` (one pass when
    ``min_s`` is 0). Rates are over the summed fetch time; joins are not counted."""
    runs: list[dict[str, float]] = []
    while not runs or sum(r["secs"] for r in runs) < min_s:
        runs.append(consumer_perf(bootstrap, topic, n, config))
    if len(runs) == 1:
        return runs[0]
    fetch_s = sum(r["secs"] for r in runs)
    gib = sum(r["gib"] for r in runs)
    return {"fetch_mib_s": gib * 1024 / fetch_s, "fetch_rec_s": n * len(runs) / fetch_s,
            "mib_s": statistics.median(r["mib_s"] for r in runs),
            "rebalance_ms": statistics.median(r["rebalance_ms"] for r in runs),
            "fetch_ms": fetch_s * 1000, "gib": gib, "secs": fetch_s, "passes": float(len(runs))}


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


def delete_topic(bootstrap: str, topic: str, root: Path, base_bytes: int) -> None:
    """Delete ``topic`` and wait (up to 60 s) until the files under ``root`` (every data
    dir of the side) are back near ``base_bytes``, their size before it was created."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.delete_topics([topic], operation_timeout=30, request_timeout=30)[topic].result(60)
    deadline = time.monotonic() + 60
    while disk_bytes(root) > base_bytes + 256 * (1 << 20) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(1.0)  # the broker's own clean-up after the files are gone


def disk_bytes(root: Path) -> int:
    """Bytes allocated to the files under ``root`` (st_blocks; vanishing files skipped)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


# -- the plan -----------------------------------------------------------------------

@dataclass
class Plan:
    quick: bool
    records: int            # per produce run (quick); the warm-up's records (steady state)
    latency_s: int          # seconds of the throttled produce run
    e2e_messages: int
    produce_cases: list[tuple[int, str]]   # (partitions, acks)
    latency_acks: list[str]
    e2e_acks: list[str]
    consume_parts: list[int] = field(default_factory=list)  # reads the acks=1 topic of that count
    steady_s: float = 0.0   # > 0: measured produce / consume runs last at least this long
    only: list[str] = field(default_factory=list)  # --only as given (for the report)
    # (partitions, acks, producers): several producers at once, each a process of its own
    multi_cases: list[tuple[int, str, int]] = field(default_factory=list)

    def produce_runs(self) -> list[tuple[int, str, int]]:
        """Every produce run, one producer or several: (partitions, acks, producers)."""
        return [(parts, acks, 1) for parts, acks in self.produce_cases] + self.multi_cases

    @property
    def warmup_records(self) -> int:
        return self.records if self.steady_s else min(self.records, 200_000)


#: ``--only`` names of the full plan's workloads.
ONLY_NAMES = ("produce-acks1-1p", "produce-acksall-1p", "produce-acks1-6p", "produce-acksall-6p",
              "produce-acks1-12p-x3", "consume-1p", "consume-6p", "latency-acks1",
              "latency-acksall", "e2e-acks1", "e2e-acksall")
#: The full run's multi-producer case: 12 partitions written by 3 producers at once.
MULTI_CASE = (12, "1", 3)


def produce_key(parts: int, acks: str, producers: int = 1) -> str:
    """A produce run's name in the figures and the report."""
    return f"produce p{parts} acks={acks}" + (f" x{producers}" if producers > 1 else "")


def make_plan(quick: bool, records: int | None, steady_s: float = STEADY_S,
              only: list[str] | None = None) -> Plan:
    if quick:
        plan = Plan(True, records or 300_000, 10, 1000, [(1, "1"), (1, "all")], ["1", "all"],
                    ["1", "all"], [1])
    else:
        plan = Plan(False, records or STEADY_WARMUP, 30, 5000,
                    [(1, "1"), (1, "all"), (6, "1"), (6, "all")], ["1", "all"], ["1", "all"],
                    [1, 6], steady_s=steady_s, multi_cases=[MULTI_CASE])
    if not only:
        return plan
    bad = [n for n in only if n not in ONLY_NAMES]
    if bad:
        raise SystemExit(f"--only: unknown {', '.join(bad)} (known: {', '.join(ONLY_NAMES)})")

    def acks_of(name: str) -> str:
        return "all" if "acksall" in name else "1"

    cases = {(int(n.split("-")[2][:-1]), acks_of(n)) for n in only
             if n.startswith("produce-") and n.count("-") == 2}
    consume = sorted({int(n.split("-")[1][:-1]) for n in only if n.startswith("consume-")})
    cases |= {(parts, "1") for parts in consume}           # what the consume run reads
    latency = [a for a in plan.latency_acks if f"latency-acks{a}" in only]
    cases |= {(1, a) for a in latency}                     # the maximum it takes half of
    plan.produce_cases = [c for c in plan.produce_cases if c in cases]
    plan.consume_parts = [p for p in plan.consume_parts if p in consume]
    plan.latency_acks = latency
    plan.e2e_acks = [a for a in plan.e2e_acks if f"e2e-acks{a}" in only]
    plan.multi_cases = [c for c in plan.multi_cases
                        if f"produce-acks{c[1]}-{c[0]}p-x{c[2]}" in only]
    plan.only = list(only)
    return plan


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
    warmup: dict[str, float] = field(default_factory=dict)  # the uncounted warm-up's figures
    reruns: dict[str, int] = field(default_factory=dict)  # key -> runs discarded as too short


def measure(target: Target, bootstrap: str, pid: int | list[int], plan: Plan,
            kafka: Target | None, only_produce: bool = False, replication: int = 1,
            tolerate: bool = False, root: Path | None = None) -> None:
    """Run ``plan`` against one broker (``pid``) or a cluster (a list: CPU is summed).
    ``tolerate``: a failing workload is recorded in ``target.errors`` and skipped
    instead of ending the comparison (cluster mode, where kcompat is young).
    ``root``: the directory holding the side's data dirs; in steady state each
    measured topic is deleted after use and its files waited for there."""
    pids = pid if isinstance(pid, list) else [pid]
    steady = plan.steady_s > 0

    def cpu_now() -> float:
        return sum(proc_cpu_s(p) for p in pids)

    def create(topic: str, parts: int) -> int:
        base = disk_bytes(root) if root is not None else 0
        create_topic(bootstrap, topic, parts, replication)
        return base

    def drop(topic: str, base: int) -> None:
        if steady and root is not None:
            try:
                delete_topic(bootstrap, topic, root, base)
            except Exception as e:  # noqa: BLE001 - a leftover topic costs disk, not the run
                print(f"  {target.name:8s} could not delete {topic}: {e}", flush=True)

    def timed(key: str, fn: Callable[[], dict[str, float]]) -> None:
        c0, t0 = cpu_now(), time.monotonic()
        try:
            fig = fn()
        except (ToolError, subprocess.TimeoutExpired, KeyError, StopIteration, ValueError) as e:
            if not tolerate:
                raise
            target.errors[key] = " ".join(str(e).split())[:300] or type(e).__name__
            print(f"  {target.name:8s} {key:24s} FAILED: {target.errors[key]}", flush=True)
            return
        cpu, wall = cpu_now() - c0, time.monotonic() - t0
        target.cpu[key] = (cpu, wall)
        if fig.get("gib"):
            fig["cpu_per_gib"] = cpu / fig["gib"]
        target.figures[key] = fig
        per_gib = f", {fig['cpu_per_gib']:.2f} cpu-s/GiB" if "cpu_per_gib" in fig else ""
        print(f"  {target.name:8s} {key:24s} {fmt_row(fig)}  "
              f"broker cpu {cpu:.1f}s/{wall:.1f}s{per_gib}", flush=True)

    target.load.append(loadavg())
    # warm-up, not counted: the JVM's JIT, the page cache, kcompat's first imports
    warm = unique_topic("warmup")
    base = create(warm, 1)
    c0, t0 = cpu_now(), time.monotonic()
    wfig = producer_perf(bootstrap, warm, plan.warmup_records, "1")
    target.warmup = {"records": float(plan.warmup_records), "rec_s": wfig["rec_s"],
                     "window_rec_s": wfig["window_rec_s"]}
    if steady and not only_produce:
        cfig = consumer_perf(bootstrap, warm, plan.warmup_records)
        target.warmup["consume_mib_s"] = cfig["fetch_mib_s"]
    target.warmup["cpu_s"], target.warmup["wall_s"] = cpu_now() - c0, time.monotonic() - t0
    print(f"  {target.name:8s} {'warm-up (not counted)':24s} {plan.warmup_records} records, "
          f"{wfig['rec_s']:.0f} rec/s overall, {wfig['window_rec_s']:.0f} rec/s in its best "
          f"later 5-s window; {target.warmup['wall_s']:.0f} s", flush=True)
    drop(warm, base)
    rate = max(wfig["rec_s"], wfig["window_rec_s"])  # the estimate sizing the steady runs
    for parts, acks, producers in plan.produce_runs():
        key = produce_key(parts, acks, producers)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            # n: each producer's share of the run
            n = (int(SIZING_MARGIN * plan.steady_s * rate) if steady else plan.records) // producers
            topic = unique_topic(f"p{parts}-acks{acks}-x{producers}")
            base = create(topic, parts)
            timed(key, lambda t=topic, a=acks, n=n, k=producers: producers_perf(
                bootstrap, t, n, a, k))
            fig = target.figures.get(key)
            if not steady or fig is None or fig["secs"] >= 0.97 * plan.steady_s \
                    or attempt == MAX_ATTEMPTS:
                break
            # faster than the estimate: this run was one more warm-up; again, sized by it
            print(f"  {target.name:8s} {key:24s} lasted {fig['secs']:.0f} s < "
                  f"{plan.steady_s:.0f} s: not counted, run again sized by its rate", flush=True)
            rate = max(rate, fig["rec_s"])
            del target.figures[key], target.cpu[key]
            target.reruns[key] = target.reruns.get(key, 0) + 1
            drop(topic, base)
        if key in target.figures:
            rate = max(rate, target.figures[key]["rec_s"])
            if acks == "1" and producers == 1 and parts in plan.consume_parts \
                    and not only_produce:
                timed(f"consume p{parts}",
                      lambda t=topic, n=n: consumer_passes(bootstrap, t, n, plan.steady_s))
        drop(topic, base)
    if only_produce:
        target.load.append(loadavg())
        return
    for acks in plan.latency_acks:
        ref_fig = (kafka or target).figures.get(f"produce p1 acks={acks}")
        if ref_fig is None:  # (tolerate) the maximum it is half of was not measured
            target.errors[f"latency p1 acks={acks}"] = "no maximum throughput to take half of"
            continue
        rate_l = max(int(ref_fig["rec_s"] / 2), 100)
        topic = unique_topic(f"lat-acks{acks}")
        base = create(topic, 1)
        timed(f"latency p1 acks={acks}",
              lambda t=topic, a=acks, r=rate_l: dict(
                  producer_perf(bootstrap, t, r * plan.latency_s, a, r), rate=r))
        drop(topic, base)
    for acks in plan.e2e_acks:
        topic = unique_topic(f"e2e-acks{acks}")
        create(topic, 1)
        timed(f"e2e p1 acks={acks}",
              lambda t=topic, a=acks: end_to_end(bootstrap, t, plan.e2e_messages, a))
    target.load.append(loadavg())


def fmt_row(fig: dict[str, float]) -> str:
    if "fetch_mib_s" in fig:
        return (f"{fig['fetch_mib_s']:7.1f} MiB/s {fig['fetch_rec_s']:9.0f} rec/s "
                f"(join {fig['rebalance_ms']:.0f} ms excluded; {fig['gib']:.1f} GiB in "
                f"{fig['secs']:.0f} s, {fig['passes']:.0f} pass(es))")
    if "rate" in fig:
        return (f"at {fig['rate']:.0f} rec/s: p50 {fig['p50']:.0f} p99 {fig['p99']:.0f} "
                f"p99.9 {fig['p999']:.0f} avg {fig['avg_ms']:.1f} max {fig['max_ms']:.0f} ms")
    if "rec_s" in fig:
        return (f"{fig['mib_s']:7.1f} MiB/s {fig['rec_s']:9.0f} rec/s "
                f"(p99 {fig['p99']:.0f} ms under saturation; {fig['gib']:.1f} GiB in "
                f"{fig['secs']:.0f} s)")
    return (f"p50 {fig['p50']:.0f} p99 {fig['p99']:.0f} p99.9 {fig['p999']:.0f} "
            f"avg {fig['avg_ms']:.2f} ms")


def run_kafka(plan: Plan, workdir: Path) -> Target:
    target = Target("kafka")
    ref = KafkaReference(workdir / "kafka", heap=KAFKA_HEAP, overrides=KAFKA_BENCH_OVERRIDES)
    t0 = time.monotonic()
    try:  # a start that fails or is interrupted still stops the JVM
        ref.start()
        target.startup_s = time.monotonic() - t0
        assert ref.proc is not None
        measure(target, ref.bootstrap, ref.proc.pid, plan, None, root=ref.workdir)
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
    try:
        broker.start()
        target.startup_s = time.monotonic() - t0
        assert broker.pid is not None
        measure(target, broker.bootstrap, broker.pid, plan, kafka, only_produce,
                root=broker.workdir)
        target.peak_rss_kib = proc_status_kib(broker.pid, "VmHWM")
        target.end_rss_kib = proc_status_kib(broker.pid, "VmRSS")
    finally:
        broker.close()
        shutil.rmtree(workdir / name, ignore_errors=True)
    return target


# -- report tables (single node and cluster) ------------------------------------------

class Table:
    """Rows of ``metric  kafka  kcompat  ratio  broker cpu`` for two measured sides;
    a workload missing on a side shows FAILED (or n/a) and no ratio."""

    def __init__(self, lines: list[str], kafka: Target, kc: Target) -> None:
        self.lines, self.kafka, self.kc = lines, kafka, kc

    @staticmethod
    def cell(t: Target, key: str, metric: str, unit: str, prec: int) -> str:
        if key in t.figures and metric in t.figures[key]:
            return f"{t.figures[key][metric]:11.{prec}f}{unit:1s}"
        return f"{'FAILED' if key in t.errors else 'n/a':>11s}{unit:1s}"

    @staticmethod
    def cpu(t: Target, key: str) -> str:
        if key not in t.cpu:
            return "  -"
        c, w = t.cpu[key]
        return f"{100 * c / w:3.0f}%"

    def ratio_of(self, key: str, metric: str) -> float | None:
        a, b = self.kc.figures.get(key, {}), self.kafka.figures.get(key, {})
        return ratio(a[metric], b[metric]) if metric in a and metric in b else None

    def row(self, label: str, key: str, metric: str, unit: str = "", prec: int = 1,
            cpu: bool = True) -> float | None:
        r = self.ratio_of(key, metric)
        tail = f"   {self.cpu(self.kafka, key)} of a core | {self.cpu(self.kc, key)}" if cpu else ""
        self.lines.append(f"{label:34s} {self.cell(self.kafka, key, metric, unit, prec)} "
                          f"{self.cell(self.kc, key, metric, unit, prec)} {fr(r):>7s}{tail}")
        return r

    def volume(self, plan: Plan, key: str) -> None:
        """The run's length and GiB on each side, flagged when shorter than planned."""
        parts = []
        for t in (self.kafka, self.kc):
            fig = t.figures.get(key)
            if fig is None or "gib" not in fig:
                parts.append(f"{t.name} -")
                continue
            short = " (! shorter than planned)" if plan.steady_s and \
                fig["secs"] < 0.97 * plan.steady_s else ""
            passes = f", {fig['passes']:.0f} passes" if fig.get("passes", 1) > 1 else ""
            again = (f", after {t.reruns[key]} shorter run(s) not counted"
                     if t.reruns.get(key) else "")
            parts.append(f"{t.name} {fig['secs']:.0f} s, {fig['gib']:.1f} GiB{passes}{again}"
                         f"{short}")
        self.lines.append(f"  {'measured run':32s} {'; '.join(parts)}")

    def throughput(self, plan: Plan) -> dict[str, float | None]:
        """Produce and consume rows with cpu-s per GiB; returns ratios by workload key
        (``<key>`` throughput, ``<key> cpu`` cpu-s per GiB)."""
        out: dict[str, float | None] = {}
        for parts, acks, producers in plan.produce_runs():
            key = produce_key(parts, acks, producers)
            out[key] = self.row(f"{key} (MiB/s)", key, "mib_s")
            out[f"{key} cpu"] = self.row("  broker cpu-s per GiB produced", key, "cpu_per_gib",
                                         prec=2, cpu=False)
            self.volume(plan, key)
        for parts in plan.consume_parts:
            key = f"consume p{parts}"
            out[key] = self.row(f"{key} (fetch MiB/s)", key, "fetch_mib_s")
            out[f"{key} cpu"] = self.row("  broker cpu-s per GiB consumed", key, "cpu_per_gib",
                                         prec=2, cpu=False)
            self.volume(plan, key)
        return out


def steady_lines(plan: Plan, kafka: Target, kc: Target, max_of: str = "Kafka's") -> list[str]:
    """The report's description of the runs: steady state or --quick's short ones."""
    def warm(t: Target) -> str:
        w = t.warmup
        if not w:
            return f"{t.name} -"
        consume = f", read back at {w['consume_mib_s']:.0f} MiB/s" if "consume_mib_s" in w else ""
        return (f"{t.name} {w['records']:.0f} records at {w['rec_s']:.0f} rec/s "
                f"(best 5-s window after the first {w['window_rec_s']:.0f}){consume}, {w['wall_s']:.0f} s")

    if plan.steady_s:
        runs = (f"steady state: after an uncounted warm-up, every measured produce run was sized "
                f"to last >= {plan.steady_s:.0f} s ({SIZING_MARGIN} x {plan.steady_s:.0f} s x the "
                f"side's best rate so far) and every consume run reads the topic its acks=1 run "
                f"wrote, pass after pass, for >= {plan.steady_s:.0f} s of fetch time; each topic "
                "is deleted after use")
    else:
        runs = (f"short runs (--quick): {plan.records} x {RECORD_BYTES} B records per produce "
                "run and one consume pass, after a short warm-up; Kafka's JIT is still warming, "
                "so its cpu-s per GiB is high here — the steady-state run is the one to quote")
    only = [f"plan restricted with --only {','.join(plan.only)}"] if plan.only else []
    return [
        runs, *only,
        f"workload: {RECORD_BYTES} B records, producer {' '.join(PRODUCER_PROPS)} (no "
        f"compression); latency runs {plan.latency_s} s throttled to half of {max_of} max; "
        f"EndToEndLatency {plan.e2e_messages} messages; cpu-s per GiB = broker utime+stime "
        "over the run / GiB of record values (1 KiB each) produced or consumed",
        f"warm-up (not counted): {warm(kafka)}; {warm(kc)}",
    ]


# -- 3-broker clusters, replication factor 3 -----------------------------------------

def sum_status_kib(pids: list[int], key: str) -> int:
    return sum(proc_status_kib(p, key) for p in pids)


def run_kafka_cluster(plan: Plan, workdir: Path) -> Target:
    target = Target("kafka-3")
    ref = KafkaReferenceCluster(workdir / "kafka-cluster", size=CLUSTER_SIZE,
                                heap=CLUSTER_KAFKA_HEAP, overrides=KAFKA_BENCH_OVERRIDES)
    t0 = time.monotonic()
    try:
        ref.start()
        target.startup_s = time.monotonic() - t0
        measure(target, ref.bootstrap, ref.pids, plan, None, replication=CLUSTER_SIZE,
                tolerate=True, root=ref.workdir)
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
                tolerate=True, root=workdir / "kc-cluster")
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
        "metadata log and term/vote changes are synced, cluster/runtime.py _round); Kafka "
        f"{' '.join(f'{k}={v}' for k, v in KAFKA_BENCH_OVERRIDES.items())}",
        *(f"  {ln}" for ln in steady_lines(plan, kafka, kc, "Kafka-3's")),
        f"  load average before/after: kafka {' / '.join(kafka.load)}; kcompat "
        f"{' / '.join(kc.load)}",
        f"  startup (all {CLUSTER_SIZE} ready): kafka {kafka.startup_s:.1f}s, "
        f"kcompat {kc.startup_s:.1f}s",
        "",
        f"{'metric (RF 3)':34s} {'kafka-3':>12s} {'kcompat-3':>12s} {'ratio':>7s}   "
        "cpu of all 3 brokers (kafka | kcompat)",
    ]

    table = Table(lines, kafka, kc)
    row = table.row
    got = table.throughput(plan)
    headline: dict[str, float | None] = {}
    for acks in ("1", "all"):
        if (1, acks) in plan.produce_cases:
            headline[f"produce_acks{acks}"] = got.get(f"produce p1 acks={acks}")
    if 1 in plan.consume_parts:
        headline["consume"] = got.get("consume p1")
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
            achieved = t.figures.get(key, {}).get("rec_s", rate)
            if achieved < 0.97 * rate:
                lines.append(f"  ! {t.name} could not sustain {rate:.0f} rec/s (achieved "
                             f"{achieved:.0f}): its figures are queueing delay of a saturated "
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
    for acks in ("1", "all"):
        if (1, acks) in plan.produce_cases:
            headline[f"cpu_per_gib_produce_acks{acks}"] = got.get(f"produce p1 acks={acks} cpu")
    if 1 in plan.consume_parts:
        headline["cpu_per_gib_consume"] = got.get("consume p1 cpu")
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


def cpu_model() -> str:
    """The processor's model name (/proc/cpuinfo), '?' if not given."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def machine() -> list[str]:
    model = cpu_model()
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
        f"brokers: Kafka KRaft single node (combined broker+controller, -Xmx{KAFKA_HEAP} G1, "
        f"{' '.join(f'{k}={v}' for k, v in KAFKA_BENCH_OVERRIDES.items())}); "
        f"kcompat `{' '.join(KCOMPAT_ARGS)}` (a Raft quorum of one); both on loopback, "
        "one after the other",
        f"client: Kafka {KAFKA_VERSION} ProducerPerformance / ConsumerPerformance / "
        f"EndToEndLatency, JVM {' '.join(CLIENT_JVM)}",
        *steady_lines(plan, kafka, kc),
        f"load average before/after: kafka {' / '.join(kafka.load)}; "
        f"kcompat {' / '.join(kc.load)}",
        f"startup: kafka {kafka.startup_s:.1f}s, kcompat {kc.startup_s:.1f}s",
        "",
        f"{'metric':34s} {'kafka':>12s} {'kcompat':>12s} {'ratio':>7s}   broker cpu (kafka | kcompat)",
    ]
    table = Table(lines, kafka, kc)
    got = table.throughput(plan)
    headline: dict[str, float | None] = {
        "produce": got.get("produce p1 acks=1"), "consume": got.get("consume p1")}
    for acks in plan.latency_acks:
        key = f"latency p1 acks={acks}"
        if key not in kafka.figures:
            lines.append(f"produce latency acks={acks}: not measured "
                         f"({kafka.errors.get(key) or kc.errors.get(key) or 'no Kafka figure'})")
            continue
        rate = kafka.figures[key]["rate"]
        lines.append(f"produce latency acks={acks} at {rate:.0f} rec/s "
                     f"({rate * RECORD_BYTES / 1048576:.1f} MiB/s):")
        for metric, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max_ms", "max")):
            r = table.row(f"  {label} (ms)", key, metric)
            if acks == "1" and metric == "p99":
                headline["p99"] = r
        lines.append(f"  {'achieved rec/s':32s} {kafka.figures[key]['rec_s']:11.0f}  "
                     f"{kc.figures.get(key, {}).get('rec_s', float('nan')):11.0f}")
    for acks in plan.e2e_acks:
        key = f"e2e p1 acks={acks}"
        lines.append(f"end-to-end latency acks={acks} (EndToEndLatency, one message at a time):")
        for metric, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("avg_ms", "avg")):
            table.row(f"  {label} (ms)", key, metric)
    rss = ratio(kc.peak_rss_kib, kafka.peak_rss_kib)
    headline["rss"] = rss
    headline["cpu_per_gib_produce"] = got.get("produce p1 acks=1 cpu")
    headline["cpu_per_gib_consume"] = got.get("consume p1 cpu")
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
            base = kafka.figures.get(key, {}).get("mib_s", 0.0)
            cpu = extra.cpu[key]
            lines.append(f"  {key:32s} {fig['mib_s']:7.1f} MiB/s  ratio to Kafka "
                         f"{fr(ratio(fig['mib_s'], base))}  (p99 {fig['p99']:.0f} ms under "
                         f"saturation, broker cpu {100 * cpu[0] / cpu[1]:.0f}%, "
                         f"{fig['cpu_per_gib']:.2f} cpu-s/GiB over {fig['secs']:.0f} s)")
    if prof:
        lines.append("")
        lines.append("py-spy profile of the kcompat broker (flush.mode=never):")
        for kind_lines in prof.values():
            lines += kind_lines
    final = ("ratios: " + " ".join(f"{k}={fr(headline.get(k))}" for k in HEADLINE))
    return lines, final


#: The keys of the headline ``ratios:`` line, in order (kcompat / Kafka).
HEADLINE = ("produce", "consume", "p99", "rss", "cpu_per_gib_produce", "cpu_per_gib_consume")


def median_target(runs: list[Target]) -> Target:
    """Per-figure median over rounds (a single round is returned as it is)."""
    if len(runs) == 1:
        return runs[0]
    out = Target(runs[0].name, startup_s=statistics.median(r.startup_s for r in runs),
                 warmup=runs[0].warmup)
    for key, fig in runs[0].figures.items():
        if not all(key in r.figures for r in runs):
            continue
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
    ap.add_argument("--records", type=int,
                    help="records per produce run (--quick); records of the warm-up (steady "
                         f"state, default {STEADY_WARMUP})")
    ap.add_argument("--duration", type=float, default=STEADY_S,
                    help="seconds each measured produce / consume run lasts at least "
                         f"(steady state; default {STEADY_S:.0f})")
    ap.add_argument("--only", type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
                    default=None, metavar="NAME[,NAME...]",
                    help=f"only these workloads: {', '.join(ONLY_NAMES)} (turns the profile, "
                         "the fsync extra and the cluster part off unless asked for)")
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
    ap.add_argument("--kcompat-set", action="append", default=[], metavar="KEY=VALUE",
                    help="one more `--set KEY=VALUE` for every kcompat broker (repeatable; "
                         "shown in the report's broker lines)")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()
    global KCOMPAT_ARGS, CLUSTER_KCOMPAT_ARGS, KCOMPAT_FSYNC_ARGS
    more = tuple(a for kv in args.kcompat_set for a in ("--set", kv))
    KCOMPAT_ARGS, KCOMPAT_FSYNC_ARGS = KCOMPAT_ARGS + more, KCOMPAT_FSYNC_ARGS + more
    CLUSTER_KCOMPAT_ARGS = CLUSTER_KCOMPAT_ARGS + more
    plan = make_plan(args.quick, args.records, args.duration, args.only)
    full = not (args.quick or args.only)
    do_profile = full if args.profile is None else args.profile
    rounds = args.rounds or (2 if args.quick else 1)
    do_extra = full if args.fsync_extra is None else args.fsync_extra
    do_cluster = args.cluster_only or (full if args.cluster is None else args.cluster)
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
                              [c for c in plan.produce_cases if c[1] == "all"], [], [],
                              steady_s=plan.steady_s)
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
            kind = " --quick" if plan.quick else " (steady state)"
            f.write(f"\n## bench/compare.py{kind} — {stamp}\n\n")
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
        *body,
        f"wall time of the whole comparison: {time.monotonic() - started:.0f} s",
    ]
    print()
    print("\n".join(lines))
    if not args.no_results:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        with open(args.results, "a") as f:
            kind = " --quick" if plan.quick else " (steady state)"
            f.write(f"\n## bench/compare.py --cluster-only{kind} — {stamp}\n\n")
            f.write(f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`\n\n```\n")
            f.write("\n".join(lines) + "\n" + final + "\n```\n")
    print(final)


if __name__ == "__main__":
    main()
