"""HTTP produce (issue 34): what REST v3 produce gives on one node, and what it costs the
Kafka-protocol clients of the same broker.

Not a test: it asserts nothing, prints a table and (unless ``--no-results``) replaces
its own section, "HTTP produce (bench/http_produce.py)", in bench/RESULTS.md (appended
at the end if there is none yet).

    .venv/bin/python bench/http_produce.py                 # 4 phases of 5 s + 20 s: ~2 min
    .venv/bin/python bench/http_produce.py --seconds 5 --no-results   # a smoke run

One kcompat broker subprocess (``python -m kcompat broker --port P --data-dir D
--admin-port A``, every other setting its default, so ``kcompat.flush.mode=acks_all``:
an acks=all produce is answered after the group-committed fsync) and one topic of
``--partitions`` (6) partitions, created over HTTP (``POST /v3/clusters/{id}/topics``).
Both loads write to that topic. Phases, in this order, each ``--warmup`` (5 s, not
counted) then ``--seconds`` (20 s) measured:

* **kafka alone**: a confluent-kafka ``Producer`` in a child process (so it shares no
  GIL with the HTTP client threads): acks=all, linger.ms=5, batch.size=65536,
  max.in.flight 5 (as compare.py / scale.py), no key, ``--value-bytes`` (100) B
  values, produce() as fast as its queue takes them; records acknowledged in the
  window = produced - ``len(producer)`` at its end minus the same at its start.
* **http alone**: ``--threads`` (4) client threads, each with one keep-alive
  ``http.client.HTTPConnection``, POST ``/v3/clusters/{id}/topics/{topic}/records``
  with bodies of ``--batch`` (100) JSON records one after another (``{"value":
  {"type": "BINARY", "data": <base64 of 100 random bytes>}}``, no key, no partition:
  the broker spreads them), one request at a time per thread. A request counts when
  its answer is 200 with ``--batch`` reports of ``"error_code":200``; records/s,
  requests/s and p50/p99 request latency (client-side, send to last byte read).
* **both**: the HTTP load and the Kafka producer at once, measured over the same
  window; the Kafka rate against the mean of the two kafka-alone runs is the
  reduction.
* **kafka alone (again)**: as the first, to see how much the machine drifted.

Per phase: the broker's CPU seconds (psutil if installed, else utime+stime from
/proc/<pid>/stat), the load generators' CPU (this process: the HTTP threads; the
producer child's own), the whole machine's busy cores (/proc/stat) and the load
average at the end. The clients run on the same machine as the broker: on a
2-core machine they compete with it for the cores.

Target (issue 34), reported as met / not met, never asserted: >= 20,000 records/s
over HTTP (v3, batches of 100, keep-alive) on one node. The Kafka-protocol produce
rate beside HTTP produce is reported, not judged: the target on it, at most 10 %
lower "while the console is open", is measured by bench/console.py with the
console open in chromium.

The broker's stderr is scanned at the end for ERROR / CRITICAL / Traceback lines
(printed, and counted in the section).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import http.client
import json
import multiprocessing
import os
import platform
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import cpu_model, loadavg  # noqa: E402
from compat_tests._broker import Broker, free_port  # noqa: E402

SECTION = "HTTP produce (bench/http_produce.py)"
TARGET_HTTP_REC_S = 20_000
TARGET_REDUCTION_PCT = 10.0
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 65536, "compression.type": "none",
            "max.in.flight.requests.per.connection": 5, "delivery.report.only.error": True,
            "log_level": 0}
CLK_TCK = os.sysconf("SC_CLK_TCK")
BODIES_PER_THREAD = 8  # distinct bodies each thread cycles through
ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback|Exception")
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|=====)")  # a new log line


# -- process and machine figures -------------------------------------------------

def broker_cpu_s(pid: int) -> float:
    """utime + stime of the broker process: psutil if installed, else /proc."""
    try:
        import psutil
    except ImportError:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def machine_line() -> str:
    import confluent_kafka

    return (f"nproc {os.cpu_count()}, CPU {cpu_model()} (/proc/cpuinfo), {platform.system()} "
            f"{platform.release()}; Python {platform.python_version()}, confluent-kafka "
            f"{confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})")


def code_version() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %cI"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


# -- the HTTP load -----------------------------------------------------------------

class _Conn(http.client.HTTPConnection):
    """An HTTPConnection that counts its TCP connects (keep-alive: one per thread)."""

    connects = 0

    def connect(self) -> None:
        super().connect()
        type(self).connects += 1


@dataclass
class _ThreadStats:
    records: int = 0
    requests: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0  # in the window
    all_errors: int = 0


class HttpLoad:
    """``threads`` clients posting bodies of ``batch`` records until stopped."""

    def __init__(self, host: str, port: int, path: str, threads: int, batch: int,
                 value_bytes: int) -> None:
        self.host, self.port, self.path = host, port, path
        self.batch = batch
        self.measuring = False
        self.stopping = threading.Event()
        self.stats = [_ThreadStats() for _ in range(threads)]
        self.samples: list[str] = []
        self.bodies = [[self._body(batch, value_bytes) for _ in range(BODIES_PER_THREAD)]
                       for _ in range(threads)]
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                         name=f"http-{i}") for i in range(threads)]
        self.ok_marker = b'"error_code":200'

    @staticmethod
    def _body(batch: int, value_bytes: int) -> bytes:
        return "\n".join(json.dumps({"value": {"type": "BINARY", "data": base64.b64encode(
            os.urandom(value_bytes)).decode()}}, separators=(",", ":"))
            for _ in range(batch)).encode()

    def start(self) -> None:
        _Conn.connects = 0
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=90)

    def _error(self, st: _ThreadStats, what: str) -> None:
        st.all_errors += 1
        if self.measuring:
            st.errors += 1
        if len(self.samples) < 5:
            self.samples.append(what)

    def _run(self, index: int) -> None:
        st = self.stats[index]
        bodies = self.bodies[index]
        headers = {"Content-Type": "application/json"}
        conn = _Conn(self.host, self.port, timeout=60)
        n = 0
        while not self.stopping.is_set():
            body = bodies[n % len(bodies)]
            n += 1
            t0 = time.perf_counter()
            try:
                conn.request("POST", self.path, body, headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                self._error(st, f"{type(e).__name__}: {e}")
                conn.close()
                conn = _Conn(self.host, self.port, timeout=60)
                time.sleep(0.1)
                continue
            elapsed = time.perf_counter() - t0
            ok = data.count(self.ok_marker) if resp.status == 200 else 0
            if ok != self.batch:
                self._error(st, f"HTTP {resp.status}, {ok}/{self.batch} records ok: "
                                f"{data[:300].decode('utf-8', 'replace')}")
                continue
            if self.measuring:
                st.records += ok
                st.requests += 1
                st.latencies.append(elapsed)
        conn.close()


# -- the Kafka producer (a child process) ----------------------------------------

def kafka_produce(bootstrap: str, topic: str, value_bytes: int, start_at: float,
                  end_at: float, out: Any) -> None:
    """Produce as fast as the queue takes until ``end_at``; put the window's figures."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def failed(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER, "on_delivery": failed})
    value = os.urandom(value_bytes)
    produced = 0
    start: tuple[float, int, float, int] | None = None
    while True:
        now = time.time()
        if start is None and now >= start_at:
            p.poll(0)
            start = (now, produced - len(p), time.process_time(), len(errors))
        if now >= end_at:
            p.poll(0)
            end = (time.time(), produced - len(p), time.process_time(), len(errors))
            break
        for _ in range(500):
            try:
                p.produce(topic, value)
            except BufferError:
                p.poll(0.005)
                break
            produced += 1
        p.poll(0)
    left = p.flush(60)
    assert start is not None
    out.put({"acked": end[1] - start[1], "window_s": end[0] - start[0],
             "cpu_s": end[2] - start[2], "errors": end[3] - start[3],
             "all_errors": len(errors), "samples": errors[:5], "unflushed": left})


# -- phases ----------------------------------------------------------------------

@dataclass
class Phase:
    name: str
    http: bool
    kafka_on: bool
    window_s: float = 0.0
    http_records: int = 0
    http_requests: int = 0
    latencies: list[float] = field(default_factory=list)
    http_errors: int = 0
    http_connects: int = 0
    kafka: dict[str, Any] | None = None  # the producer child's figures
    broker_cpu_s: float = 0.0
    client_cpu_s: float = 0.0  # this process (HTTP threads) + the producer child
    machine_busy: float = 0.0  # cores
    load_end: str = ""
    samples: list[str] = field(default_factory=list)

    @property
    def http_rec_s(self) -> float:
        return self.http_records / self.window_s if self.window_s else 0.0

    @property
    def http_req_s(self) -> float:
        return self.http_requests / self.window_s if self.window_s else 0.0

    @property
    def others(self) -> float:
        """Cores busy with neither the broker nor the load generators."""
        if not self.window_s:
            return 0.0
        return max(0.0, self.machine_busy - (self.broker_cpu_s + self.client_cpu_s)
                   / self.window_s)

    def lat_ms(self, q: float) -> float | None:
        if not self.latencies:
            return None
        s = sorted(self.latencies)
        return 1000 * s[min(len(s) - 1, int(q * len(s)))]

    @property
    def kafka_rec_s(self) -> float | None:
        if not self.kafka:
            return None
        return self.kafka["acked"] / self.kafka["window_s"]


def run_phase(broker: Broker, admin_port: int, path: str, topic: str, name: str, http: bool,
              kafka: bool, args: argparse.Namespace) -> Phase:
    ph = Phase(name, http, kafka)
    assert broker.pid is not None
    ctx = multiprocessing.get_context("spawn")
    # the child needs ~1 s to start (spawn + imports): it gets that on top of the warm-up
    start_at = time.time() + args.warmup + (1.5 if kafka else 0.0)
    end_at = start_at + args.seconds
    results: Any = ctx.Queue() if kafka else None
    child = None
    if kafka:
        child = ctx.Process(target=kafka_produce, args=(broker.bootstrap, topic, args.value_bytes,
                                                        start_at, end_at, results))
        child.start()
    load = None
    if http:
        load = HttpLoad("127.0.0.1", admin_port, path, args.threads, args.batch,
                        args.value_bytes)
        load.start()
    time.sleep(max(0.0, start_at - time.time()))
    t0 = time.time()
    cpu0 = broker_cpu_s(broker.pid)
    own0 = time.process_time()
    busy0, total0 = machine_ticks()
    if load:
        load.measuring = True
        connects0 = _Conn.connects
    time.sleep(max(0.0, end_at - time.time()))
    if load:
        load.measuring = False
    t1 = time.time()
    cpu1 = broker_cpu_s(broker.pid)
    own1 = time.process_time()
    busy1, total1 = machine_ticks()
    ph.window_s = t1 - t0
    ph.broker_cpu_s = cpu1 - cpu0
    ph.client_cpu_s = own1 - own0
    ph.machine_busy = (busy1 - busy0) / (total1 - total0) * (os.cpu_count() or 1) \
        if total1 > total0 else 0.0
    if load:
        load.stop()
        ph.http_connects = _Conn.connects - connects0
        for st in load.stats:
            ph.http_records += st.records
            ph.http_requests += st.requests
            ph.latencies.extend(st.latencies)
            ph.http_errors += st.errors
        ph.samples.extend(f"http: {s}" for s in load.samples)
        if any(st.all_errors for st in load.stats):
            ph.samples.append(f"http: {sum(st.all_errors for st in load.stats)} failed "
                              "requests over the whole phase (warm-up included)")
    if child is not None:
        try:
            ph.kafka = results.get(timeout=120)
        except queue.Empty:
            ph.samples.append("kafka: the producer child reported nothing")
        child.join(timeout=30)
        if ph.kafka:
            ph.client_cpu_s += ph.kafka["cpu_s"]
            ph.samples.extend(f"kafka: {s}" for s in ph.kafka["samples"])
            if ph.kafka["unflushed"]:
                ph.samples.append(f"kafka: {ph.kafka['unflushed']} records not delivered at "
                                  "the end")
    ph.load_end = loadavg()
    if not broker.running:
        raise RuntimeError(f"the broker exited during {name}:\n{broker.tail()}")
    return ph


# -- the broker and its HTTP API -------------------------------------------------

def rest(admin_port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=60)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, "/v3" + path, data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read().decode()
        return resp.status, json.loads(text) if text else None
    finally:
        conn.close()


def wait_http(admin_port: int, timeout: float = 30.0) -> str:
    """The cluster id, once the admin port answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, body = rest(admin_port, "GET", "/clusters")
            if status == 200 and body["data"]:
                return str(body["data"][0]["cluster_id"])
        except (OSError, http.client.HTTPException, ValueError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the admin port {admin_port} did not answer in {timeout} s")
        time.sleep(0.2)


def broker_errors(broker: Broker) -> tuple[list[str], int]:
    """(ERROR / CRITICAL / Traceback lines with the lines after a traceback, WARNING count)."""
    text = broker.log_path.read_text(errors="replace") if broker.log_path.exists() else ""
    lines = text.splitlines()
    found: list[str] = []
    warnings = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.search(r"\bWARNING\b", line):
            warnings += 1
        if ERROR_LINE.search(line):
            found.append(line)
            if line.startswith("Traceback"):
                i += 1
                while i < len(lines) and not LOG_LINE.match(lines[i]):
                    found.append(lines[i])
                    i += 1
                continue
        i += 1
    return found, warnings


# -- report ----------------------------------------------------------------------

def f0(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def f1(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def table(phases: list[Phase]) -> list[str]:
    out = ["| phase | HTTP records/s | HTTP requests/s | HTTP p50 / p99 (ms) | "
           "Kafka produce records/s | broker CPU s (% of one core) | clients' CPU s | "
           "machine busy (cores) | of which other processes (cores) | load avg at end |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in phases:
        http = (f0(p.http_rec_s), f1(p.http_req_s),
                f"{f1(p.lat_ms(0.50))} / {f1(p.lat_ms(0.99))}") if p.http else ("—",) * 3
        cpu = f"{p.broker_cpu_s:.1f} ({100 * p.broker_cpu_s / p.window_s:.0f} %)"
        out.append(f"| {p.name} | {' | '.join(http)} | {f0(p.kafka_rec_s)} | {cpu} | "
                   f"{p.client_cpu_s:.1f} | {p.machine_busy:.2f} | {p.others:.2f} | "
                   f"{p.load_end} |")
    return out


def report(phases: list[Phase], args: argparse.Namespace, load_start: str,
           errors: list[str], warnings: int) -> tuple[list[str], str]:
    by = {p.name: p for p in phases}
    http_alone = by["http alone"]
    both = by["both"]
    alone = [r for r in (by["kafka alone"].kafka_rec_s, by["kafka alone (again)"].kafka_rec_s)
             if r is not None]
    base = statistics.mean(alone) if alone else None
    beside = both.kafka_rec_s
    reduction = 100 * (1 - beside / base) if base and beside is not None else None
    lines = [*table(phases), ""]
    change = (f"{100 * (both.http_rec_s / http_alone.http_rec_s - 1):+.1f} %"
              if http_alone.http_rec_s else "—")
    lines.append(f"Kafka produce alone: {' and '.join(f0(r) for r in alone)} records/s "
                 f"(mean {f0(base)}); beside HTTP produce: {f0(beside)} records/s — "
                 f"**reduction {f1(reduction)} %**. HTTP produce beside Kafka produce: "
                 f"{f0(both.http_rec_s)} records/s ({change} vs HTTP alone).")
    per_k = (1000 * http_alone.broker_cpu_s / http_alone.http_records
             if http_alone.http_records else None)
    ka = by["kafka alone"]
    per_k_kafka = (1000 * ka.broker_cpu_s / ka.kafka["acked"]
                   if ka.kafka and ka.kafka["acked"] else None)
    lines.append(f"Broker CPU per 1,000 records: HTTP {per_k * 1000 if per_k else 0:.1f} ms, "
                 f"Kafka protocol {per_k_kafka * 1000 if per_k_kafka else 0:.1f} ms "
                 "(alone phases).")
    conns = {p.name: p.http_connects for p in phases if p.http}
    lines.append("HTTP connections opened in the measured windows (keep-alive: one per "
                 "thread per 1,000 requests, when the server closes a connection that served "
                 "them, as nginx's keepalive_requests does): "
                 + ", ".join(f"{k} {v}" for k, v in conns.items())
                 + "; failed HTTP requests in the windows: "
                 + ", ".join(f"{p.name} {p.http_errors}" for p in phases if p.http)
                 + "; Kafka delivery errors: "
                 + ", ".join(f"{p.name} {p.kafka['errors'] if p.kafka else 'n/a'}"
                             for p in phases if p.name.startswith(("kafka", "both"))) + ".")
    samples = [s for p in phases for s in p.samples]
    if samples:
        lines.append("Client-side failures (first few): " + " · ".join(f"`{s[:200]}`"
                                                                       for s in samples[:6]))
    lines.append("")
    http_met = "met" if http_alone.http_rec_s >= TARGET_HTTP_REC_S else "not met"
    lines.append(f"Target (issue 34): >= {TARGET_HTTP_REC_S:,} records/s over HTTP (v3, "
                 f"batches of {args.batch}, keep-alive, one node): **{http_met}** "
                 f"({f0(http_alone.http_rec_s)} records/s with {args.threads} threads). The "
                 f"Kafka produce rate beside HTTP produce ({f1(reduction)} % lower) is not a "
                 "target: HTTP produce at full speed takes the broker's loop as another "
                 "producer would. The target on Kafka produce, at most "
                 f"{TARGET_REDUCTION_PCT:.0f} % lower while the console is open, is "
                 "bench/console.py's.")
    lines.append("")
    if errors:
        lines.append(f"Broker log: {len(errors)} ERROR / CRITICAL / Traceback line(s) "
                     f"({warnings} WARNING), first ones:")
        lines.append("")
        lines.append("```")
        lines.extend(e[:300] for e in errors[:20])
        lines.append("```")
    else:
        lines.append(f"Broker log: no ERROR, CRITICAL or Traceback lines ({warnings} WARNING).")
    final = (f"http_produce: http={http_alone.http_rec_s:.0f} rec/s "
             f"p99={f1(http_alone.lat_ms(0.99))} ms kafka_alone={f0(base)} "
             f"kafka_beside_http={f0(beside)} reduction={f1(reduction)}% "
             f"load_start={load_start.replace(' ', '/')}")
    return lines, final


def write_section(results: Path, text: str, section: str = SECTION) -> None:
    """Replace the section headed ``## <section>`` (up to the next ``## ``), or append it."""
    old = results.read_text() if results.exists() else "# Benchmark results\n"
    head = f"## {section}"
    lines = old.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip("\n") == head), None)
    if start is None:
        new = old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
                   len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + text.rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    results.write_text(new)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="measured seconds per phase")
    ap.add_argument("--warmup", type=float, default=5.0, help="warm-up seconds per phase")
    ap.add_argument("--threads", type=int, default=4, help="HTTP client threads")
    ap.add_argument("--batch", type=int, default=100, help="records per HTTP request")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--port", type=int, default=None, help="Kafka port (default: a free one)")
    ap.add_argument("--admin-port", type=int, default=None,
                    help="admin HTTP port (default: a free one)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config key, passed on (for diagnosis; the issue's "
                         "figures are with the defaults)")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    ap.add_argument("--no-results", action="store_true", help="do not write RESULTS.md")
    args = ap.parse_args()

    load_start = loadavg()
    started = time.monotonic()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"machine: {machine_line()}; load average at start {load_start}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="kcompat-bench-http-"))
    admin_port = args.admin_port if args.admin_port is not None else free_port()
    env = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    extra = ["--admin-port", str(admin_port)]
    for kv in args.set:
        extra += ["--set", kv]
    broker = Broker(workdir, port=args.port, extra_args=tuple(extra), env=env)
    phases: list[Phase] = []
    try:
        broker.start()
        cluster = wait_http(admin_port)
        topic = f"http-bench-{os.getpid()}"
        status, body = rest(admin_port, "POST", f"/clusters/{cluster}/topics",
                            {"topic_name": topic, "partitions_count": args.partitions})
        if status != 201:
            raise RuntimeError(f"creating {topic}: HTTP {status} {body}")
        path = f"/v3/clusters/{cluster}/topics/{topic}/records"
        plan = [("kafka alone", False, True), ("http alone", True, False),
                ("both", True, True), ("kafka alone (again)", False, True)]
        for name, http, kafka in plan:
            print(f"{name}: {args.warmup:g} s warm-up + {args.seconds:g} s ...", flush=True)
            ph = run_phase(broker, admin_port, path, topic, name, http, kafka, args)
            phases.append(ph)
            print(f"  HTTP {f0(ph.http_rec_s) if http else '—'} rec/s, Kafka "
                  f"{f0(ph.kafka_rec_s)} rec/s, broker CPU {ph.broker_cpu_s:.1f} s, load "
                  f"{ph.load_end}", flush=True)
    finally:
        broker.close()
        errors, warnings = broker_errors(broker)
        shutil.rmtree(workdir, ignore_errors=True)
    load_end = loadavg()
    total = time.monotonic() - started
    lines, final = report(phases, args, load_start, errors, warnings)
    cmd = " ".join(["bench/http_produce.py", *sys.argv[1:]])
    version = code_version()
    head = [
        f"Last run {stamp}: `{cmd}`" + (f", code at {version}" if version else "") + ".",
        f"Machine: {machine_line()}. Load average (1/5/15 min) at start {load_start}, "
        f"at end {load_end}; total {total:.0f} s.",
        "One kcompat broker subprocess, "
        + (f"settings {', '.join(f'`{kv}`' for kv in args.set)}, the rest default"
           if args.set else "default settings (`kcompat.flush.mode=acks_all`: acks=all is "
           "answered after the group-committed fsync)")
        + f", one topic of "
        f"{args.partitions} partitions that both loads write. Each phase: {args.warmup:g} s "
        f"warm-up, then {args.seconds:g} s measured. HTTP: {args.threads} threads, one "
        f"keep-alive `http.client` connection each, one request at a time, bodies of "
        f"{args.batch} BINARY records of {args.value_bytes} B (base64), no key; latency is "
        f"per request. Kafka: one confluent-kafka Producer in a child process (acks=all, "
        f"linger.ms=5, batch.size=65536, max.in.flight 5, {args.value_bytes}-B values, no "
        f"key). Broker CPU: utime+stime ("
        + ("psutil" if _has_psutil() else "/proc/<pid>/stat") + "). The clients run on the "
        "same machine: their CPU (the clients' CPU column) competes with the broker's. "
        "The machine may be shared with other work: \"other processes\" is the machine's "
        "busy cores (/proc/stat) less the broker and the clients; a phase where it is high "
        "was measured on fewer free cores.",
    ]
    print()
    print("\n".join([*head, "", *lines]))
    if errors:
        print("\nbroker log errors:\n" + "\n".join(errors[:60]), file=sys.stderr)
    if not args.no_results:
        text = f"## {SECTION}\n\n" + "\n\n".join(head) + "\n\n" + "\n".join(lines) + \
            f"\n\n`{final}`\n"
        write_section(args.results, text)
        print(f"\nwrote the section \"{SECTION}\" in {args.results}")
    print(final)


def _has_psutil() -> bool:
    try:
        import psutil  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
