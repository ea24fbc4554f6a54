"""Start time of a broker for a test session: kcompat.embedded vs Apache Kafka (issue 18, item 7).

What a test suite waits for before its first test, on this machine:

* ``kcompat.embedded()``: one broker, from the call to the ``with`` body (the
  child process printed its ready line), and on to a first record acked on a
  new topic (CreateTopics, then a confluent-kafka produce with acks=all);
  ``kcompat.embedded(brokers=3)``: to every broker registered and unfenced.
* Apache Kafka (the reference broker of the compat suites, KRaft combined
  broker+controller from the cached jars, ``compat_tests.java.kafka_reference``):
  the storage format (a JVM of its own, which Kafka needs before a first start
  and its Docker image runs at every container start), then the broker JVM
  from launch to answering ApiVersions, and on to the same first acked record;
  a 3-node cluster from launch to every node answering.
* Each broker's resident memory (VmRSS) once ready, and the stop time.

Usage: ``python bench/startup.py [--rounds 5] [--kafka-rounds 3] [--no-kafka]
[--no-append]``. Medians (min-max) are printed and appended to
bench/RESULTS.md with the machine load (``uptime``) before and after.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kcompat  # noqa: E402
from bench.compare import machine, proc_status_kib  # noqa: E402

Figures = dict[str, list[float]]


def first_record_s(bootstrap: str, create: Callable[[], str]) -> float:
    """Seconds to create a topic and have one record acked on it (acks=all)."""
    from confluent_kafka import Producer

    t0 = time.monotonic()
    topic = create()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    producer.produce(topic, value=b"first")
    assert producer.flush(30) == 0, "the first record was not acked"
    return time.monotonic() - t0


def measure_kcompat(rounds: int, brokers: int) -> Figures:
    out: Figures = {"ready": [], "first": [], "rss": [], "stop": []}
    for _ in range(rounds):
        t0 = time.monotonic()
        with kcompat.embedded(brokers=brokers) as bootstrap:
            out["ready"].append(time.monotonic() - t0)
            out["rss"].append(sum(proc_status_kib(p.proc.pid, "VmRSS")
                                  for p in bootstrap._processes) / 1024)
            if brokers == 1:
                out["first"].append(first_record_s(bootstrap, bootstrap.create_topic))
            t_stop = time.monotonic()
        out["stop"].append(time.monotonic() - t_stop)
    return out


def kafka_create(bootstrap: str) -> Callable[[], str]:
    """CreateTopics with confluent-kafka, asked again until it succeeds: a
    broker answering ApiVersions may not have registered with its controller."""
    def create() -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result
        deadline = time.monotonic() + 60
        while True:
            try:
                admin.create_topics([NewTopic("first", 1, 1)],
                                    operation_timeout=30)["first"].result(timeout=30)
                return "first"
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    return create


def measure_kafka(rounds: int) -> Figures:
    from compat_tests.java.kafka_reference import KafkaReference

    out: Figures = {"format": [], "ready": [], "first": [], "rss": [], "stop": []}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="kafka-startup-") as workdir:
            ref = KafkaReference(Path(workdir))
            t0 = time.monotonic()
            ref._format()
            out["format"].append(time.monotonic() - t0)
            t0 = time.monotonic()
            ref.launch()
            try:
                ref.wait_ready()
                out["ready"].append(time.monotonic() - t0)
                assert ref.proc is not None
                out["rss"].append(proc_status_kib(ref.proc.pid, "VmRSS") / 1024)
                out["first"].append(first_record_s(ref.bootstrap, kafka_create(ref.bootstrap)))
                t0 = time.monotonic()
                ref.stop()
                out["stop"].append(time.monotonic() - t0)
            finally:
                ref.close()
    return out


def measure_kafka_cluster() -> Figures:
    from compat_tests.java.kafka_reference import KafkaReferenceCluster

    with tempfile.TemporaryDirectory(prefix="kafka-startup-") as workdir:
        cluster = KafkaReferenceCluster(Path(workdir), size=3)
        t0 = time.monotonic()
        cluster.start()  # formats each node (a JVM each), then launches and waits
        ready = time.monotonic() - t0
        rss = sum(proc_status_kib(pid, "VmRSS") for pid in cluster.pids) / 1024
        t0 = time.monotonic()
        cluster.close()
        return {"ready": [ready], "rss": [rss], "stop": [time.monotonic() - t0]}


def cell(values: list[float], unit: str = "s", digits: int = 2) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f} {unit}"
    return (f"{statistics.median(values):.{digits}f} {unit} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="kcompat starts of each kind")
    ap.add_argument("--kafka-rounds", type=int, default=3, help="Apache Kafka single-node starts")
    ap.add_argument("--no-kafka", action="store_true", help="kcompat only")
    ap.add_argument("--no-append", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()

    load_before = uptime()
    rows: list[tuple[str, Figures]] = [
        ("kcompat.embedded(), 1 broker", measure_kcompat(args.rounds, 1)),
        ("kcompat.embedded(brokers=3)", measure_kcompat(args.rounds, 3)),
    ]
    if not args.no_kafka:
        from compat_tests.java._jvm import KAFKA_VERSION

        rows.append((f"Apache Kafka {KAFKA_VERSION}, 1 node", measure_kafka(args.kafka_rounds)))
        rows.append((f"Apache Kafka {KAFKA_VERSION}, 3 nodes", measure_kafka_cluster()))
    load_after = uptime()

    lines = ["| broker | storage format | launch to ready | + first record acked on a new topic "
             "| total to a first record | RSS when ready (all nodes) | stop |",
             "|---|---|---|---|---|---|---|"]
    for name, f in rows:
        total = [sum(parts) for parts in zip(*(f[k] for k in ("format", "ready", "first")
                                               if f.get(k)), strict=True)]
        lines.append(f"| {name} | {cell(f.get('format', []))} | {cell(f['ready'])} "
                     f"| {cell(f.get('first', []))} | {cell(total) if f.get('first') else '-'} "
                     f"| {cell(f['rss'], 'MiB', 0)} | {cell(f['stop'])} |")
    text = "\n".join(lines)
    print(text)
    print(f"load before: {load_before}\nload after:  {load_after}")
    if not args.no_append:
        header = machine() if not args.no_kafka else []
        section = [
            "", f"## Broker start for a test session (issue 18.7), {time.strftime('%Y-%m-%d %H:%M')}",
            "", "`bench/startup.py`: medians (min-max) over "
            f"{args.rounds} kcompat starts of each kind and {args.kafka_rounds} Apache Kafka "
            "single-node starts (the 3-node Kafka cluster once); 'ready' is when a test may "
            "begin: kcompat.embedded's `with` body (a cluster: every broker registered), "
            "Kafka answering ApiVersions. The first record: CreateTopics, then a "
            "confluent-kafka produce with acks=all. The 3-node Kafka figure includes formatting "
            "its three nodes (a JVM each, one after the other). Stop: SIGTERM and wait, except "
            "kcompat's cluster, killed since its temporary data is deleted anyway.", "",
            *[f"* {h}" for h in header], "", text, "",
            f"Load (`uptime`) before: `{load_before}`; after: `{load_after}`", ""]
        with open(Path(__file__).with_name("RESULTS.md"), "a") as f:
            f.write("\n".join(section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
