"""TLS against PLAINTEXT throughput, for kcompat and Apache Kafka in the same run (issue 17).

Not a test: it prints a table and (not with ``--quick``) appends it to
bench/RESULTS.md under "TLS vs PLAINTEXT (issue 17)"; its last line is
``tls: kafka ssl/plain produce=A consume=B; kcompat ssl/plain produce=C consume=D;
kcompat/kafka plain produce=E consume=F ssl produce=G consume=H``.

    .venv/bin/python bench/tls.py            # ~20 s per run, ~8-10 min in all on 2 cores
    .venv/bin/python bench/tls.py --quick    # a smoke test: seconds per run, no RESULTS.md

How it works. One broker at a time, Apache Kafka 4.4 first (``KafkaReference``,
single-node KRaft, -Xmx1g as in compare.py), then kcompat (``compat_tests._broker.Broker``
with compare.py's ``--set kcompat.flush.mode=never``; the listener keys come in a YAML
``--config`` file). Both are given the same Kafka keys: ``listeners=PLAINTEXT://...,
SSL://...`` (``inter.broker.listener.name=PLAINTEXT``), ``ssl.keystore.type=PEM`` with
``ssl.keystore.location`` (key and chain, a test PKI made by
``compat_tests._tls.TestPki`` in a temporary directory: ECDSA P-256, 127.0.0.1 in the
server certificate's SAN) and ``ssl.truststore.type=PEM``; ``ssl.client.auth`` is left
at its default (none), so the SSL client is one-way TLS with hostname verification.

The client is Kafka's own perf tooling in a separate JVM (compare.py's ``run_tool``:
ProducerPerformance, ConsumerPerformance), with a ``--command-config`` file per
listener: ``security.protocol=PLAINTEXT``, or ``security.protocol=SSL``,
``ssl.truststore.type=PEM``, ``ssl.truststore.location=<ca.pem>``. Per broker:

1. warm-up, not counted: ``--warmup-records`` produced and read back over each
   listener (the broker JVM's JIT, kcompat's lazily imported modules, the TLS paths);
2. produce ``--records`` x 1 KiB (acks=1, ``batch.size=65536 linger.ms=5``, unthrottled)
   to a one-partition topic over PLAINTEXT, then to another over SSL;
3. consume each topic over the listener that wrote it with ConsumerPerformance,
   pass after pass (a new group each), until the passes' fetch time adds up to
   ``--consume-s`` (ConsumerPerformance's ``fetch.MB.sec``: the group join is not
   counted); ``--quick``: one pass.

Every run prints MiB/s, the broker's CPU (utime+stime from /proc over the run, as
cpu-s per GiB of record values) and ``os.getloadavg()`` before and after it: this
machine is shared, and a loaded machine moves the figures. A run that fails (the tool
exits non-zero, or sends or reads fewer records) is reported as FAILED with the
tool's output, and the report then ends with the broker's WARN/ERROR log lines.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import (  # noqa: E402
    KAFKA_BENCH_OVERRIDES,
    KAFKA_HEAP,
    KCOMPAT_ARGS,
    PRODUCER_PROPS,
    RECORD_BYTES,
    ToolError,
    consumer_passes,
    consumer_perf,
    create_topic,
    machine,
    proc_cpu_s,
    producer_perf,
)
from compat_tests._broker import Broker, free_port, unique_topic  # noqa: E402
from compat_tests._tls import TestPki  # noqa: E402
from compat_tests.java._jvm import KAFKA_VERSION  # noqa: E402
from compat_tests.java.kafka_reference import KafkaReference  # noqa: E402

HOST = "127.0.0.1"
LISTENERS = ("PLAINTEXT", "SSL")
RECORDS = 2_000_000        # ~1.9 GiB: ~15-20 s per PLAINTEXT produce run at 100-130 MiB/s
WARMUP_RECORDS = 300_000
CONSUME_S = 20.0
QUICK_RECORDS, QUICK_WARMUP = 100_000, 30_000
ALERT = re.compile(r"\b(ERROR|WARN|WARNING|CRITICAL|Traceback)\b")


# -- configuration shared by both brokers, and the clients' -------------------------

def listener_config(ports: dict[str, int], pki: TestPki) -> dict[str, str]:
    """The Kafka keys of the two listeners, the same for Kafka and kcompat."""
    return {
        "listeners": ",".join(f"{n}://{HOST}:{ports[n]}" for n in LISTENERS),
        "advertised.listeners": ",".join(f"{n}://{HOST}:{ports[n]}" for n in LISTENERS),
        "listener.security.protocol.map": ",".join(f"{n}:{n}" for n in LISTENERS),
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }


def client_config(listener: str, pki: TestPki, directory: Path) -> Path:
    """The perf tools' ``--command-config`` file for ``listener``."""
    props = {"security.protocol": listener}
    if listener == "SSL":
        props |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}
    path = directory / f"client-{listener.lower()}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def tls_probe(port: int, pki: TestPki) -> str:
    """What a Python ssl client negotiates on ``port`` (version and cipher)."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    try:
        with socket.create_connection((HOST, port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname=HOST) as tls:
            cipher = tls.cipher()
            return f"{tls.version()} {cipher[0] if cipher else '?'}"
    except OSError as e:
        return f"handshake failed: {e}"


# -- the perf tools over one listener --------------------------------------------------

def produce(bootstrap: str, config: Path, topic: str, n: int) -> dict[str, float]:
    """ProducerPerformance (compare.py's), acks=1, over the listener ``config`` names."""
    fig = producer_perf(bootstrap, topic, n, "1", config=config)
    return {**fig, "p99_ms": fig["p99"]}


def consume(bootstrap: str, config: Path, topic: str, n: int, min_s: float
            ) -> dict[str, float]:
    """ConsumerPerformance passes (compare.py's) until their fetch time adds up to
    ``min_s``; the rate is over the fetch time (the group joins are not counted)."""
    fig = consumer_passes(bootstrap, topic, n, min_s, config)
    return {**fig, "mib_s": fig["fetch_mib_s"]}


# -- one broker ---------------------------------------------------------------------

@dataclass
class Side:
    """The figures of one broker: ``figures[(kind, listener)]``, kind produce|consume."""

    name: str
    figures: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    errors: dict[tuple[str, str], str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)   # one per run, as printed
    tls: str = ""
    alerts: list[str] = field(default_factory=list)  # the broker's WARN/ERROR log lines

    def mib_s(self, kind: str, listener: str) -> float | None:
        fig = self.figures.get((kind, listener))
        return fig["mib_s"] if fig else None


@dataclass
class Plan:
    records: int
    warmup_records: int
    consume_s: float
    quick: bool


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(side: Side, pid: int, kind: str, listener: str,
          fn: Callable[[], dict[str, float]]) -> None:
    """Run one measured workload; record its figures (or FAILED) and print its line."""
    load0, c0, t0 = load(), proc_cpu_s(pid), time.monotonic()
    try:
        fig = fn()
    except (ToolError, subprocess.TimeoutExpired) as e:
        side.errors[(kind, listener)] = " ".join(str(e).split())[:600]
        line = f"  {side.name:8s} {kind:8s} {listener:10s} FAILED: {side.errors[(kind, listener)]}"
    else:
        cpu, wall = proc_cpu_s(pid) - c0, time.monotonic() - t0
        fig["cpu_per_gib"] = cpu / fig["gib"]
        side.figures[(kind, listener)] = fig
        passes = f", {fig['passes']:.0f} pass(es)" if "passes" in fig else ""
        p99 = f", p99 {fig['p99_ms']:.0f} ms" if "p99_ms" in fig else ""
        line = (f"  {side.name:8s} {kind:8s} {listener:10s} {fig['mib_s']:7.1f} MiB/s "
                f"({fig['gib']:.2f} GiB in {fig['secs']:.1f} s{passes}{p99}; broker "
                f"{fig['cpu_per_gib']:.2f} cpu-s/GiB, {100 * cpu / wall:.0f}% of a core)")
    line += f"  load {load0} -> {load()}"
    side.lines.append(line)
    print(line, flush=True)


def measure(side: Side, pid: int, ports: dict[str, int], configs: dict[str, Path],
            plan: Plan) -> None:
    """Warm-up, then produce over each listener, then consume each topic over its own."""
    boot = {n: f"{HOST}:{ports[n]}" for n in LISTENERS}
    t0 = time.monotonic()
    for listener in LISTENERS:  # not counted
        warm = unique_topic(f"warm-{listener.lower()}")
        create_topic(boot["PLAINTEXT"], warm, 1)
        try:
            produce(boot[listener], configs[listener], warm, plan.warmup_records)
            consumer_perf(boot[listener], warm, plan.warmup_records, configs[listener])
        except (ToolError, subprocess.TimeoutExpired) as e:
            side.errors[("warm-up", listener)] = " ".join(str(e).split())[:600]
            print(f"  {side.name:8s} warm-up over {listener} FAILED: "
                  f"{side.errors[('warm-up', listener)]}", flush=True)
    print(f"  {side.name:8s} warm-up (not counted): {plan.warmup_records} records produced and "
          f"read back over each listener, {time.monotonic() - t0:.0f} s", flush=True)
    topics = {n: unique_topic(f"tls-{n.lower()}") for n in LISTENERS}
    for listener in LISTENERS:
        create_topic(boot["PLAINTEXT"], topics[listener], 1)
        timed(side, pid, "produce", listener, partial(
            produce, boot[listener], configs[listener], topics[listener], plan.records))
    for listener in LISTENERS:
        if ("produce", listener) not in side.figures:
            continue  # nothing known to read back
        timed(side, pid, "consume", listener, partial(
            consume, boot[listener], configs[listener], topics[listener], plan.records,
            plan.consume_s))


def alerts(text: str, limit: int = 12) -> list[str]:
    found = [ln.strip() for ln in text.splitlines() if ALERT.search(ln)]
    more = [f"... and {len(found) - limit} more"] if len(found) > limit else []
    return [ln[:300] for ln in found[:limit]] + more


@contextmanager
def kafka_broker(workdir: Path, ports: dict[str, int], pki: TestPki) -> Iterator[int]:
    controller = free_port(HOST)
    props = listener_config(ports, pki)
    props["listeners"] += f",CONTROLLER://{HOST}:{controller}"
    props["listener.security.protocol.map"] += ",CONTROLLER:PLAINTEXT"
    ref = KafkaReference(workdir, port=ports["PLAINTEXT"], controller_port=controller,
                         heap=KAFKA_HEAP, overrides={**KAFKA_BENCH_OVERRIDES, **props})
    try:
        ref.start()
        assert ref.proc is not None
        yield ref.proc.pid
    finally:
        ref.close()


@contextmanager
def kcompat_broker(workdir: Path, ports: dict[str, int], pki: TestPki) -> Iterator[int]:
    config = workdir / "broker.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(listener_config(ports, pki)))
    broker = Broker(workdir, port=ports["PLAINTEXT"],
                    extra_args=("--config", str(config), *KCOMPAT_ARGS))
    try:
        broker.start()
        assert broker.pid is not None
        yield broker.pid
    finally:
        broker.close()


def run_side(name: str, workdir: Path, pki: TestPki, configs: dict[str, Path],
             plan: Plan) -> Side:
    side = Side(name)
    ports = {n: free_port(HOST) for n in LISTENERS}
    start = kafka_broker if name == "kafka" else kcompat_broker
    with start(workdir / name, ports, pki) as pid:
        side.tls = tls_probe(ports["SSL"], pki)
        measure(side, pid, ports, configs, plan)
    log = workdir / name / ("kafka.log" if name == "kafka" else "broker.stderr.log")
    if log.exists():
        side.alerts = alerts(log.read_text(errors="replace"))
    shutil.rmtree(workdir / name, ignore_errors=True)
    return side


# -- the report ---------------------------------------------------------------------

def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def cell(v: float | None, prec: int = 1, missing: str = "FAILED") -> str:
    return f"{v:.{prec}f}" if v is not None else missing


def table(kafka: Side, kc: Side) -> list[str]:
    """Markdown rows: MiB/s per listener, SSL/PLAINTEXT per broker, kcompat/Kafka."""
    rows = [f"| figure | Apache Kafka {KAFKA_VERSION} | kcompat | kcompat/Kafka |",
            "|---|---|---|---|"]
    for kind in ("produce", "consume"):
        for listener in LISTENERS:
            a, b = kafka.mib_s(kind, listener), kc.mib_s(kind, listener)
            rows.append(f"| {kind} over {listener} (MiB/s) | {cell(a)} | {cell(b)} | "
                        f"{cell(ratio(b, a), 2, 'n/a')} |")
        sa, sb = (ratio(s.mib_s(kind, "SSL"), s.mib_s(kind, "PLAINTEXT")) for s in (kafka, kc))
        rows.append(f"| {kind}: SSL / PLAINTEXT | {cell(sa, 2, 'n/a')} | {cell(sb, 2, 'n/a')} | |")
    for kind in ("produce", "consume"):
        for listener in LISTENERS:
            ca, cb = (s.figures.get((kind, listener), {}).get("cpu_per_gib") for s in (kafka, kc))
            rows.append(f"| broker cpu-s per GiB, {kind} over {listener} | {cell(ca, 2)} | "
                        f"{cell(cb, 2)} | {cell(ratio(cb, ca), 2, 'n/a')} |")
    return rows


def summary(kafka: Side, kc: Side) -> str:
    def r(v: float | None) -> str:
        return f"{v:.2f}" if v is not None else "n/a"

    def own(s: Side, kind: str) -> str:
        return r(ratio(s.mib_s(kind, "SSL"), s.mib_s(kind, "PLAINTEXT")))

    def cross(kind: str, listener: str) -> str:
        return r(ratio(kc.mib_s(kind, listener), kafka.mib_s(kind, listener)))

    return (f"tls: kafka ssl/plain produce={own(kafka, 'produce')} "
            f"consume={own(kafka, 'consume')}; kcompat ssl/plain produce={own(kc, 'produce')} "
            f"consume={own(kc, 'consume')}; kcompat/kafka plain produce="
            f"{cross('produce', 'PLAINTEXT')} consume={cross('consume', 'PLAINTEXT')} ssl "
            f"produce={cross('produce', 'SSL')} consume={cross('consume', 'SSL')}")


def report(plan: Plan, kafka: Side, kc: Side, load_before: str, wall_s: float
           ) -> tuple[list[str], list[str], list[str]]:
    """(setup lines, the table, the runs and log lines): paragraphs, a markdown table
    and a block of text in RESULTS.md, in that order."""
    consume = (f"pass after pass until >= {plan.consume_s:.0f} s of fetch time"
               if plan.consume_s else "one pass")
    head = [*machine(), f"load average before / after the whole run: {load_before} / {load()}",
            f"workload: per listener {plan.records} x {RECORD_BYTES} B records, one partition, "
            f"acks=1, {' '.join(PRODUCER_PROPS)}; consumed over the same listener, {consume}; "
            f"after an uncounted warm-up of {plan.warmup_records} records over each listener",
            "listeners: PLAINTEXT and SSL (one-way TLS, ssl.keystore.type=PEM, ECDSA P-256 "
            "server key); client: ProducerPerformance / ConsumerPerformance, "
            "security.protocol=SSL with ssl.truststore.type=PEM",
            f"TLS a Python ssl client negotiates: Kafka {kafka.tls}; kcompat {kc.tls}",
            f"kcompat: `{' '.join(KCOMPAT_ARGS)}`; Kafka -Xmx{KAFKA_HEAP}"]
    if plan.quick:
        head.insert(0, "SMOKE RUN (--quick): runs of a few seconds, not figures to quote")
    runs = ["runs (load average 1/5/15 min before -> after each):"]
    runs += [ln for s in (kafka, kc) for ln in s.lines]
    for s in (kafka, kc):
        if s.errors or (s.alerts and s is kc):
            runs += [f"{s.name} broker log, WARN/ERROR lines ({len(s.alerts)} shown):",
                     *(f"  {a}" for a in s.alerts or ["(none)"])]
    runs.append(f"wall time: {wall_s:.0f} s")
    return head, table(kafka, kc), runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int,
                    help=f"records per produce run (default {RECORDS}, --quick {QUICK_RECORDS})")
    ap.add_argument("--warmup-records", type=int,
                    help=f"uncounted records per listener (default {WARMUP_RECORDS}, "
                         f"--quick {QUICK_WARMUP})")
    ap.add_argument("--consume-s", type=float,
                    help=f"fetch seconds each consume run adds up to (default {CONSUME_S:.0f}; "
                         "--quick: one pass)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test of a few seconds per run; does not write RESULTS.md")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()
    q = args.quick
    plan = Plan(args.records or (QUICK_RECORDS if q else RECORDS),
                args.warmup_records or (QUICK_WARMUP if q else WARMUP_RECORDS),
                args.consume_s if args.consume_s is not None else (0.0 if q else CONSUME_S), q)
    started, load_before = time.monotonic(), load()
    workdir = Path(tempfile.mkdtemp(prefix="kcompat-tls-"))
    try:
        pki = TestPki.create(workdir / "pki")
        configs = {n: client_config(n, pki, workdir) for n in LISTENERS}
        print(f"Apache Kafka {KAFKA_VERSION} ...", flush=True)
        kafka = run_side("kafka", workdir, pki, configs, plan)
        print("kcompat (flush.mode=never) ...", flush=True)
        kc = run_side("kcompat", workdir, pki, configs, plan)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    head, rows, runs = report(plan, kafka, kc, load_before, time.monotonic() - started)
    final = summary(kafka, kc)
    print()
    print("\n".join([*head, "", *rows, "", *runs]))
    if not (q or args.no_results):
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        with open(args.results, "a") as f:
            f.write(f"\n## TLS vs PLAINTEXT (issue 17) — {stamp}\n\n")
            f.write(f"`{' '.join([Path(sys.executable).name, *sys.argv])}`\n\n")
            f.write("\n\n".join(head) + "\n\n" + "\n".join(rows) + "\n\n```\n")
            f.write("\n".join(runs) + f"\n```\n\n`{final}`\n")
    print(final)


if __name__ == "__main__":
    main()
