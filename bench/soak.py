"""Soak at volume (issue 31): delayed delivery with a backlog, a control-plane probe, kill -9.

``make soak`` (not part of ``make test``); ``SOAK_QUICK=1`` for ``--quick`` (about
3 minutes for both sides on 2 cores). Each scenario runs on one node and on a
3-broker cluster at replication factor 3 (``--side single|cluster|both``), against
kcompat brokers started by ``compat_tests._broker.Broker`` / ``compat_tests._cluster
.Cluster`` (defaults, plus ``group.initial.rebalance.delay.ms=0`` and an admin port
each; ``--broker-set KEY=VALUE`` adds settings). Traffic goes to 127.0.0.1 only.

Scenario ``delayed`` (the one implemented; ``--scenario``):

1. *idle*: the probe (below) runs alone for a few seconds — its unloaded baseline.
2. *plain*: ``--records`` records of 100 B (default 1,000,000; quick 50,000) produced
   with confluent-kafka (acks=all, linger 5 ms), without headers, to a 6-partition
   topic: the plain produce rate.
3. *delayed*: the same records to another 6-partition topic, each with ``kc-delay-ms``
   drawn uniformly from 5,000..60,000 (quick 2,000..15,000); about 5 % also carry
   ``kc-schedule-id``, and about 1 % (a fifth of those) are cancelled by a record with
   ``kc-cancel-schedule`` produced right after it to the same partition. The value
   carries the record's index, its send time and its delay. A consumer in its own
   process (assigned, no group, from the log start) notes when each record arrives:
   lateness = arrival - (send time + delay), an upper bound (the broker starts the
   delay at its append, between our send and the ack; ``ack-based`` is the lower
   bound), and exactly-once (no duplicate, none missing, no cancelled one delivered,
   none early). Delayed/plain produce rate ratio.
4. *kill*: a few seconds after the last delayed record is acknowledged, with a
   backlog pending, the busiest broker (single node: the broker; cluster: the one that
   used the most CPU since the delayed produce began) is killed with SIGKILL and
   started again on the same data dir: restart-to-ready (start until its ready line,
   Metadata answered by it and one acks=all produce through it acknowledged) and the
   time until delivery resumed (the first delayed record of a partition it led
   received after the kill / after the restart). Disk bytes of its
   ``__kc_schedule-*`` directories before the kill, after the restart and at the end.
5. *drain*: until every record that should be is delivered and the last due time has
   passed, or the side's time budget runs out.

The control-plane probe (its own process, the whole run): every second a Metadata
request, a CreateTopics of a new 1-partition topic, a consumer-group join with a new
group.id (subscribe until the first assignment) and a produce of one record with a
plain producer (acks=all) until acknowledged; each latency, p50/p99/max per kind and
phase, and failures (10 s timeout each). Beside it every 3 s it scrapes each broker's
``/metrics`` for ``kcompat_event_loop_lag_seconds`` (histogram; its absence is
reported) and ``kcompat_delayed_records_pending``. The brokers' logs are searched for
``fence_broker`` (self-fencing) and ``leads group`` (elections; term >= 2 counted
apart) before and after the kill.

Every loop is bounded in count and by ``--max-seconds`` (the whole run; split over
the sides). Results: a table printed, and a dated section appended to
bench/RESULTS.md with the load averages seen (``--no-results``: not appended).
"""

from __future__ import annotations

import argparse
import array
import contextlib
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import loadavg, proc_cpu_s, proc_status_kib, proc_status_kib_meminfo  # noqa: E402
from compat_tests._broker import Broker, free_port  # noqa: E402

VALUE_BYTES = 100
PARTITIONS = 6
BROKER_FLAGS = ("--set", "group.initial.rebalance.delay.ms=0")
PROBE_TIMEOUT_S = 10.0
SCRAPE_EVERY_S = 3.0
SCHED_PREFIX = "__kc_schedule-"
LAG_METRIC = "kcompat_event_loop_lag_seconds"
PENDING_METRIC = "kcompat_delayed_records_pending"
#: what the scraper keeps: the lag histogram, pending records, any loop / task step metric
KEEP_METRICS = ("kcompat_event_loop", "kcompat_loop", "kcompat_task", PENDING_METRIC)
CLIENT_QUIET = {"log_level": 0, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500}


@dataclass(frozen=True)
class Sizes:
    records: int
    delay_lo_ms: int
    delay_hi_ms: int
    idle_s: float
    kill_after_s: float
    late_allowance_s: float  # how long after the last due time the drain waits at most
    max_seconds: float


def sizes(args: argparse.Namespace) -> Sizes:
    if args.quick:
        s = Sizes(50_000, 2_000, 15_000, 6.0, 3.0, 20.0, 180.0)
    else:
        s = Sizes(1_000_000, 5_000, 60_000, 20.0, 5.0, 180.0, 3600.0)
    return Sizes(args.records or s.records, s.delay_lo_ms, s.delay_hi_ms, s.idle_s,
                 s.kill_after_s, s.late_allowance_s, args.max_seconds or s.max_seconds)


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs by nearest rank; nan for none."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * len(s) + 0.5)) - 1))]


def fmt_s(x: float) -> str:
    if x != x:  # nan
        return "-"
    return f"{x * 1000:.0f} ms" if x < 10 else f"{x:.1f} s"


# -- brokers -------------------------------------------------------------------------


@dataclass
class Side:
    """The brokers of one side: {node: (Broker, admin port)}."""
    name: str
    brokers: dict[int, Broker]
    admin_ports: dict[int, int]
    replication: int
    cluster: Any = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def close(self) -> None:
        for b in self.brokers.values():
            b.close()


def start_side(name: str, root: Path, extra: tuple[str, ...]) -> Side:
    flags = BROKER_FLAGS + extra
    if name == "single":
        port = free_port()
        b = Broker(root / "broker-1", extra_args=(*flags, "--set", f"admin.port={port}"))
        b.start(timeout=60)
        return Side(name, {1: b}, {1: port}, 1)
    from compat_tests._cluster import Cluster

    c = Cluster(root, extra_args=flags)
    ports = {}
    for node, b in c.brokers.items():
        ports[node] = free_port()
        b.extra_args = (*b.extra_args, "--set", f"admin.port={ports[node]}")  # --set wins
    try:
        c.start()
    except BaseException:
        c.close()
        raise
    return Side(name, dict(c.brokers), ports, 3, c)


def create_topic(bootstrap: str, topic: str, partitions: int, replication: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, partitions, replication)],
                        operation_timeout=30, request_timeout=30)[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions \
                and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic}: no leader for every partition within 60 s")


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    md = admin.list_topics(topic, timeout=10).topics.get(topic)
    return {p.id: p.leader for p in md.partitions.values()} if md is not None else {}


def sched_bytes(broker: Broker) -> int:
    """Bytes allocated to the broker's ``__kc_schedule-*`` directories."""
    total = 0
    for d in broker.data_dir.glob(SCHED_PREFIX + "*"):
        for dirpath, _dirs, files in os.walk(d):
            for f in files:
                with contextlib.suppress(FileNotFoundError):
                    total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
    return total


class LoadWatch:
    """os.getloadavg() every 5 s in a thread: the highest 1-minute load seen."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoadWatch:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg())
            self._stop.wait(5.0)

    def summary(self) -> str:
        if not self.samples:
            return "-"
        ones = [s[0] for s in self.samples]
        return (f"1-min load average min {min(ones):.2f} / mean {sum(ones) / len(ones):.2f} / "
                f"max {max(ones):.2f} over {len(ones)} samples; at the end {loadavg()}")


# -- the child processes: probe + scraper, delayed consumer ----------------------------


def child_main(kind: str, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    if kind == "probe":
        probe_child(spec)
    elif kind == "consumer":
        consumer_child(spec)
    else:
        raise SystemExit(f"unknown child {kind}")


def _stopped(spec: dict[str, Any]) -> bool:
    return time.time() > spec["deadline"] or os.path.exists(spec["stop_file"])


def probe_child(spec: dict[str, Any]) -> None:
    """Every second: Metadata, CreateTopics, a new group's join, one acks=all produce;
    beside it, scrape /metrics every few seconds. JSON lines to spec['out']."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    out = open(spec["out"], "a", buffering=1)  # noqa: SIM115 - closed at the end
    lock = threading.Lock()

    def emit(rec: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(rec) + "\n")

    def scraper() -> None:
        for _ in range(100_000):
            if _stopped(spec):
                return
            for node, port in spec["admin_ports"].items():
                t = time.time()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                timeout=5) as r:
                        text = r.read().decode()
                    kept = {}
                    for line in text.splitlines():
                        if line.startswith(KEEP_METRICS):
                            name, _, value = line.rpartition(" ")
                            with contextlib.suppress(ValueError):
                                kept[name] = float(value)
                    emit({"scrape": node, "t": t, "m": kept})
                except Exception as e:  # noqa: BLE001 - a down broker is part of the run
                    emit({"scrape": node, "t": t, "error": str(e)[:200]})
            time.sleep(SCRAPE_EVERY_S)

    threading.Thread(target=scraper, daemon=True).start()
    bootstrap = spec["bootstrap"]
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_QUIET})
    acked: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": int(PROBE_TIMEOUT_S * 1000), **CLIENT_QUIET})

    def metadata(i: int) -> None:
        md = admin.list_topics(timeout=PROBE_TIMEOUT_S)
        if not md.brokers:
            raise RuntimeError("no brokers in Metadata")

    def create(i: int) -> None:
        name = f"{spec['prefix']}-ct-{i}"
        admin.create_topics([NewTopic(name, 1, spec["replication"])],
                            request_timeout=PROBE_TIMEOUT_S)[name].result(PROBE_TIMEOUT_S + 1)

    def join(i: int) -> None:
        assigned: list[Any] = []
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{spec['prefix']}-g-{i}",
                      "session.timeout.ms": 10_000, "enable.auto.commit": False,
                      "auto.offset.reset": "latest", **CLIENT_QUIET})
        try:
            c.subscribe([spec["topic"]], on_assign=lambda _c, parts: assigned.append(parts))
            end = time.monotonic() + PROBE_TIMEOUT_S
            while not assigned and time.monotonic() < end:
                c.poll(0.05)
            if not assigned:
                raise TimeoutError("no assignment")
        finally:
            t = threading.Thread(target=c.close, daemon=True)  # a close that hangs is abandoned
            t.start()
            t.join(timeout=5)

    def produce(i: int) -> None:
        acked.clear()
        producer.produce(spec["topic"], value=b"probe %d" % i,
                         on_delivery=lambda err, _m: acked.append(err))
        end = time.monotonic() + PROBE_TIMEOUT_S + 1
        while not acked and time.monotonic() < end:
            producer.poll(0.01)
        if not acked:
            raise TimeoutError("no acknowledgement")
        if acked[0] is not None:
            raise RuntimeError(str(acked[0]))

    probes: list[tuple[str, Callable[[int], None]]] = [
        ("metadata", metadata), ("create_topics", create), ("group_join", join),
        ("produce", produce)]
    start = time.monotonic()
    for i in range(int(spec["max_rounds"])):
        if _stopped(spec):
            break
        for kind, fn in probes:
            t0, m0 = time.time(), time.monotonic()
            try:
                fn(i)
                emit({"probe": kind, "t": t0, "s": time.monotonic() - m0, "ok": True})
            except Exception as e:  # noqa: BLE001 - counted as a failure
                emit({"probe": kind, "t": t0, "s": time.monotonic() - m0, "ok": False,
                      "err": str(e)[:200]})
        # the next round on the next whole second of the schedule
        wait = start + i + 1 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    producer.flush(2)
    out.close()


def consumer_child(spec: dict[str, Any]) -> None:
    """Read the delayed topic from the start; when each record index first arrived (and
    on which partition), duplicates, unknown and cancelled deliveries."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    n = spec["records"]
    cancelled = set(spec["cancelled"])
    recv = array.array("d", bytes(8 * n))
    part = array.array("b", bytes(n))
    stats = {"received": 0, "received_ok": 0, "dupes": 0, "unknown": 0, "cancelled_delivered": 0,
             "no_scheduled_offset": 0, "first_error": ""}
    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, **CLIENT_QUIET})
    c.assign([TopicPartition(spec["topic"], p, OFFSET_BEGINNING)
              for p in range(spec["partitions"])])
    progress = Path(spec["progress"])
    last_progress = 0.0
    for _ in range(100_000_000):
        if _stopped(spec):
            break
        for m in c.consume(num_messages=5000, timeout=0.05):
            if m.error():
                if not stats["first_error"]:
                    stats["first_error"] = str(m.error())
                continue
            now = time.time()
            try:
                i = int(m.value().split(b":", 1)[0])
            except (ValueError, AttributeError):
                stats["unknown"] += 1
                continue
            if not 0 <= i < n:
                stats["unknown"] += 1
                continue
            if recv[i]:
                stats["dupes"] += 1
                continue
            recv[i] = now
            part[i] = m.partition()
            stats["received"] += 1
            if i in cancelled:
                stats["cancelled_delivered"] += 1
            else:
                stats["received_ok"] += 1
            if not any(k == "kc-scheduled-offset" for k, _v in (m.headers() or [])):
                stats["no_scheduled_offset"] += 1
        now = time.time()
        if now - last_progress >= 0.5:
            last_progress = now
            tmp = progress.with_suffix(".tmp")
            tmp.write_text(json.dumps({**stats, "t": now}))
            tmp.replace(progress)
    with contextlib.suppress(Exception):
        c.close()
    Path(spec["out"] + ".recv").write_bytes(recv.tobytes())
    Path(spec["out"] + ".part").write_bytes(part.tobytes())
    Path(spec["out"]).write_text(json.dumps(stats))


def spawn_child(kind: str, spec: dict[str, Any], workdir: Path) -> subprocess.Popen[bytes]:
    path = workdir / f"{kind}.spec.json"
    path.write_text(json.dumps(spec))
    log = open(workdir / f"{kind}.log", "ab")  # noqa: SIM115 - the child owns it
    return subprocess.Popen([sys.executable, __file__, "--child", kind, "--spec", str(path)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=str(ROOT))


def stop_child(proc: subprocess.Popen[bytes], stop_file: Path, timeout: float = 30) -> None:
    stop_file.touch()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


# -- producing ---------------------------------------------------------------------------


@dataclass
class Produced:
    n: int  # records handed to the producer
    seconds: float
    acked: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.acked / self.seconds if self.seconds > 0 else 0.0


def produce(bootstrap: str, topic: str, n: int, deadline: float,
            headers_of: Callable[[int], list[tuple[str, bytes]] | None] | None = None,
            send: array.array | None = None, ack: array.array | None = None,
            delays: list[int] | None = None,
            cancel_after: Callable[[int], bytes | None] | None = None) -> Produced:
    """Records 0..n-1 (partition i % PARTITIONS) acks=all; stops handing out records at
    ``deadline`` (epoch s). ``send``/``ack``: the times of each (the cancels' are not kept)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10_000,
                  "queue.buffering.max.messages": 500_000,
                  "message.timeout.ms": int(max(30.0, deadline - time.time() + 60) * 1000),
                  **CLIENT_QUIET})
    res = Produced(0, 0.0)

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            res.failed += 1
            if len(res.errors) < 5:
                res.errors.append(str(err))
            return
        key = msg.key()
        if key[:1] == b"c":
            return  # a cancel
        res.acked += 1
        if ack is not None:
            ack[int(key)] = time.time()

    pad = b"x" * VALUE_BYTES
    start = time.perf_counter()
    for i in range(n):
        if i % 1000 == 0 and time.time() > deadline:
            break
        headers = headers_of(i) if headers_of is not None else None
        for _ in range(100_000):
            now = time.time()
            delay = delays[i] if delays is not None else 0
            value = (b"%d:%d:%d:" % (i, int(now * 1000), delay) + pad)[:VALUE_BYTES]
            try:
                p.produce(topic, key=b"%d" % i, value=value, headers=headers,
                          partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if send is not None:
            send[i] = now
        res.n = i + 1
        if cancel_after is not None:
            sid = cancel_after(i)
            if sid is not None:
                for _ in range(100_000):
                    try:
                        p.produce(topic, key=b"c%d" % i, value=b"cancel",
                                  headers=[("kc-cancel-schedule", sid)],
                                  partition=i % PARTITIONS, on_delivery=on_delivery)
                        break
                    except BufferError:
                        p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    left = p.flush(max(5.0, deadline - time.time() + 30))
    res.seconds = time.perf_counter() - start
    if left:
        res.errors.append(f"{left} records not answered at the flush timeout")
    return res


# -- one side of the delayed scenario ----------------------------------------------------


@dataclass
class Marks:
    t: dict[str, float] = field(default_factory=dict)

    def __call__(self, name: str) -> float:
        self.t[name] = time.time()
        print(f"  [{time.strftime('%H:%M:%S')}] {name}", flush=True)
        return self.t[name]


def log_offsets(side: Side) -> dict[int, int]:
    return {n: b.log_size() for n, b in side.brokers.items()}


LEADS = re.compile(r"leads group \d+ \((.*?)\) in term (\d+)")


def scan_logs(side: Side, start: dict[int, int], end: dict[int, int] | None = None
              ) -> dict[str, Any]:
    """fence_broker / leads group / errors in each broker's log between two offsets."""
    out: dict[str, Any] = {"fence": 0, "leads": 0, "re_elections": 0, "errors": 0,
                           "warnings": 0, "excerpts": []}
    for node, b in side.brokers.items():
        if not b.log_path.exists():
            continue
        with open(b.log_path, "rb") as f:
            f.seek(start.get(node, 0))
            size = (end or {}).get(node)
            text = f.read(size - start.get(node, 0) if size is not None else -1)
        for line in text.decode("utf-8", "replace").splitlines():
            keep = False
            if "fence_broker" in line and "unfence_broker" not in line:
                out["fence"] += 1
                keep = True
            m = LEADS.search(line)
            if m:
                out["leads"] += 1
                if int(m.group(2)) >= 2:
                    out["re_elections"] += 1
                    keep = True
            if " ERROR " in line or "Traceback" in line or "CRITICAL" in line:
                out["errors"] += 1
                keep = True
            elif " WARNING " in line:
                out["warnings"] += 1
                keep = True
            if keep and len(out["excerpts"]) < 12:
                out["excerpts"].append(f"broker {node}: {line.strip()[:300]}")
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def wait_restart(side: Side, victim: int, deadline: float) -> dict[str, float]:
    """Start the killed broker again; the times (epoch) of its ready line, its first
    Metadata answer and its first acknowledged acks=all produce."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    b = side.brokers[victim]
    t: dict[str, float] = {"spawn": time.time()}
    b.start(wait=False)
    b.wait_ready(timeout=max(10.0, min(300.0, deadline - time.time())))
    t["ready_line"] = time.time()
    admin = AdminClient({"bootstrap.servers": b.bootstrap, **CLIENT_QUIET})
    for _ in range(100_000):
        if time.time() > deadline:
            return t
        try:
            md = admin.list_topics(timeout=2)
            if md.brokers and victim in md.brokers:
                t["metadata"] = time.time()
                break
        except Exception:  # noqa: BLE001 - until it answers
            time.sleep(0.05)
    acked: list[Any] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0,
                  "message.timeout.ms": 5000, **CLIENT_QUIET})
    for _ in range(10_000):
        if time.time() > deadline:
            return t
        acked.clear()
        p.produce("soak-probe", value=b"ready?", on_delivery=lambda e, _m: acked.append(e))
        p.flush(6)
        if acked and acked[0] is None:
            t["produce"] = time.time()
            break
        time.sleep(0.1)
    return t


def delayed_side(side: Side, sz: Sizes, workdir: Path, side_deadline: float,
                 seed: int) -> dict[str, Any]:
    n = sz.records
    rng = random.Random(seed)
    delays = [rng.randint(sz.delay_lo_ms, sz.delay_hi_ms) for _ in range(n)]
    ids: dict[int, bytes] = {}
    cancelled: set[int] = set()
    for i in range(n):
        if rng.random() < 0.05:
            ids[i] = b"s%d" % i
            if rng.random() < 0.2:
                cancelled.add(i)
    marks = Marks()
    r: dict[str, Any] = {"side": side.name, "records": n, "marks": marks.t,
                         "with_id": len(ids), "cancelled": len(cancelled)}
    bootstrap = side.bootstrap
    for topic in ("soak-plain", "soak-delayed"):
        create_topic(bootstrap, topic, PARTITIONS, side.replication)
    create_topic(bootstrap, "soak-probe", 1, side.replication)
    log0 = log_offsets(side)
    stop_probe, stop_cons = workdir / "probe.stop", workdir / "consumer.stop"
    probe = spawn_child("probe", {
        "bootstrap": bootstrap, "admin_ports": {str(k): v for k, v in side.admin_ports.items()},
        "out": str(workdir / "probe.jsonl"), "deadline": side_deadline + 30,
        "stop_file": str(stop_probe), "prefix": f"soak-{side.name}",
        "replication": side.replication, "topic": "soak-probe",
        "max_rounds": int(side_deadline - time.time()) + 60}, workdir)
    cons: subprocess.Popen[bytes] | None = None
    log_kill: dict[int, int] | None = None
    try:
        marks("idle")
        time.sleep(min(sz.idle_s, max(0.0, side_deadline - time.time())))
        marks("plain")
        plain = produce(bootstrap, "soak-plain", n, side_deadline)
        r["plain"] = plain
        cons = spawn_child("consumer", {
            "bootstrap": bootstrap, "topic": "soak-delayed", "partitions": PARTITIONS,
            "records": n, "cancelled": sorted(cancelled), "group": f"soak-{side.name}-reader",
            "out": str(workdir / "consumer.json"), "progress": str(workdir / "progress.json"),
            "deadline": side_deadline + 30, "stop_file": str(stop_cons)}, workdir)
        send = array.array("d", bytes(8 * n))
        ack = array.array("d", bytes(8 * n))
        cpu0 = {k: proc_cpu_s(b.pid) for k, b in side.brokers.items() if b.pid}
        marks("delayed produce")
        dly = produce(bootstrap, "soak-delayed", n, side_deadline,
                      headers_of=lambda i: [("kc-delay-ms", b"%d" % delays[i])]
                      + ([("kc-schedule-id", ids[i])] if i in ids else []),
                      send=send, ack=ack, delays=delays,
                      cancel_after=lambda i: ids[i] if i in cancelled else None)
        r["delayed"] = dly
        marks("delivery")
        # -- kill -9 of the busiest broker with the backlog pending ----------------------
        time.sleep(max(0.0, min(sz.kill_after_s, side_deadline - time.time())))
        cpu = {k: proc_cpu_s(b.pid) - cpu0.get(k, 0.0) for k, b in side.brokers.items()
               if b.pid and b.running}
        victim = max(cpu, key=lambda k: cpu[k])
        r["cpu_since_delayed"] = cpu
        r["victim"] = victim
        vb = side.brokers[victim]
        r["rss_mib_before_kill"] = {k: proc_status_kib(b.pid, "VmRSS") / 1024
                                    for k, b in side.brokers.items() if b.pid and b.running}
        try:
            led = leaders(bootstrap, "soak-delayed")
        except Exception:  # noqa: BLE001
            led = {}
        r["victim_partitions"] = sorted(p for p, ldr in led.items() if ldr == victim) \
            if side.name != "single" else list(range(PARTITIONS))
        r["sched_bytes_before"] = sched_bytes(vb)
        r["sched_bytes_all_before"] = sum(sched_bytes(b) for b in side.brokers.values())
        log_kill = log_offsets(side)
        t_kill = marks("kill -9")
        r["pending_at_kill"] = sum(
            1 for i in range(dly.n) if i not in cancelled and send[i] * 1000 + delays[i]
            > t_kill * 1000)
        vb.kill()
        time.sleep(0.2)
        restart = wait_restart(side, victim, side_deadline)
        r["restart"] = restart
        marks("restarted")
        r["sched_bytes_after_restart"] = sched_bytes(vb)
        # -- drain ------------------------------------------------------------------------
        expected = dly.n - sum(1 for i in cancelled if i < dly.n)
        last_due = max((send[i] + delays[i] / 1000 for i in range(dly.n)), default=time.time())
        drain_until = min(side_deadline, last_due + sz.late_allowance_s)
        progress = workdir / "progress.json"
        got: dict[str, Any] = {}
        for _ in range(1_000_000):
            now = time.time()
            if now > drain_until:
                break
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                got = json.loads(progress.read_text())
            if got.get("received_ok", 0) >= expected and now > last_due + 2.0:
                break
            time.sleep(0.5)
        marks("end")
        r["sched_bytes_end"] = sched_bytes(vb)
        r["sched_bytes_all_end"] = sum(sched_bytes(b) for b in side.brokers.values())
    finally:
        if cons is not None:
            stop_child(cons, stop_cons)
        stop_child(probe, stop_probe)
    r["log_before_kill"] = scan_logs(side, log0, log_kill)
    r["log_after_kill"] = scan_logs(side, log_kill) if log_kill is not None else {}
    # -- what the consumer saw -----------------------------------------------------------
    cstats = json.loads((workdir / "consumer.json").read_text())
    recv = array.array("d")
    recv.frombytes((workdir / "consumer.json.recv").read_bytes())
    part = array.array("b")
    part.frombytes((workdir / "consumer.json.part").read_bytes())
    r["consumer"] = cstats
    late_send, late_ack, early = [], [], 0
    late_unaffected: list[float] = []
    t_kill = marks.t["kill -9"]
    t_back = restart.get("produce", restart.get("ready_line", t_kill)) + 5.0
    missing = 0
    for i in range(dly.n):
        if i in cancelled:
            continue
        if not recv[i]:
            missing += 1
            continue
        due_s = send[i] + delays[i] / 1000
        ls = recv[i] - due_s
        late_send.append(ls)
        if ack[i]:
            late_ack.append(recv[i] - (ack[i] + delays[i] / 1000))
        if ls < -0.001:
            early += 1
        if not t_kill - 1.0 <= due_s <= t_back:
            late_unaffected.append(ls)
    r["missing"] = missing
    r["early"] = early
    r["late_send"] = late_send
    r["late_ack"] = late_ack
    r["late_unaffected"] = late_unaffected
    vparts = set(r["victim_partitions"])
    after_kill = [recv[i] for i in range(dly.n) if recv[i] > t_kill and part[i] in vparts]
    after_spawn = [x for x in after_kill if x > restart["spawn"]]
    r["resume_after_kill"] = min(after_kill) - t_kill if after_kill else None
    r["resume_after_restart"] = min(after_spawn) - restart["spawn"] if after_spawn else None
    r["delivered_between_kill_and_ready"] = sum(
        1 for i in range(dly.n) if t_kill < recv[i] <= restart.get("produce", t_kill))
    r["probe"] = read_jsonl(workdir / "probe.jsonl")
    return r


# -- the report --------------------------------------------------------------------------


def phase_of(t: float, marks: dict[str, float]) -> str:
    kill = marks.get("kill -9", float("inf"))
    back = marks.get("restarted", float("inf"))
    if t < marks.get("plain", 0):
        return "idle"
    if t < marks.get("delayed produce", kill):
        return "plain"
    if t < kill:
        return "delayed"
    if t < back:
        return "outage"
    return "after"


PHASES = ("idle", "plain", "delayed", "outage", "after")


def lag_summary(scrapes: list[dict[str, Any]]) -> list[str]:
    """Per node: the loop-lag histogram's count over the run (counter resets at the
    restart handled), its p99 bucket bound, the share above 50 ms; pending max."""
    lines = []
    nodes = sorted({s["scrape"] for s in scrapes})
    for node in nodes:
        snaps = [s for s in scrapes if s["scrape"] == node and "m" in s]
        errors = sum(1 for s in scrapes if s["scrape"] == node and "error" in s)
        pend = [sum(v for k, v in s["m"].items() if k.startswith(PENDING_METRIC)) for s in snaps]
        buckets: dict[float, float] = {}
        prev: dict[float, float] = {}
        others: dict[str, float] = {}
        for s in snaps:
            cur: dict[float, float] = {}
            for k, v in s["m"].items():
                if k.startswith(LAG_METRIC + "_bucket"):
                    m = re.search(r'le="([^"]+)"', k)
                    if m:
                        le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
                        cur[le] = cur.get(le, 0.0) + v
                elif not k.startswith((LAG_METRIC, PENDING_METRIC)):
                    others[k] = max(others.get(k, float("-inf")), v)
            if cur:
                reset = sum(cur.values()) < sum(prev.values())
                for le, v in cur.items():
                    buckets[le] = buckets.get(le, 0.0) + (v if reset else v - prev.get(le, 0.0))
                prev = cur
        line = f"broker {node}: {len(snaps)} scrapes ({errors} failed)"
        if pend:
            line += f", {PENDING_METRIC} max {max(pend):,.0f}"
        if buckets:
            les = sorted(buckets)
            total = buckets[les[-1]]
            p99 = next((le for le in les if buckets[le] >= 0.99 * total), les[-1])
            over = total - max((buckets[le] for le in les if le <= 0.05), default=0.0)
            top = next((le for le in les if buckets[le] >= total), les[-1])
            line += (f"; {LAG_METRIC}: {total:,.0f} samples, p99 <= {p99:g} s, "
                     f"{over:,.0f} above 50 ms, all <= {top:g} s")
        else:
            line += f"; {LAG_METRIC} not exported"
        for k, v in sorted(others.items())[:8]:
            line += f"; {k} max {v:g}"
        lines.append(line)
    return lines


def report(r: dict[str, Any], sz: Sizes) -> list[str]:
    plain, dly = r["plain"], r["delayed"]
    m = r["marks"]
    rs = r["restart"]
    lines = [f"### {r['side']} ({'1 broker' if r['side'] == 'single' else '3 brokers, RF 3'})",
             ""]
    ratio = dly.rate / plain.rate if plain.rate else float("nan")
    lines += [
        "| figure | value |", "|---|---|",
        f"| plain produce (confluent-kafka, acks=all, {PARTITIONS} partitions, "
        f"{VALUE_BYTES} B) | {plain.rate:,.0f} rec/s ({plain.acked:,} acked, "
        f"{plain.failed} failed) |",
        f"| delayed produce (kc-delay-ms {sz.delay_lo_ms}..{sz.delay_hi_ms}) | "
        f"{dly.rate:,.0f} rec/s ({dly.acked:,} of {dly.n:,} acked, {dly.failed} failed) |",
        f"| delayed / plain produce rate | {ratio:.2f} |",
    ]
    ls, la, lu = r["late_send"], r["late_ack"], r["late_unaffected"]
    c = r["consumer"]
    lines += [
        f"| lateness (arrival - send - delay) p50 / p99 / max | {fmt_s(pct(ls, .5))} / "
        f"{fmt_s(pct(ls, .99))} / {fmt_s(max(ls) if ls else float('nan'))} |",
        f"| lateness, ack-based (lower bound) p99 | {fmt_s(pct(la, .99))} |",
        f"| lateness p99 of records not due around the kill ({len(lu):,}) | "
        f"{fmt_s(pct(lu, .99))} |",
        f"| delivered / missing / duplicates / early | {c['received']:,} / {r['missing']:,} / "
        f"{c['dupes']} / {r['early']} |",
        f"| cancelled (of {r['cancelled']} with kc-cancel-schedule) delivered anyway | "
        f"{c['cancelled_delivered']} |",
        f"| delivered without kc-scheduled-offset / unknown | {c['no_scheduled_offset']} / "
        f"{c['unknown']} |",
        f"| killed (kill -9) | broker {r['victim']} (broker CPU s since the delayed produce: "
        + ", ".join(f"{k}: {v:.0f}" for k, v in sorted(r["cpu_since_delayed"].items()))
        + f"), {r['pending_at_kill']:,} records due after the kill |",
        "| restart: ready line / Metadata / produce acked (s after start) | "
        + " / ".join(f"{rs[k] - rs['spawn']:.1f}" if k in rs else "never"
                     for k in ("ready_line", "metadata", "produce")) + " |",
        "| delivery on its partitions resumed (s after kill / after restart) | "
        + " / ".join(f"{x:.1f}" if x is not None else "never"
                     for x in (r["resume_after_kill"], r["resume_after_restart"])) + " |",
        f"| `__kc_schedule-*` on broker {r['victim']}: before kill / after restart / end | "
        f"{r['sched_bytes_before'] / 2**20:.1f} / {r['sched_bytes_after_restart'] / 2**20:.1f}"
        f" / {r['sched_bytes_end'] / 2**20:.1f} MiB |",
        "| broker RSS before the kill | "
        + ", ".join(f"{k}: {v:.0f} MiB" for k, v in sorted(r["rss_mib_before_kill"].items()))
        + " |",
    ]
    for when in ("before", "after"):
        lg = r[f"log_{when}_kill"]
        if lg:
            lines.append(f"| log {when} the kill: fence_broker / leads group (term >= 2) / "
                         f"errors / warnings | {lg['fence']} / {lg['leads']} "
                         f"({lg['re_elections']}) / {lg['errors']} / {lg['warnings']} |")
    lines.append(f"| wall time of the side | {m['end'] - m['idle']:.0f} s |")
    # probe table
    probes = [p for p in r["probe"] if "probe" in p]
    lines += ["", "Control-plane probe (latency p50 / p99 / max, failures of n), by phase:", "",
              "| probe | " + " | ".join(PHASES) + " |", "|---|" + "---|" * len(PHASES)]
    for kind in ("metadata", "create_topics", "group_join", "produce"):
        cells = []
        for ph in PHASES:
            sel = [p for p in probes if p["probe"] == kind and phase_of(p["t"], m) == ph]
            ok = [p["s"] for p in sel if p["ok"]]
            if not sel:
                cells.append("-")
                continue
            cells.append(f"{fmt_s(pct(ok, .5))} / {fmt_s(pct(ok, .99))} / "
                         f"{fmt_s(max(ok) if ok else float('nan'))}, "
                         f"{len(sel) - len(ok)} of {len(sel)} failed")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    idle = [p["s"] for p in probes if p["probe"] == "produce" and p["ok"]
            and phase_of(p["t"], m) == "idle"]
    loaded = [p["s"] for p in probes if p["probe"] == "produce" and p["ok"]
              and phase_of(p["t"], m) in ("plain", "delayed")]
    if idle and loaded:
        lines.append(f"\nplain producer p99 under load / idle: {pct(loaded, .99) / pct(idle, .99):.1f}x")
    fails = [p for p in probes if not p["ok"]][:4]
    if fails:
        lines.append("\nfirst probe failures: " + "; ".join(
            f"{p['probe']} at +{p['t'] - m['idle']:.0f} s ({phase_of(p['t'], m)}): {p['err']}"
            for p in fails))
    scrapes = [p for p in r["probe"] if "scrape" in p]
    lines += ["", "Metrics scraped from /metrics:", ""]
    lines += [f"* {x}" for x in lag_summary(scrapes)]
    excerpts = r["log_before_kill"].get("excerpts", []) + r["log_after_kill"].get("excerpts", [])
    if excerpts:
        lines += ["", "Log excerpts (fence_broker, re-elections, errors, warnings):", "", "```"]
        lines += excerpts[:16] + ["```"]
    if plain.errors or dly.errors or c.get("first_error"):
        lines.append("\nclient errors: " + "; ".join(plain.errors[:2] + dly.errors[:3]
                                                     + [c.get("first_error", "")]))
    return lines


# -- main --------------------------------------------------------------------------------


SCENARIOS: dict[str, Callable[[Side, Sizes, Path, float, int], dict[str, Any]]] = {
    "delayed": delayed_side,
}


def machine_line() -> str:
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import confluent_kafka

    return (f"{os.cpu_count()} cores, {proc_status_kib_meminfo() / 1048576:.1f} GiB RAM, "
            f"CPU {model}, {platform.system()} {platform.release()}, Python "
            f"{platform.python_version()}, confluent-kafka {confluent_kafka.version()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="50k records, 2-15 s delays, ~3 min")
    ap.add_argument("--side", choices=("single", "cluster", "both"), default="both")
    ap.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all")
    ap.add_argument("--records", type=int, default=0, help="records per scenario")
    ap.add_argument("--max-seconds", type=float, default=0.0,
                    help="the whole run's budget (default 3600; quick 180)")
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (brokers' logs)")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args.child, args.spec)
        return
    sz = sizes(args)
    run_start = time.time()
    deadline = run_start + sz.max_seconds
    sides = ["single", "cluster"] if args.side == "both" else [args.side]
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    extra = tuple(x for kv in args.broker_set for x in ("--set", kv))
    load0 = loadavg()
    lines: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="kcompat-soak-"))
    print(f"soak: work dir {tmp}; sides {sides}; scenarios {scenarios}; {sz}", flush=True)
    with LoadWatch() as watch:
        jobs = [(s, sc) for s in sides for sc in scenarios]
        for k, (side_name, scenario) in enumerate(jobs):
            left = deadline - time.time()
            if left < 20:
                lines += [f"### {side_name} / {scenario}: skipped, the time budget ran out"]
                continue
            job_deadline = time.time() + left / (len(jobs) - k)
            work = tmp / f"{side_name}-{scenario}"
            work.mkdir(parents=True)
            print(f"== {scenario} on {side_name} (until +{job_deadline - run_start:.0f} s)",
                  flush=True)
            side = start_side(side_name, work / "brokers", extra)
            try:
                res = SCENARIOS[scenario](side, sz, work, job_deadline, args.seed)
            except Exception as e:  # noqa: BLE001 - reported, the next side still runs
                import traceback

                traceback.print_exc()
                lines += [f"### {side_name} / {scenario}: FAILED: {e!r}", "", "```"]
                for node, b in side.brokers.items():
                    lines += [f"broker {node}:", *b.tail(15).splitlines()]
                lines.append("```")
                res = None
            finally:
                side.close()
            if res is not None:
                section = report(res, sz)
                lines += section
                print("\n".join(section), flush=True)
            lines.append("")
    load = watch.summary()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(run_start))
    cmd = " ".join(["bench/soak.py", *sys.argv[1:]])
    head = [f"## Soak at volume (issue 31) — {stamp}", "",
            f"`{cmd}`; {sz.records:,} records per scenario, delays "
            f"{sz.delay_lo_ms}..{sz.delay_hi_ms} ms, budget {sz.max_seconds:.0f} s, "
            f"wall time {time.time() - run_start:.0f} s", "",
            f"machine: {machine_line()}", "",
            f"load average before: {load0}; during: {load}", "",
            "brokers: `" + " ".join(BROKER_FLAGS + extra) + " --set admin.port=<free>`"
            " (otherwise defaults: flush mode acks_all)", ""]
    print("\n".join(["", *head, *lines]), flush=True)
    if not args.no_results:
        with (ROOT / "bench" / "RESULTS.md").open("a") as f:
            f.write("\n" + "\n".join(head + lines).rstrip() + "\n")
    if args.keep:
        print(f"work dir kept: {tmp}")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
