"""Every core of a node: kcompat with 1 and with N shards against Apache Kafka (issue 35).

Not a test: it prints a report and appends it to bench/RESULTS.md.

    .venv/bin/python bench/cores.py                    # Kafka, kcompat --cores 1, --cores 2
    .venv/bin/python bench/cores.py --shards 1,2,4 --records 2000000

The client is ``bench/c/rdperf.c``, a librdkafka producer written for these
benchmarks (built here with gcc against Debian's ``librdkafka-dev``, which is
installed with apt when missing): librdkafka's C client costs a fraction of a
Python or JVM client per record, so on a small machine it leaves the cores to
the broker being measured. Every side runs the same workloads, one side after
the other, each on a broker started afresh:

* a warm-up of ``--warmup`` records of 1 KiB to one partition, not counted
  (Kafka's JIT compiles its produce path; kcompat's modules are imported);
* ``produce-1p-acks1`` and ``produce-1p-acksall``: one producer, one partition;
* ``produce-6p`` and ``produce-60p``: ``--producers`` producers at once, each
  ``--records`` / producers records, acks=1, over 6 and 60 partitions.

All records are 1 KiB, ``linger.ms=5``, ``batch.size=65536`` as in
bench/compare.py; neither broker fsyncs on acknowledgement (Kafka's default
flush policy, kcompat's ``kcompat.flush.mode=never``). The figures per run are
records/s, MiB/s (of all producers together, over the longest producer's
time) and the broker CPU-seconds per GiB produced, summed over every process
of the side (Kafka's JVM; kcompat's supervisor and its shards). After the
runs each process's RSS is read, and the side sits idle for ``IDLE_S``
seconds (after half that to settle): its CPU there is the idle cost, in
cores, the topics of the runs still there.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import (  # noqa: E402
    GIB,
    KAFKA_BENCH_OVERRIDES,
    KAFKA_HEAP,
    create_topic,
    loadavg,
    machine,
    proc_cpu_s,
    proc_status_kib,
)
from compat_tests._broker import Broker, unique_topic  # noqa: E402
from compat_tests._shards import free_run  # noqa: E402
from compat_tests.java.kafka_reference import KafkaReference  # noqa: E402

RECORD_BYTES = 1024
PRODUCER = ("linger.ms=5", "batch.size=65536")
IDLE_S = 10.0
SOURCE = ROOT / "bench" / "c" / "rdperf.c"
WORKLOADS = (("produce-1p-acks1", 1, "1", 1), ("produce-1p-acksall", 1, "all", 1),
             ("produce-6p", 6, "1", 0), ("produce-60p", 60, "1", 0))  # 0: --producers


def rdperf() -> Path:
    """``bench/c/rdperf.c`` built once per source version (installs librdkafka-dev)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    binary = Path.home() / ".cache" / "kcompat" / f"rdperf-{digest}"
    if binary.exists():
        return binary
    if not Path("/usr/include/librdkafka/rdkafka.h").exists():
        sudo = [] if shutil.which("sudo") is None else ["sudo"]
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "librdkafka-dev"], check=True)
    binary.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(SOURCE), "-lrdkafka"], check=True)
    return binary


def processes(pid: int) -> list[int]:
    """``pid`` and its children (a kcompat supervisor's shards)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *(int(c) for c in children)]


def cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += proc_cpu_s(pid)
        except OSError:
            pass
    return total


@dataclass
class Side:
    name: str
    idle_cores: float = 0.0
    rss_mib: list[float] = field(default_factory=list)
    runs: dict[str, dict[str, float]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def produce(tool: Path, bootstrap: str, topic: str, n: int, producers: int,
            acks: str) -> dict[str, float]:
    """``producers`` rdperf processes at once, ``n`` records in all."""
    each = n // producers
    procs = [subprocess.Popen([str(tool), "produce", bootstrap, topic, str(each),
                               str(RECORD_BYTES), f"acks={acks}", *PRODUCER],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(producers)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(f"rdperf exited {p.returncode}: {out[-500:]} {err[-1500:]}")
    figures = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    secs = max(f["secs"] for f in figures)
    records = sum(f["records"] for f in figures)
    return {"records": records, "secs": secs, "rec_s": records / secs,
            "mib_s": records * RECORD_BYTES / secs / 2**20}


def measure(side: Side, tool: Path, bootstrap: str, pid: int, args: argparse.Namespace) -> None:
    warm = unique_topic("cores-warm")
    create_topic(bootstrap, warm, 1)
    produce(tool, bootstrap, warm, args.warmup, 1, "1")
    for name, partitions, acks, producers in WORKLOADS:
        topic = unique_topic(f"cores-{name}")
        try:
            create_topic(bootstrap, topic, partitions)
            before = cpu_s(processes(pid))
            fig = produce(tool, bootstrap, topic, args.records, producers or args.producers, acks)
            fig["cpu_per_gib"] = (cpu_s(processes(pid)) - before) / (
                fig["records"] * RECORD_BYTES / GIB)
            side.runs[name] = fig
            print(f"  {side.name} {name}: {fig['rec_s']:,.0f} rec/s, {fig['mib_s']:.1f} MiB/s, "
                  f"{fig['cpu_per_gib']:.1f} broker CPU-s/GiB  (load {loadavg()})", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported as FAILED, the run goes on
            side.failed[name] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"  {side.name} {name}: FAILED {side.failed[name]}", flush=True)
    side.rss_mib = [proc_status_kib(p, "VmRSS") / 1024 for p in processes(pid)]
    time.sleep(IDLE_S / 2)  # what the last run left (a flush, a snapshot) out of the figure
    before = cpu_s(processes(pid))
    time.sleep(IDLE_S)
    side.idle_cores = (cpu_s(processes(pid)) - before) / IDLE_S


def run_kafka(tool: Path, args: argparse.Namespace, work: Path) -> Side:
    side = Side("kafka")
    ref = KafkaReference(work / "kafka", heap=KAFKA_HEAP, overrides=KAFKA_BENCH_OVERRIDES)
    try:
        ref.start()
        assert ref.proc is not None
        measure(side, tool, ref.bootstrap, ref.proc.pid, args)
    finally:
        ref.close()
        shutil.rmtree(work / "kafka", ignore_errors=True)
    return side


def run_kcompat(tool: Path, shards: int, args: argparse.Namespace, work: Path) -> Side:
    side = Side(f"kcompat x{shards}")
    broker = Broker(work / f"kcompat-{shards}", port=free_run(shards), extra_args=(
        "--cores", str(shards), "--set", "kcompat.flush.mode=never",
        "--set", "admin.port=-1", "--set", "group.initial.rebalance.delay.ms=0"))
    try:
        broker.start()
        assert broker.pid is not None
        measure(side, tool, broker.bootstrap, broker.pid, args)
    finally:
        broker.close()
        shutil.rmtree(work / f"kcompat-{shards}", ignore_errors=True)
    return side


def report(sides: list[Side], args: argparse.Namespace, started: str, load: str) -> list[str]:
    kafka = next((s for s in sides if s.name == "kafka"), None)
    lines = [f"## Every core of a node: kcompat shards against Apache Kafka (issue 35) — {started}",
             "", f"`bench/cores.py --shards {args.shards} --records {args.records} "
             f"--producers {args.producers} --warmup {args.warmup}`; client `bench/c/rdperf` "
             "(librdkafka), 1 KiB records, linger.ms=5, no fsync on either side.",
             "", *(f"- {m}" for m in machine()), f"- load average before / after: {load}", "",
             "| workload | " + " | ".join(s.name for s in sides) + " |",
             "|---|" + "---|" * len(sides)]
    for name, *_ in WORKLOADS:
        cells = []
        for s in sides:
            fig = s.runs.get(name)
            if fig is None:
                cells.append("FAILED")
                continue
            ratio = ""
            if kafka is not None and s is not kafka and name in kafka.runs:
                ratio = f" ({fig['rec_s'] / kafka.runs[name]['rec_s']:.2f}x Kafka)"
            cells.append(f"{fig['mib_s']:.0f} MiB/s{ratio}, {fig['cpu_per_gib']:.1f} CPU-s/GiB")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| idle, cores | " + " | ".join(f"{s.idle_cores:.3f}" for s in sides) + " |")
    lines.append("| RSS per process, MiB | "
                 + " | ".join("/".join(f"{r:.0f}" for r in s.rss_mib) for s in sides) + " |")
    for s in sides:
        for name, why in s.failed.items():
            lines.append(f"- {s.name} {name} FAILED: {why}")
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", default="1,2", help="kcompat sides, by shard count")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per produce run")
    ap.add_argument("--warmup", type=int, default=1_000_000)
    ap.add_argument("--producers", type=int, default=2,
                    help="producer processes of the 6- and 60-partition runs")
    ap.add_argument("--no-kafka", action="store_true", help="kcompat sides only")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()
    tool = rdperf()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_before = loadavg()
    work = Path(tempfile.mkdtemp(prefix="kcompat-cores-"))
    sides = []
    try:
        if not args.no_kafka:
            print("Apache Kafka", flush=True)
            sides.append(run_kafka(tool, args, work))
        for shards in (int(x) for x in args.shards.split(",")):
            print(f"kcompat --cores {shards}", flush=True)
            sides.append(run_kcompat(tool, shards, args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = report(sides, args, started, f"{load_before} / {loadavg()}")
    print("\n".join(lines))
    if not args.no_results:
        with (ROOT / "bench" / "RESULTS.md").open("a") as f:
            f.write("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
