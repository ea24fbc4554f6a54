"""Soak at volume (issue 31): extensions with a backlog, a control-plane probe, kill -9.

``make soak`` (not part of ``make test``); ``SOAK_QUICK=1`` for ``--quick`` (about
3 minutes for both sides on 2 cores). Each scenario runs on one node and on a
3-broker cluster at replication factor 3 (``--side single|cluster|both``), against
kcompat brokers started by ``compat_tests._broker.Broker`` / ``compat_tests._cluster
.Cluster`` (defaults, plus ``group.initial.rebalance.delay.ms=0`` and an admin port
each; ``--broker-set KEY=VALUE`` adds settings). Traffic goes to 127.0.0.1 only.

Scenarios (``--scenario``, default all; quick: delayed), each preceded by an *idle*
phase (the probe alone: its unloaded baseline) and a *plain* phase: ``--records``
records of 100 B (default 1,000,000; quick 50,000) produced with confluent-kafka
(idempotent, acks=all, linger 5 ms) without headers to a 6-partition topic, the plain produce rate.
Each ends with a *kill*: with a backlog pending, the busiest broker (single node: the
broker; cluster: the one that used the most CPU since the scenario's produce began) is
killed with SIGKILL and started again on the same data dir: restart-to-ready (start
until its ready line, Metadata answered by it naming itself and one acks=all produce
through it acknowledged), when arrivals on the partitions it led resumed, and the disk
bytes of its state directories before the kill, after the restart and at the end.

* ``delayed``: the same records to another 6-partition topic, each with
  ``kc-delay-ms`` drawn uniformly from 5,000..60,000 (quick 2,000..15,000); about 5 %
  also carry ``kc-schedule-id``, and about 1 % (a fifth of those) are cancelled by a
  record with ``kc-cancel-schedule`` produced right after it to the same partition.
  The value carries the record's index, its send time and its delay. A consumer in its
  own process (assigned, no group, from the log start) notes when each record arrives:
  lateness = arrival - (ack + delay), a lower bound (the broker starts the delay at its
  append, between our send and the ack) and arrival - (send + delay), an upper bound
  (includes the time the record waited in the producer's queue); exactly-once (no
  duplicate, none missing, no cancelled one delivered, none early). Delayed/plain
  produce rate. Killed a few seconds after the last ack; ``__kc_schedule-*`` bytes.
  Then, ``TERM_AFTER_S`` after the restarted broker took its first produce and with a
  backlog still pending, a *clean* restart (phase ``SIGTERM``): the busiest broker since
  that restart (on 3 brokers, of the two not killed: the killed one leads nothing yet)
  gets SIGTERM and is started again once it exits: how long it took to stop,
  restart-to-ready and when arrivals on its partitions resumed, as for the kill.
* ``dedup``: ``kc.dedup.by=header``, a one-hour window, ``kc.dedup.max.entries`` = the
  record count; every record with ``kc-dedup-id``, 10 % of them repeating an earlier id;
  after the restart 10 % of the ids are sent again: every id stored exactly once.
* ``retry``: a consumer group (its own process) fails every record, handing it to
  ``<topic>.retry`` with ``kcompat.ext.nack``; after ``kc.retry.max.attempts`` (3,
  backoffs 2 + 4 + 8 s) the broker moves it to ``<topic>.dlq``, where a reader checks
  each arrives exactly once and how long after its send.
* ``share``: a share group of 4 members (``compat_tests._share_member``, confluent-kafka's
  ShareConsumer, ``share.auto.offset.reset=earliest``) accepting every record after
  releasing 5 % (``--policy random``); every record settled, none accepted twice.

* ``view``: a filtered view (``kc.view.of`` / ``kc.view.filter`` ``n < 1``) over a
  source of 10 x ``--records`` records (the issue's 10M by default), 10 % matching,
  read from its start by a reader, killed during the read: only and every matching
  record, once; the read rate.

The control-plane probe (its own process, the whole run): every second a Metadata
request, a CreateTopics of a new 1-partition topic, a consumer-group join with a new
group.id (subscribe until the first assignment) and a produce of one record with a
plain producer (acks=all) until acknowledged; each latency, p50/p99/max per kind and
phase, and failures (10 s timeout each). Beside it a steady plain producer (its own
connection) sends one acks=all record every 100 ms and waits for its ack: its latency
p50/p99 per phase against the idle phase's p99 (the first 5 samples, connecting, left
out), the issue's "plain producer p99 under extension load". Beside it every 3 s it scrapes each broker's
``/metrics`` for ``kcompat_event_loop_lag_seconds`` (histogram; its absence is
reported), ``kcompat_delayed_records_pending``, the backpressure metrics (the largest
lag per source, the throttle given per source) and the delayed-delivery lateness
(its mean: what the broker adds to a delay, a retry's backoff or a dead letter's move). The brokers' logs are searched for
``fence_broker`` (self-fencing) and ``leads group`` (elections; term >= 2 counted
apart) before and after the kill, and for the steps of the loop of 50 ms or more,
which the brokers log with their CPU time (``kcompat.loop.trace.ms=50``): issue 31's
budget is the CPU a task's step takes, and the wall clock of a step also holds its
waits for a core, which three brokers and their clients on a small host make.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import (  # noqa: E402
    cpu_model,
    loadavg,
    proc_cpu_s,
    proc_status_kib,
    proc_status_kib_meminfo,
)
from compat_tests._broker import Broker, free_port  # noqa: E402

VALUE_BYTES = 100
PARTITIONS = 6
BROKER_FLAGS = ("--set", "group.initial.rebalance.delay.ms=0",
                # each step of the loop of 50 ms or more logged with its CPU time and its
                # wait for a core (two clocks read per step, about 5 us): the steps over
                # the budget, told apart from the waits three brokers on a small host make
                "--set", "kcompat.loop.trace.ms=50")
PROBE_TIMEOUT_S = 10.0
#: the steady plain producer's period, and its first samples left out (connecting)
PLAIN_EVERY_S = 0.1
PLAIN_WARMUP = 5
CONTROL_PROBES = ("metadata", "create_topics", "group_join")
SCRAPE_EVERY_S = 3.0
SCHED_PREFIX = "__kc_schedule-"
LAG_METRIC = "kcompat_event_loop_lag_seconds"
ON_CPU_METRIC = "kcompat_event_loop_longest_step_on_cpu_seconds"
GC_METRIC = "kcompat_gc_pause_seconds"
FSYNC_METRIC = "kcompat_fsync_pass"
GAP_METRIC = "kcompat_metadata_leader_gap"
GAP_NEAR_S = "0.75"  # a gap over this: past half an election timeout's fetch wait by half
GAP_FAR_S = "1.5"  # and over this: three quarters of the way to the fetch timeout (2 s)
PENDING_METRIC = "kcompat_delayed_records_pending"
#: what the scraper keeps: the lag histogram, pending records, any loop / task step metric
BACKPRESSURE_PREFIX = "kcompat_backpressure_"  # lag per source and key, throttle per source
LATENESS_METRIC = "kcompat_delayed_delivery_lateness_seconds"
KEEP_METRICS = ("kcompat_event_loop", "kcompat_loop", "kcompat_task", PENDING_METRIC,
                BACKPRESSURE_PREFIX, LATENESS_METRIC + "_sum", LATENESS_METRIC + "_count",
                GC_METRIC + "_sum", GC_METRIC + "_count", FSYNC_METRIC + "_seconds_sum",
                FSYNC_METRIC + "_seconds_count", FSYNC_METRIC + "_longest_seconds",
                GAP_METRIC + "_seconds_count", GAP_METRIC + "_longest_seconds",
                f'{GAP_METRIC}_seconds_bucket{{le="{GAP_NEAR_S}"}}')
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


def create_topic(bootstrap: str, topic: str, partitions: int, replication: int,
                 configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, partitions, replication, config=configs or {})],
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


def cpu_ticks() -> tuple[int, int]:
    """All CPU time and the time stolen by the hypervisor (``/proc/stat``, in
    ticks); (0, 0) where the file is not there."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return sum(fields[:8]), (fields[7] if len(fields) > 7 else 0)


class LoadWatch:
    """os.getloadavg() every 5 s in a thread: the highest 1-minute load seen; and
    the share of CPU time a virtual machine's host took back (steal) meanwhile —
    on a shared host it makes every rate lower, whatever the code does."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.ticks0 = cpu_ticks()
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
        total, steal = (b - a for a, b in zip(self.ticks0, cpu_ticks(), strict=True))
        stolen = f"; CPU steal {100 * steal / total:.0f} % of the time" if total > 0 else ""
        return (f"1-min load average min {min(ones):.2f} / mean {sum(ones) / len(ones):.2f} / "
                f"max {max(ones):.2f} over {len(ones)} samples; at the end {loadavg()}"
                f"{stolen}")


# -- the child processes: probe + scraper, delayed consumer ----------------------------


def child_main(kind: str, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    if kind == "probe":
        probe_child(spec)
    elif kind == "consumer":
        consumer_child(spec)
    elif kind == "retrier":
        retrier_child(spec)
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

    threading.Thread(target=steady_produce, args=(
        bootstrap, spec["topic"], lambda: _stopped(spec),
        lambda rec: emit({"probe": "plain_latency", **rec})), daemon=True).start()
    probes: list[tuple[str, Callable[[int], None]]] = [
        ("metadata", metadata), ("create_topics", create), ("group_join", join),
        ("produce", produce)]
    next_round = time.monotonic()
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
        # a round a second; after a slow round the next starts at once (no catching up)
        next_round = max(next_round + 1.0, time.monotonic())
        time.sleep(max(0.0, next_round - time.monotonic()))
    producer.flush(2)
    out.close()


def steady_produce(bootstrap: str, topic: str, stopped: Callable[[], bool],
                   emit: Callable[[dict[str, Any]], None]) -> None:
    """The plain producer's latency, PLAIN_EVERY_S apart (enough samples for a p99 per
    phase): its own producer and connection, one acks=all record at a time until
    acked, until ``stopped``; ``emit`` gets each one's send time ``t``, latency ``s``,
    ``ok`` and index ``i``. The soak's probe runs it, and bench/plain_p99.py."""
    from confluent_kafka import Producer

    own = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                    "message.timeout.ms": int(PROBE_TIMEOUT_S * 1000), **CLIENT_QUIET})
    got: list[Any] = []
    for i in range(10_000_000):
        if stopped():
            break
        got.clear()
        t0, m0 = time.time(), time.monotonic()
        own.produce(topic, value=b"steady %d" % i, on_delivery=lambda err, _m: got.append(err))
        end = m0 + PROBE_TIMEOUT_S + 1
        while not got and time.monotonic() < end:
            own.poll(0.002)
        emit({"t": t0, "s": time.monotonic() - m0, "ok": bool(got) and got[0] is None, "i": i})
        time.sleep(max(0.0, PLAIN_EVERY_S - (time.monotonic() - m0)))
    own.flush(2)


def consumer_child(spec: dict[str, Any]) -> None:
    """Read a topic from its start (assigned, no group); when each record index (the
    value's first field) first arrived and on which partition, duplicates, unknown
    records, cancelled ones delivered, records without ``spec['header']``, errors. A
    duplicate is told apart by that header (delayed records: ``kc-scheduled-offset``,
    where the record was stored in its partition): the same value is the same stored
    record delivered twice (``dupes_same``, a broker fault); another value is a record
    stored twice (``dupes_stored_twice``: a producer that is not idempotent re-sent a
    batch that was stored — at least once, as in Kafka)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    n = spec["records"]
    cancelled = set(spec["cancelled"])
    header = spec.get("header")
    recv = array.array("d", bytes(8 * n))
    part = array.array("b", bytes(n))
    first_tag = array.array("q", [-1]) * n  # the header's value on the first copy
    stats: dict[str, Any] = {"received": 0, "received_ok": 0, "dupes": 0, "unknown": 0,
                             "dupes_same": 0, "dupes_stored_twice": 0,
                             "cancelled_delivered": 0, "missing_header": 0, "errors": {},
                             "dupe_samples": []}
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
                e = m.error().name()
                stats["errors"][e] = stats["errors"].get(e, 0) + 1
                stats.setdefault("error_sample", {}).setdefault(e, str(m.error())[:200])
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
            tag = _header_int(m.headers(), header)
            if recv[i]:
                stats["dupes"] += 1
                if header is not None:
                    stats["dupes_same" if tag == first_tag[i] else "dupes_stored_twice"] += 1
                if len(stats["dupe_samples"]) < 200:  # index, partition, offset, first, again
                    stats["dupe_samples"].append((i, m.partition(), m.offset(), recv[i], now))
                continue
            recv[i] = now
            part[i] = m.partition()
            first_tag[i] = tag
            stats["received"] += 1
            if i in cancelled:
                stats["cancelled_delivered"] += 1
            else:
                stats["received_ok"] += 1
            if header is not None and not any(k == header for k, _v in (m.headers() or [])):
                stats["missing_header"] += 1
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


def _header_int(headers: Any, name: str | None) -> int:
    """The value of header ``name`` as an integer; -1 if absent or not one."""
    for k, v in headers or ():
        if k == name:
            try:
                return int(v)
            except (TypeError, ValueError):
                return -1
    return -1


def spawn_child(kind: str, tag: str, spec: dict[str, Any], workdir: Path
                ) -> subprocess.Popen[bytes]:
    path = workdir / f"{tag}.spec.json"
    path.write_text(json.dumps(spec))
    log = open(workdir / f"{tag}.log", "ab")  # noqa: SIM115 - the child owns it
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
    cancel_acks: dict[int, float] = field(default_factory=dict)  # index -> its cancel's ack
    # requests the client gave up waiting for (librdkafka's req_timeouts): each is
    # re-sent, stored twice if the broker had stored it (the producer is not idempotent)
    request_timeouts: int = 0

    @property
    def rate(self) -> float:
        return self.acked / self.seconds if self.seconds > 0 else 0.0


def produce(bootstrap: str, topic: str, n: int, deadline: float, *,
            order: list[int] | None = None,
            headers_of: Callable[[int], list[tuple[str, bytes]] | None] | None = None,
            send: array.array | None = None, ack: array.array | None = None,
            delays: list[int] | None = None,
            cancel_after: Callable[[int], bytes | None] | None = None) -> Produced:
    """n records acks=all, record ``order[pos]`` (default ``pos``) at position pos, to
    partition index % PARTITIONS, value ``index:send ms:delay ms:`` padded; stops handing
    out records at ``deadline`` (epoch s). ``send``/``ack``: each index's times (the
    last send, the first ack; a cancel's are not kept)."""
    from confluent_kafka import Producer

    # idempotent, as Kafka's Java producer is by default: a non-idempotent one resends a
    # request that waited past its timeout (deep pipelines under load do), and the records
    # it had already stored are stored twice — at least once, as on Kafka
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10_000,
                  "enable.idempotence": True,
                  "queue.buffering.max.messages": 500_000,
                  "message.timeout.ms": int(max(30.0, deadline - time.time() + 60) * 1000),
                  "statistics.interval.ms": 1000, "stats_cb": lambda doc: on_stats(doc),
                  **CLIENT_QUIET})
    res = Produced(0, 0.0)

    def on_stats(doc: str) -> None:
        brokers = json.loads(doc).get("brokers", {}).values()
        res.request_timeouts = max(res.request_timeouts,
                                   sum(int(b.get("req_timeouts", 0)) for b in brokers))

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            res.failed += 1
            if len(res.errors) < 5:
                res.errors.append(str(err))
            return
        key = msg.key()
        if key[:1] == b"c":  # a cancel
            res.cancel_acks[int(key[1:])] = time.time()
            return
        res.acked += 1
        if ack is not None:
            i = int(key)
            if not ack[i]:
                ack[i] = time.time()

    def put(**kw: Any) -> None:
        for _ in range(100_000):
            try:
                p.produce(topic, on_delivery=on_delivery, **kw)
                return
            except BufferError:
                p.poll(0.05)

    pad = b"x" * VALUE_BYTES
    start = time.perf_counter()
    for pos in range(n):
        if pos % 1000 == 0 and time.time() > deadline:
            break
        i = order[pos] if order is not None else pos
        now = time.time()
        delay = delays[i] if delays is not None else 0
        put(key=b"%d" % i, value=(b"%d:%d:%d:" % (i, int(now * 1000), delay) + pad)[:VALUE_BYTES],
            headers=headers_of(i) if headers_of is not None else None,
            partition=i % PARTITIONS)
        if send is not None:
            send[i] = now
        res.n = pos + 1
        sid = cancel_after(i) if cancel_after is not None else None
        if sid is not None:
            put(key=b"c%d" % i, value=b"cancel", headers=[("kc-cancel-schedule", sid)],
                partition=i % PARTITIONS)
        if pos % 5000 == 0:
            p.poll(0)
    left = p.flush(max(5.0, deadline - time.time() + 30))
    res.seconds = time.perf_counter() - start
    p.poll(0)  # the last statistics
    if left:
        res.errors.append(f"{left} records not answered at the flush timeout")
    return res


# -- a run: one scenario on one side ---------------------------------------------------


class Marks:
    """Phase marks (epoch s), printed as they are set."""

    def __init__(self) -> None:
        self.t: dict[str, float] = {}

    def __call__(self, name: str) -> float:
        self.t[name] = time.time()
        print(f"  [{time.strftime('%H:%M:%S')}] {name}", flush=True)
        return self.t[name]


def log_offsets(side: Side) -> dict[int, int]:
    return {n: b.log_size() for n, b in side.brokers.items()}


LEADS = re.compile(r"leads group \d+ \((.*?)\) in term (\d+)")
REPLAY = re.compile(r"delivering (\d+) scheduled records")
# the broker's step trace (``kcompat.loop.trace.ms``, set by BROKER_FLAGS): every step of
# at least LONG_STEP_MS with its CPU time, read from the loop thread's CPU clock
TRACED = re.compile(r"kcompat\.loop\.trace: step of (.*?): ([\d.]+) ms from [\d.]+, "
                    r"([\d.]+) ms on a CPU(?:, ([\d.]+) ms waiting for a core)?")
LONG_STEP_MS = 50  # issue 31: no task holds the loop longer


def _traced(line: str, node: int, out: dict[str, Any]) -> None:
    """A traced step of LONG_STEP_MS or more: counted, the longest kept with its
    CPU time, and the most CPU time of any (a step can be long on the wall clock
    and short on a CPU: it waited for a core or for the GIL)."""
    m = TRACED.search(line)
    if m is None or float(m.group(2)) < LONG_STEP_MS:
        return
    took, cpu = float(m.group(2)), float(m.group(3))
    queued = float(m.group(4)) if m.group(4) else 0.0
    out["long_steps"] += 1
    out["long_on_cpu"] += cpu >= LONG_STEP_MS
    out["long_cpu_max"] = max(out["long_cpu_max"], cpu)
    out["long_queued"] += queued
    out["long_gil"] += max(took - cpu - queued, 0.0)
    if took > out["long_max"][0]:
        out["long_max"] = (took, f"broker {node}, {m.group(1)}", cpu)


def scan_logs(side: Side, start: dict[int, int], end: dict[int, int] | None = None
              ) -> dict[str, Any]:
    """Self-fencing, elections, schedule replays, errors and warnings in each broker's
    log between two offsets (a controlled shutdown's fence_broker is not counted)."""
    out: dict[str, Any] = {"fence": 0, "leads": 0, "re_elections": 0, "errors": 0,
                           "warnings": 0, "failed": 0, "replayed": 0, "replays": 0, "excerpts": [],
                           "long_steps": 0, "long_on_cpu": 0, "long_max": (0.0, "", 0.0),
                           "long_cpu_max": 0.0, "long_queued": 0.0, "long_gil": 0.0}
    for node, b in side.brokers.items():
        if not b.log_path.exists():
            continue
        with open(b.log_path, "rb") as f:
            f.seek(start.get(node, 0))
            size = (end or {}).get(node)
            text = f.read(size - start.get(node, 0) if size is not None else -1)
        for line in text.decode("utf-8", "replace").splitlines():
            keep = False
            _traced(line, node, out)
            if "fence_broker" in line and "unfence_broker" not in line \
                    and "controlled shutdown" not in line:
                out["fence"] += 1
                keep = True
            m = LEADS.search(line)
            if m:
                out["leads"] += 1
                if int(m.group(2)) >= 2:
                    out["re_elections"] += 1
                    keep = True
            m = REPLAY.search(line)
            if m:
                out["replays"] += 1
                out["replayed"] += int(m.group(1))
                keep = out["replays"] <= 2
            if " ERROR " in line or "Traceback" in line or "CRITICAL" in line:
                out["errors"] += 1
                keep = True
            elif " WARNING " in line:
                out["warnings"] += 1
                keep = True
            elif " failed" in line or "not committed" in line:
                out["failed"] += 1
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


def scrape(port: int) -> dict[str, float]:
    """``name{labels}`` -> value from a broker's /metrics ({} if it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except Exception:  # noqa: BLE001 - a busy or down broker
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def share_left(side: Side, group: str, topic: str) -> int | None:
    """The records of ``topic`` the share group ``group`` has not settled by the
    brokers' own account: each partition's high watermark less its share-partition
    start offset (every record below that is acknowledged or archived), from the
    brokers' /metrics; None until every partition's share-partition is known."""
    hw: dict[str, float] = {}
    start: dict[str, float] = {}
    for port in side.admin_ports.values():
        for key, value in scrape(port).items():
            name, _, labels = key.partition("{")
            tags = dict(_LABEL.findall(labels))
            if tags.get("topic") != topic:
                continue
            if name == "kcompat_partition_high_watermark":
                hw[tags["partition"]] = max(hw.get(tags["partition"], 0.0), value)
            elif name == "kcompat_share_start_offset" and tags.get("group") == group:
                start[tags["partition"]] = max(start.get(tags["partition"], 0.0), value)
    if not hw or set(start) != set(hw):
        return None
    return int(sum(max(hw[p] - start[p], 0.0) for p in hw))


def metric_sum(m: dict[str, float], name: str) -> float | None:
    vals = [v for k, v in m.items() if k == name or k.startswith(name + "{")]
    return sum(vals) if vals else None


def dir_bytes(broker: Broker, prefix: str) -> int:
    """Bytes allocated to the broker's ``<prefix>*`` directories under its data dir."""
    total = 0
    for d in broker.data_dir.glob(prefix + "*"):
        for dirpath, _dirs, files in os.walk(d):
            for f in files:
                with contextlib.suppress(FileNotFoundError):
                    total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
    return total


TERM_AFTER_S = 5.0  # the delayed scenario's SIGTERM: this long after the kill's restart
TERM_MIN_BACKLOG_S = 15.0  # ... if records still come due this long after it
TERM_STOP_S = 120.0  # a broker not exited this long after SIGTERM is killed (and reported)
DOWN_PHASES = ("kill -9", "SIGTERM")  # a broker down and starting: not its load's latency


class Run:
    """One scenario on one side: the probe child, readers, phase marks, the kill -9,
    the logs; ``r`` collects what the report prints (``rows``: the scenario's own)."""

    def __init__(self, side: Side, sz: Sizes, work: Path, deadline: float, scenario: str,
                 seed: int) -> None:
        self.side, self.sz, self.work, self.deadline = side, sz, work, deadline
        #: producers stop handing out records here: the kill, the restart and the drain
        #: keep at least 30 % of the job's time (45 s at least)
        self.produce_until = deadline - max(45.0, 0.3 * (deadline - time.time()))
        self.rng = random.Random(seed)
        self.marks = Marks()
        self.r: dict[str, Any] = {"side": side.name, "scenario": scenario,
                                  "marks": self.marks.t, "rows": [], "errors": []}
        self.children: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self.log0: dict[int, int] = {}
        self.log_kill: dict[int, int] | None = None
        self.cpu0: dict[int, float] = {}

    def row(self, figure: str, value: str) -> None:
        self.r["rows"].append((figure, value))

    def left(self) -> float:
        return max(0.0, self.deadline - time.time())

    def topic(self, name: str, partitions: int = PARTITIONS,
              configs: dict[str, str] | None = None) -> None:
        create_topic(self.side.bootstrap, name, partitions, self.side.replication, configs)

    # -- children ---------------------------------------------------------------------

    def spawn(self, kind: str, tag: str, spec: dict[str, Any]) -> None:
        stop = self.work / f"{tag}.stop"
        spec = {**spec, "stop_file": str(stop), "deadline": self.deadline + 30}
        self.children[tag] = (spawn_child(kind, tag, spec, self.work), stop)

    def stop(self, tag: str) -> None:
        proc, stop = self.children.pop(tag)
        stop_child(proc, stop)

    def reader(self, tag: str, topic: str, n: int, cancelled: Iterable[int] = (),
               header: str | None = None) -> None:
        """A consumer child noting when each record index first arrives in ``topic``."""
        self.spawn("consumer", tag, {
            "bootstrap": self.side.bootstrap, "topic": topic, "partitions": PARTITIONS,
            "records": n, "cancelled": sorted(cancelled), "header": header,
            "group": f"soak-{self.side.name}-{tag}", "out": str(self.work / f"{tag}.json"),
            "progress": str(self.work / f"{tag}.progress.json")})

    def progress(self, tag: str) -> dict[str, Any]:
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            return json.loads((self.work / f"{tag}.progress.json").read_text())
        return {}

    def wait_progress(self, tag: str, done: Callable[[dict[str, Any]], bool],
                      until: float) -> dict[str, Any]:
        got: dict[str, Any] = {}
        for _ in range(1_000_000):
            if time.time() > min(until, self.deadline):
                break
            got = self.progress(tag)
            if done(got):
                break
            time.sleep(0.5)
        return got

    def collect(self, tag: str) -> tuple[dict[str, Any], array.array, array.array]:
        """Stop a reader; its counts, arrival time and partition per index."""
        self.stop(tag)
        stats = json.loads((self.work / f"{tag}.json").read_text())
        recv, part = array.array("d"), array.array("b")
        recv.frombytes((self.work / f"{tag}.json.recv").read_bytes())
        part.frombytes((self.work / f"{tag}.json.part").read_bytes())
        if stats.get("errors"):
            samples = stats.get("error_sample", {})
            self.r["errors"].append(f"{tag}: " + "; ".join(
                f"{k} x{v} (e.g. {samples.get(k, '')})" for k, v in stats["errors"].items()))
        return stats, recv, part

    # -- phases -------------------------------------------------------------------------

    def begin(self) -> None:
        """The probe topic and the probe; an idle baseline."""
        self.topic("soak-probe", 1)
        self.topic("soak-plain")
        self.log0 = log_offsets(self.side)
        self.spawn("probe", "probe", {
            "bootstrap": self.side.bootstrap, "out": str(self.work / "probe.jsonl"),
            "admin_ports": {str(k): v for k, v in self.side.admin_ports.items()},
            "prefix": f"soak-{self.side.name}-{self.r['scenario']}",
            "replication": self.side.replication, "topic": "soak-probe",
            "max_rounds": int(self.left()) + 60})
        self.marks("idle")
        time.sleep(min(self.sz.idle_s, self.left()))

    def plain(self, n: int) -> Produced:
        self.marks("plain")
        res = produce(self.side.bootstrap, "soak-plain", n, self.produce_until)
        self.r["plain"] = res
        return res

    def cpu_start(self) -> None:
        self.cpu0 = {k: proc_cpu_s(b.pid) for k, b in self.side.brokers.items()
                     if b.pid and b.running}

    def _victim(self, topic: str, spare: int | None = None) -> dict[str, Any]:
        """The broker that used the most CPU since ``cpu_start`` (``spare`` left
        out), each broker's CPU, the partitions of ``topic`` it leads (all on one
        node) and its metrics now."""
        side = self.side
        cpu = {k: proc_cpu_s(b.pid) - self.cpu0.get(k, 0.0) for k, b in side.brokers.items()
               if b.pid and b.running and k != spare}
        victim = max(cpu, key=lambda k: cpu[k])
        try:
            led = leaders(side.bootstrap, topic)
        except Exception:  # noqa: BLE001
            led = {}
        return {"victim": victim, "cpu": cpu,
                "partitions": sorted(p for p, ldr in led.items() if ldr == victim)
                if len(side.brokers) > 1 else list(range(PARTITIONS)),
                "metrics": scrape(side.admin_ports[victim])}

    def kill_busiest(self, topic: str, state: tuple[str, ...] = (SCHED_PREFIX,)) -> None:
        """kill -9 of the broker that used the most CPU since ``cpu_start`` and a restart
        on its data dir; restart-to-ready, ``state`` directories' bytes, metrics at the kill."""
        side = self.side
        k = self._victim(topic)
        victim = k["victim"]
        vb = side.brokers[victim]
        k["state"] = state
        k["rss_mib"] = {n: proc_status_kib(b.pid, "VmRSS") / 1024
                        for n, b in side.brokers.items() if b.pid and b.running}
        k["bytes_before"] = {p: dir_bytes(vb, p) for p in state}
        self.log_kill = log_offsets(side)
        k["t_kill"] = self.marks("kill -9")
        vb.kill()
        self.r["kill"] = k
        time.sleep(0.2)
        k["restart"] = wait_restart(side, victim, self.deadline)  # phase "kill -9" until ready
        print(f"  [{time.strftime('%H:%M:%S')}] broker {victim} ready again", flush=True)
        k["bytes_after"] = {p: dir_bytes(vb, p) for p in state}
        self.cpu_start()  # what the SIGTERM's choice counts from

    def term_busiest(self, topic: str) -> None:
        """SIGTERM of the broker that used the most CPU since ``cpu_start`` (the kill's
        restart) — on several brokers, of those not just killed: that one leads nothing
        yet, its partitions' leaders having moved — and, once it has exited, a start on
        its data dir: how long it took to stop (``TERM_STOP_S`` at most, then SIGKILL,
        reported), restart-to-ready."""
        side = self.side
        killed = self.r["kill"]["victim"] if "kill" in self.r and len(side.brokers) > 1 else None
        t = self._victim(topic, spare=killed)
        victim = t["victim"]
        vb = side.brokers[victim]
        t["t_term"] = self.marks("SIGTERM")
        try:
            t["exit"] = vb.stop(timeout=TERM_STOP_S)
        except Exception as exc:  # noqa: BLE001 - not exited in time: killed, and said so
            t["exit"] = f"not exited in {TERM_STOP_S:.0f} s ({exc}); killed"
            vb.kill()
        t["stopped_s"] = time.time() - t["t_term"]
        t["restart"] = wait_restart(side, victim, self.deadline)
        print(f"  [{time.strftime('%H:%M:%S')}] broker {victim} stopped (SIGTERM) in "
              f"{t['stopped_s']:.1f} s and ready again", flush=True)
        self.r["term"] = t

    def finish(self) -> None:
        """Stop every child, read the probe's lines and the logs."""
        for tag in list(self.children):
            self.stop(tag)
        self.r["log_before_kill"] = scan_logs(self.side, self.log0, self.log_kill)
        self.r["log_after_kill"] = scan_logs(self.side, self.log_kill) \
            if self.log_kill is not None else {}
        self.r["probe"] = read_jsonl(self.work / "probe.jsonl")
        if "kill" in self.r:
            vb = self.side.brokers[self.r["kill"]["victim"]]
            self.r["kill"]["bytes_end"] = {p: dir_bytes(vb, p) for p in self.r["kill"]["state"]}


def wait_restart(side: Side, victim: int, deadline: float) -> dict[str, float]:
    """Start the killed broker again; the times (epoch) of its ready line, its first
    Metadata answer naming itself and its first acknowledged acks=all produce."""
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


def quantiles_row(xs: list[float]) -> str:
    return (f"{fmt_s(pct(xs, .5))} / {fmt_s(pct(xs, .99))} / "
            f"{fmt_s(max(xs) if xs else float('nan'))}")


def resumed(run: Run, recv: array.array, part: array.array) -> None:
    """When arrivals on the killed (and the SIGTERM's) broker's partitions resumed: after
    it went down (other leaders; several brokers only) and after its restart, from a
    reader's arrival times."""
    for key, down_at in (("kill", "t_kill"), ("term", "t_term")):
        d = run.r.get(key)
        if not d:
            continue
        parts, spawn = set(d["partitions"]), d["restart"]["spawn"]
        after = [x for x, p in zip(recv, part, strict=True) if x > d[down_at] and p in parts]
        d["resume_after_" + key] = min(after) - d[down_at] \
            if after and len(run.side.brokers) > 1 else None
        later = [x for x in after if x > spawn]
        d["resume_after_restart"] = min(later) - spawn if later else None


# -- scenarios -----------------------------------------------------------------------------


def delayed_scenario(run: Run) -> None:
    """kc-delay-ms records with a backlog, ~1 % cancelled; lateness and exactly-once."""
    sz, bootstrap, rng = run.sz, run.side.bootstrap, run.rng
    n = sz.records
    delays = [rng.randint(sz.delay_lo_ms, sz.delay_hi_ms) for _ in range(n)]
    ids: dict[int, bytes] = {}
    cancelled: set[int] = set()
    for i in range(n):
        if rng.random() < 0.05:
            ids[i] = b"s%d" % i
            if rng.random() < 0.2:
                cancelled.add(i)
    run.topic("soak-delayed")
    run.begin()
    plain = run.plain(n)
    run.reader("delivered", "soak-delayed", n, cancelled, header="kc-scheduled-offset")
    send, ack = array.array("d", bytes(8 * n)), array.array("d", bytes(8 * n))
    run.cpu_start()
    run.marks("delayed produce")
    dly = produce(bootstrap, "soak-delayed", n, run.produce_until,
                  headers_of=lambda i: [("kc-delay-ms", b"%d" % delays[i])]
                  + ([("kc-schedule-id", ids[i])] if i in ids else []),
                  send=send, ack=ack, delays=delays,
                  cancel_after=lambda i: ids[i] if i in cancelled else None)
    run.marks("delivery")
    time.sleep(min(sz.kill_after_s, run.left()))
    t_kill = time.time()
    pending_at_kill = sum(1 for i in range(dly.n) if i not in cancelled and ack[i]
                          and ack[i] + delays[i] / 1000 > t_kill)
    run.kill_busiest("soak-delayed")
    expected = sum(1 for i in range(dly.n) if i not in cancelled)
    last_due = max((ack[i] or send[i]) + delays[i] / 1000 for i in range(dly.n)) \
        if dly.n else time.time()
    run.marks("drain")
    term_at = run.r["kill"]["restart"].get("produce", time.time()) + TERM_AFTER_S
    if last_due - term_at >= TERM_MIN_BACKLOG_S and run.deadline - term_at > 60.0:
        time.sleep(max(0.0, term_at - time.time()))
        run.term_busiest("soak-delayed")
        run.marks("drain after SIGTERM")
    else:
        run.r["term_skipped"] = "no backlog left" if last_due - term_at < TERM_MIN_BACKLOG_S \
            else "no time left"
    run.wait_progress("delivered", lambda g: g.get("received_ok", 0) >= expected
                      and time.time() > last_due + 2.0, last_due + sz.late_allowance_s)
    run.marks("end")
    c, recv, part = run.collect("delivered")
    resumed(run, recv, part)
    late_send, late_ack, late_calm = [], [], []
    early = missing = 0
    k = run.r["kill"]
    calm_from = k["t_kill"] - 1.0
    calm_to = k["restart"].get("produce", k["t_kill"]) + 5.0
    term = run.r.get("term")
    term_from = term["t_term"] - 1.0 if term else 0.0
    term_to = term["restart"].get("produce", term["t_term"]) + 5.0 if term else 0.0
    for i in range(dly.n):
        if i in cancelled:
            continue
        if not recv[i]:
            missing += 1
            continue
        due_send = send[i] + delays[i] / 1000
        if recv[i] < due_send - 0.001:
            early += 1
        late_send.append(recv[i] - due_send)
        if ack[i]:
            due_ack = ack[i] + delays[i] / 1000
            late_ack.append(recv[i] - due_ack)
            if not (calm_from <= due_ack <= calm_to or term_from <= due_ack <= term_to):
                late_calm.append(recv[i] - due_ack)
    ratio = dly.rate / plain.rate if plain.rate else float("nan")
    pend = metric_sum(k["metrics"], PENDING_METRIC)
    run.r["delayed"] = dly
    run.row(f"delayed produce (kc-delay-ms {sz.delay_lo_ms}..{sz.delay_hi_ms}, "
            f"{len(ids):,} with kc-schedule-id, {len(cancelled):,} cancelled)",
            f"{dly.rate:,.0f} rec/s ({dly.acked:,} of {dly.n:,} acked, {dly.failed} failed)")
    run.row("delayed / plain produce rate", f"{ratio:.2f}")
    run.row("lateness (arrival - ack - delay; a lower bound) p50 / p99 / max",
            quantiles_row(late_ack))
    run.row(f"the same, records not due from the kill (or the SIGTERM) to 5 s after ready "
            f"({len(late_calm):,})",
            quantiles_row(late_calm))
    run.row("lateness (arrival - send - delay; an upper bound: includes the time queued "
            "in the producer) p50 / p99 / max", quantiles_row(late_send))
    run.row("delivered / missing / duplicates / early (before send + delay)",
            f"{c['received_ok']:,} of {expected:,} / {missing:,} / {c['dupes']} / {early}")
    if c["dupes"]:
        run.row("duplicates: the same stored record delivered again (kc-scheduled-offset equal) "
                "/ a record stored twice (another kc-scheduled-offset: the producer, not "
                "idempotent, re-sent a stored batch — at least once, as in Kafka)",
                f"{c.get('dupes_same', '?')} / {c.get('dupes_stored_twice', '?')} (delayed "
                f"producer: {dly.request_timeouts} requests timed out and re-sent)")
    if c.get("dupe_samples"):
        ds = c["dupe_samples"]
        run.row(f"duplicates (first {len(ds)}): partitions / first seen / seen again, s from "
                "the kill", f"{sorted({d[1] for d in ds})} / "
                f"{min(d[3] for d in ds) - k['t_kill']:+.0f}..{max(d[3] for d in ds) - k['t_kill']:+.0f}"
                f" / {min(d[4] for d in ds) - k['t_kill']:+.0f}..{max(d[4] for d in ds) - k['t_kill']:+.0f}")
    wrong = [i for i in cancelled if i < dly.n and recv[i] and i in dly.cancel_acks
             and ack[i] and dly.cancel_acks[i] < ack[i] + delays[i] / 1000]
    run.row(f"cancelled ({len(cancelled)}; {len(dly.cancel_acks)} cancels acked) but delivered "
            "/ of those, the cancel acked before the record was due",
            f"{c['cancelled_delivered']} / {len(wrong)}"
            + (f", {sum(1 for i in wrong if recv[i] > k['t_kill'])} of them after the kill"
               if wrong else "")
            + (f" (e.g. index {wrong[0]}: cancel acked {dly.cancel_acks[wrong[0]] - ack[wrong[0]]:.1f}"
               f" s after the record, due {delays[wrong[0]] / 1000:.1f} s after it)" if wrong else ""))
    run.row("delivered without kc-scheduled-offset / unknown",
            f"{c['missing_header']} / {c['unknown']}")
    run.row("pending at the kill (acked, due after it; broker's "
            f"{PENDING_METRIC})", f"{pending_at_kill:,}; "
            + (f"{pend:,.0f}" if pend is not None else "not scraped"))


def dedup_scenario(run: Run) -> None:
    """kc-dedup-id on every record, 10 % of them repeating an earlier id; after the
    kill -9 and restart, 10 % of the ids sent again: every id stored exactly once."""
    sz, bootstrap, rng = run.sz, run.side.bootstrap, run.rng
    n = sz.records
    order: list[int] = []
    unique = 0
    for _ in range(n):
        if unique and rng.random() < 0.10:
            order.append(rng.randrange(unique))
        else:
            order.append(unique)
            unique += 1
    run.topic("soak-dedup", configs={"kc.dedup.window.ms": "3600000", "kc.dedup.by": "header",
                                     "kc.dedup.max.entries": str(max(n, 1000))})
    run.begin()
    plain = run.plain(n)
    run.reader("stored", "soak-dedup", unique)
    run.cpu_start()
    run.marks("dedup produce")

    def hdr(i: int) -> list[tuple[str, bytes]]:
        return [("kc-dedup-id", b"d%d" % i)]

    res = produce(bootstrap, "soak-dedup", n, run.produce_until, order=order, headers_of=hdr)
    run.marks("settle")
    time.sleep(min(sz.kill_after_s, run.left()))
    run.kill_busiest("soak-dedup", state=("soak-dedup-",))
    again = [rng.randrange(unique) for _ in range(max(1, n // 10))] if unique else []
    run.marks("duplicates after restart")
    res2 = produce(bootstrap, "soak-dedup", len(again), run.deadline, order=again,
                   headers_of=hdr)
    run.marks("drain")
    until = time.time() + sz.late_allowance_s
    run.wait_progress("stored", lambda g: g.get("received_ok", 0) >= unique, until)
    time.sleep(min(3.0, run.left()))  # room for a stored duplicate to show up
    run.marks("end")
    c, recv, part = run.collect("stored")
    resumed(run, recv, part)
    dups = n - unique
    m = run.r["kill"]["metrics"]
    dropped = metric_sum(m, "kcompat_dedup_duplicates_total")
    evicted = metric_sum(m, "kcompat_dedup_evictions_total")
    run.row(f"dedup produce ({n:,} records: {unique:,} ids, {dups:,} repeats)",
            f"{res.rate:,.0f} rec/s ({res.acked:,} acked, {res.failed} failed)")
    run.row("dedup / plain produce rate",
            f"{res.rate / plain.rate:.2f}" if plain.rate else "-")
    run.row(f"ids sent again after the restart ({len(again):,})",
            f"{res2.acked:,} acked, {res2.failed} failed")
    run.row("ids stored / missing / stored twice or more", f"{c['received']:,} of {unique:,} / "
            f"{unique - c['received']:,} / {c['dupes']:,}")
    run.row("broker counters at the kill: duplicates dropped / ids evicted",
            f"{dropped:,.0f} / {evicted:,.0f}" if dropped is not None and evicted is not None
            else "not scraped")


def retrier_child(spec: dict[str, Any]) -> None:
    """A consumer group on ``topic`` and ``topic.retry`` that fails every record: each
    is handed to the retry topic (``kcompat.ext.nack``), flushed, then committed."""
    from confluent_kafka import Consumer, Producer

    from kcompat.ext.nack import nack

    topic = spec["topic"]
    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "topic.metadata.refresh.interval.ms": 1000, **CLIENT_QUIET})
    p = Producer({"bootstrap.servers": spec["bootstrap"], "linger.ms": 5, **CLIENT_QUIET})
    stats: dict[str, Any] = {"nacked": 0, "by_attempt": {}, "errors": {}}
    c.subscribe([topic, topic + ".retry"])
    progress = Path(spec["progress"])
    last = 0.0
    for _ in range(100_000_000):
        if _stopped(spec):
            break
        msgs = c.consume(num_messages=2000, timeout=0.1)
        for m in msgs:
            if m.error():
                e = str(m.error().name())
                stats["errors"][e] = stats["errors"].get(e, 0) + 1
                continue
            attempt = next((v.decode() for k, v in (m.headers() or []) if k == "kc-attempt"),
                           "0")
            stats["by_attempt"][attempt] = stats["by_attempt"].get(attempt, 0) + 1
            for _i in range(10_000):
                try:
                    nack(p, m, "soak")
                    break
                except BufferError:
                    p.poll(0.05)
            stats["nacked"] += 1
        if msgs:
            p.flush(30)
            with contextlib.suppress(Exception):
                c.commit(asynchronous=False)
        if time.time() - last >= 0.5:
            last = time.time()
            progress.with_suffix(".tmp").write_text(json.dumps(stats))
            progress.with_suffix(".tmp").replace(progress)
    p.flush(10)
    with contextlib.suppress(Exception):
        c.close()
    progress.write_text(json.dumps(stats))


def retry_scenario(run: Run) -> None:
    """Every record failed by a consumer group (kcompat.ext.nack) until the broker moves
    it to the dead-letter topic after kc.retry.max.attempts: each there exactly once."""
    sz, bootstrap = run.sz, run.side.bootstrap
    n = sz.records
    run.topic("soak-retry")
    run.topic("soak-retry.dlq")
    run.begin()
    plain = run.plain(n)
    run.reader("dead", "soak-retry.dlq", n)
    run.spawn("retrier", "retrier", {"bootstrap": bootstrap, "topic": "soak-retry",
                                     "group": f"soak-{run.side.name}-retrier",
                                     "progress": str(run.work / "retrier.progress.json")})
    send = array.array("d", bytes(8 * n))
    run.cpu_start()
    run.marks("retry produce")
    res = produce(bootstrap, "soak-retry", n, run.produce_until, send=send)
    run.marks("retrying")
    time.sleep(min(max(sz.kill_after_s, 4.0), run.left()))  # past the first backoff
    run.kill_busiest("soak-retry.dlq", state=("soak-retry.retry-", SCHED_PREFIX))
    run.marks("drain")
    # three backoffs (2 + 4 + 8 s by default) after the last record, and the allowance
    until = time.time() + 14.0 + 2 * sz.late_allowance_s + n / 2000
    run.wait_progress("dead", lambda g: g.get("received_ok", 0) >= res.n, until)
    cut = time.time() >= run.deadline  # the scenario's share of the budget ran out first
    time.sleep(min(2.0, run.left()))
    run.marks("end")
    c, recv, part = run.collect("dead")
    resumed(run, recv, part)
    nacks = run.progress("retrier")
    run.stop("retrier")
    nacks = json.loads((run.work / "retrier.progress.json").read_text()) or nacks
    took = [recv[i] - send[i] for i in range(res.n) if recv[i] and send[i]]
    run.row(f"produce to the topic ({n:,} records)",
            f"{res.rate:,.0f} rec/s ({res.acked:,} acked; plain {plain.rate:,.0f} rec/s)")
    run.row("consumer nacks by the kc-attempt it saw (0: first delivery)",
            ", ".join(f"{k}: {v:,}" for k, v in sorted(nacks.get("by_attempt", {}).items())))
    run.row("time from send to the dead-letter topic p50 / p99 / max (backoffs alone: 14 s)",
            quantiles_row(took))
    sent = [send[i] for i in range(res.n) if send[i]]
    last = max((recv[i] for i in range(res.n) if recv[i]), default=0.0)
    if sent and last > min(sent):
        run.row("the retrier's pace: nacks / (last dead letter - first send); it flushes "
                "its nacks and commits after each poll",
                f"{nacks.get('nacked', 0) / (last - min(sent)):,.0f} nacks/s")
    run.row("dead-lettered / not there at the end / duplicates"
            + (" (the scenario's time ran out while they were still moving: see its pace)"
               if cut and c["received"] < res.n else ""),
            f"{c['received']:,} of {res.n:,} / {res.n - c['received']:,} / {c['dupes']:,}")
    if nacks.get("errors"):
        run.r["errors"].append("retrier: " + "; ".join(
            f"{k} x{v}" for k, v in nacks["errors"].items()))


def share_scenario(run: Run) -> None:
    """A share group of 4 members (compat_tests._share_member, confluent-kafka's
    ShareConsumer) acknowledging every record, 5 % released once or twice first."""
    from compat_tests._share import (
        Ledger,
        ShareMember,
        require_share_apis,
        set_group_configs,
        stop_all,
    )

    sz, bootstrap = run.sz, run.side.bootstrap
    n = sz.records
    run.topic("soak-share")
    run.begin()
    require_share_apis(bootstrap)
    group = f"soak-{run.side.name}-share"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    plain = run.plain(n)
    run.cpu_start()
    run.marks("share produce")
    res = produce(bootstrap, "soak-share", n, run.produce_until)
    members = [ShareMember(bootstrap, "soak-share", group,
                           run.work / f"member-{j}.out", f"m{j}", "--policy", "random",
                           "--release-rate", "0.05", "--seed", str(j)) for j in range(4)]
    wanted = {f"{i}:" for i in range(res.n)}  # a value starts with its index

    def settled() -> int:
        accepted = {d.value.split(":", 1)[0] + ":" for rows in Ledger(members)
                    .settled_final().values() for d in rows[:1]}
        return len(accepted & wanted)

    try:
        run.marks("sharing")
        time.sleep(min(sz.kill_after_s + 2.0, run.left()))
        run.kill_busiest("soak-share", state=("__share_group_state-",))
        run.marks("drain")
        until = time.time() + sz.late_allowance_s + n / 2000
        done, left = 0, None
        for _ in range(100_000):
            if time.time() > min(until, run.deadline):
                break
            done = settled()
            # the broker may have settled what the members never heard it settle: an
            # ACCEPT whose answer the kill lost (and that is not delivered again)
            left = share_left(run.side, group, "soak-share")
            if done >= res.n or left == 0:
                break
            time.sleep(max(2.0, n / 50_000))
        run.marks("end")
    finally:
        stop_all(members)
    left = share_left(run.side, group, "soak-share")
    ledger = Ledger(members)
    final = ledger.settled_final()
    k = run.r.get("kill")
    if k:
        after = [d.ts_ms / 1000 for d in ledger.rows if d.ts_ms / 1000 > k["restart"]["spawn"]]
        k["resume_after_restart"] = min(after) - k["restart"]["spawn"] if after else None
    twice = sum(1 for rows in final.values() if len(rows) > 1)
    released = sum(1 for d in ledger.rows if d.decision == "R")
    first = {}
    for d in ledger.rows:
        first.setdefault(d.value.split(":", 1)[0], d.ts_ms / 1000)
    run.row(f"produce ({n:,} records)", f"{res.rate:,.0f} rec/s (plain {plain.rate:,.0f})")
    done = settled()
    lost = {d.value.split(":", 1)[0] for d in ledger.rows if d.decision == "A"
            and d.settled_ms is None} - {v.split(":", 1)[0] for v in final}
    run.row("records settled by an answered ACCEPT / left unsettled by the brokers' account "
            "(high watermark - share start offset) / accepted twice or more",
            f"{done:,} of {res.n:,} / {'-' if left is None else f'{left:,}'} / {twice:,}")
    run.row("of the others: their last ACCEPT's answer lost (the kill), not delivered again",
            f"{len(lost):,} ({res.n - done - len(lost):,} never accepted)")
    run.row("deliveries / releases / per member", f"{len(ledger.rows):,} / {released:,} / "
            + ", ".join(f"{k}: {v:,}" for k, v in sorted(ledger.per_member().items())))
    span = max(first.values()) - min(first.values()) if first else 0.0
    run.row("share consume rate (first deliveries / their span)",
            f"{len(first) / span:,.0f} rec/s" if span > 0 else "-")


def view_scenario(run: Run) -> None:
    """A filtered view (``kc.view.filter``) matching 10 % of a source of 10 x --records
    records: the view read from its start by a reader, only and every matching record
    once, with the kill -9 during the read."""
    sz, bootstrap = run.sz, run.side.bootstrap
    n = sz.records * 10
    run.topic("soak-view-src")
    run.begin()
    run.cpu_start()
    run.marks("source produce")
    res = produce(bootstrap, "soak-view-src", n, run.produce_until,
                  headers_of=lambda i: [("n", b"%d" % (i % 10))])
    run.topic("soak-view", configs={"kc.view.of": "soak-view-src", "kc.view.filter": "n < 1"})
    matching = sum(1 for i in range(res.n) if i % 10 == 0)
    run.marks("view read")
    t0 = time.time()
    run.reader("view", "soak-view", n)
    time.sleep(min(sz.kill_after_s, run.left()))
    run.kill_busiest("soak-view", state=("soak-view-src-",))
    run.marks("drain")
    run.wait_progress("view", lambda g: g.get("received", 0) >= matching,
                      time.time() + sz.late_allowance_s + n / 20_000)
    time.sleep(min(1.0, run.left()))
    run.marks("end")
    c, recv, part = run.collect("view")
    resumed(run, recv, part)
    got = [i for i in range(res.n) if recv[i]]
    wrong = sum(1 for i in got if i % 10 != 0)
    last = max((recv[i] for i in got), default=t0)
    run.row(f"source produce ({n:,} records, header n = index % 10)",
            f"{res.rate:,.0f} rec/s ({res.acked:,} acked, {res.failed} failed)")
    run.row("view `n < 1`: matching records read / missing / not matching / duplicates",
            f"{len(got) - wrong:,} of {matching:,} / {matching - (len(got) - wrong):,} / "
            f"{wrong:,} / {c['dupes']:,}")
    t_kill = run.r["kill"]["t_kill"]
    run.row(f"view read from its start (the kill at +{t_kill - t0:.1f} s)",
            f"{last - t0:.1f} s, {(len(got) / (last - t0)) if last > t0 else 0:,.0f} "
            f"matching rec/s ({n / (last - t0) if last > t0 else 0:,.0f} source rec/s)")


# -- the report --------------------------------------------------------------------------


def phases(marks: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(((k, v) for k, v in marks.items() if k != "end"), key=lambda kv: kv[1])


def phase_of(t: float, marks: dict[str, float]) -> str:
    name = "idle"
    for k, v in phases(marks):
        if t >= v:
            name = k
    return name


def probe_phase(probe: dict[str, Any], marks: dict[str, float]) -> str:
    """The phase of a probe: the one it was sent in, but "kill -9" (or "SIGTERM")
    for a probe in flight when the broker was killed (stopped): sent just before,
    answered after the restart, its wait is the kill's, not the phase's load."""
    for down in DOWN_PHASES:
        at = marks.get(down)
        if at is not None and probe["t"] < at <= probe["t"] + probe.get("s", 0.0):
            return down
    return phase_of(probe["t"], marks)


def task_of(sample: str) -> str:
    m = re.search(r'task="([^"]*)"', sample)
    return m.group(1) if m else sample


def pressure_summary(maxima: dict[str, float]) -> str:
    """Backpressure seen (the largest lag per source, the throttle given per
    source) and the mean delivery lateness of delayed records, retries and dead
    letters, from the maxima of the scraped metrics; empty if none."""
    lags: dict[str, float] = {}
    throttled: dict[str, float] = {}
    for k, v in maxima.items():
        m = re.search(r'source="([^"]*)"', k)
        if m and k.startswith(BACKPRESSURE_PREFIX + "lag_seconds"):
            lags[m.group(1)] = max(lags.get(m.group(1), 0.0), v)
        elif m and k.startswith(BACKPRESSURE_PREFIX + "throttle_seconds_total"):
            throttled[m.group(1)] = max(throttled.get(m.group(1), 0.0), v)
    out = ""
    if lags or throttled:
        out += "; backpressure lag max / throttle given: " + ", ".join(
            f"{name} {lags.get(name, 0.0):.2f} s / {throttled.get(name, 0.0):.1f} s"
            for name in sorted({*lags, *throttled}))
    count = maxima.get(LATENESS_METRIC + "_count")
    if count:
        out += (f"; delivery lateness mean {maxima.get(LATENESS_METRIC + '_sum', 0.0) / count:.3f}"
                f" s over {count:,.0f} records")
    return out


def fsync_summary(maxima: dict[str, float]) -> str:
    """The fsync passes (``kcompat_fsync_pass_seconds``: count and mean, from
    the maxima scraped) and the longest one; empty if not exported."""
    count = maxima.get(FSYNC_METRIC + "_seconds_count")
    if not count:
        return ""
    mean_ms = 1000 * maxima.get(FSYNC_METRIC + "_seconds_sum", 0.0) / count
    longest_ms = 1000 * maxima.get(FSYNC_METRIC + "_longest_seconds", 0.0)
    return f"; fsync passes {count:,.0f} x {mean_ms:.1f} ms, longest {longest_ms:.0f} ms"


def gap_summary(maxima: dict[str, float]) -> str:
    """How long the broker's metadata follower went without word from its
    leader (``kcompat_metadata_leader_gap_seconds``): the gaps measured, those
    over ``GAP_NEAR_S`` and the longest (the counts from the longer of the
    broker's runs); empty where it never followed."""
    count = maxima.get(GAP_METRIC + "_seconds_count")
    if not count:
        return ""
    near, far = (count - maxima.get(f'{GAP_METRIC}_seconds_bucket{{le="{le}"}}', count)
                 for le in (GAP_NEAR_S, GAP_FAR_S))
    longest_ms = 1000 * maxima.get(GAP_METRIC + "_longest_seconds", 0.0)
    return (f"; metadata leader's silences {count:,.0f}, over {GAP_NEAR_S} s {near:,.0f}, "
            f"over {GAP_FAR_S} s {far:,.0f}, longest {longest_ms:.0f} ms")


def gc_summary(maxima: dict[str, float]) -> str:
    """The garbage collector's pauses per generation (``kcompat_gc_pause_seconds``:
    count and mean, from the maxima scraped — the longer of the broker's runs
    around the kill); empty if not exported."""
    parts = []
    for gen in ("0", "1", "2"):
        count = maxima.get(f'{GC_METRIC}_count{{generation="{gen}"}}')
        total = maxima.get(f'{GC_METRIC}_sum{{generation="{gen}"}}')
        if count:
            parts.append(f"gen {gen} {count:,.0f} x {1000 * (total or 0.0) / count:.1f} ms")
    return "; gc pauses (count x mean): " + ", ".join(parts) if parts else ""


def lag_summary(scrapes: list[dict[str, Any]]) -> list[str]:
    """Per node: the loop-lag histogram's count over the run (counter resets at the
    restart handled), its p99 bucket bound, the samples above 50 ms; pending max."""
    lines = []
    for node in sorted({s["scrape"] for s in scrapes}):
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
                elif not k.startswith((LAG_METRIC, PENDING_METRIC)) and (
                        "_bucket" not in k or k.startswith(GAP_METRIC)):
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
        longest = sorted(((v, k) for k, v in others.items()
                          if k.startswith("kcompat_event_loop_longest_step_seconds")), reverse=True)
        if longest:
            line += "; longest single step: " + ", ".join(
                f"{fmt_s(v)} ({task_of(k)})" for v, k in longest[:4])
        on_cpu = sorted(((v, k) for k, v in others.items()
                         if k.startswith(ON_CPU_METRIC)), reverse=True)
        if on_cpu:
            line += "; most CPU time in one step (a bound): " + ", ".join(
                f"{fmt_s(v)} ({task_of(k)})" for v, k in on_cpu[:4])
        line += pressure_summary(others)
        line += gc_summary(others) + fsync_summary(others) + gap_summary(others)
        rest = {k: v for k, v in others.items() if "_created" not in k
                and not k.startswith(("kcompat_event_loop_longest_step_seconds", ON_CPU_METRIC,
                                      BACKPRESSURE_PREFIX, LATENESS_METRIC, GC_METRIC,
                                      FSYNC_METRIC, GAP_METRIC))}
        for k, v in sorted(rest.items())[:6]:
            line += f"; {k} max {v:g}"
        lines.append(line)
    return lines


def restart_cells(rs: dict[str, float]) -> str:
    """A restart's ready line / Metadata / produce, in s after its start (``wait_restart``)."""
    return " / ".join(f"{rs[x] - rs['spawn']:.1f}" if x in rs else "never"
                      for x in ("ready_line", "metadata", "produce"))


def seconds_or_dash(*xs: float | None) -> str:
    return " / ".join(f"{x:.1f}" if x is not None else "-" for x in xs)


def kill_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    k = r.get("kill")
    if not k:
        return []
    rs = k["restart"]
    rows = [
        ("killed (kill -9), then started again",
         f"broker {k['victim']} (broker CPU s since the scenario's produce: "
         + ", ".join(f"{n}: {v:.0f}" for n, v in sorted(k["cpu"].items())) + "; RSS "
         + ", ".join(f"{n}: {v:.0f} MiB" for n, v in sorted(k["rss_mib"].items())) + ")"),
        ("restart: ready line / Metadata / acks=all produce acked (s after start)",
         restart_cells(rs)),
        ("arrivals on its partitions resumed (s after the kill / after the restart)",
         seconds_or_dash(k.get("resume_after_kill"), k.get("resume_after_restart"))),
    ]
    for p in k["state"]:
        rows.append((f"`{p}*` on broker {k['victim']}: before the kill / after the restart / "
                     "at the end",
                     " / ".join(f"{k[w].get(p, 0) / 2**20:.1f}" for w in
                                ("bytes_before", "bytes_after", "bytes_end") if w in k)
                     + " MiB"))
    t = r.get("term")
    if t:
        rs = t["restart"]
        rows += [
            ("then, with a backlog, a clean restart (SIGTERM; on several brokers, of one "
             "not just killed): broker / its "
             f"{PENDING_METRIC} / stopped in / exit code",
             f"broker {t['victim']} (broker CPU s since the kill's restart: "
             + ", ".join(f"{n}: {v:.0f}" for n, v in sorted(t["cpu"].items())) + ") / "
             + (f"{pend:,.0f}" if (pend := metric_sum(t["metrics"], PENDING_METRIC)) is not None
                else "not scraped")
             + f" / {t['stopped_s']:.2f} s / {t['exit']}"),
            ("after the SIGTERM: ready line / Metadata / acks=all produce acked (s after start)",
             restart_cells(rs)),
            ("arrivals on its partitions resumed (s after the SIGTERM / after its restart)",
             seconds_or_dash(t.get("resume_after_term"), t.get("resume_after_restart"))),
        ]
    elif r.get("term_skipped"):
        rows.append(("clean restart (SIGTERM)", f"not made: {r['term_skipped']}"))
    return rows


def report(r: dict[str, Any]) -> list[str]:
    m = r["marks"]
    lines = [f"### {r['scenario']} on {r['side']} "
             f"({'1 broker' if r['side'] == 'single' else '3 brokers, RF 3'})", "",
             "| figure | value |", "|---|---|"]
    rows: list[tuple[str, str]] = []
    plain = r.get("plain")
    if plain is not None:
        rows.append((f"plain produce (confluent-kafka, acks=all, {PARTITIONS} partitions, "
                     f"{VALUE_BYTES} B)", f"{plain.rate:,.0f} rec/s ({plain.acked:,} acked, "
                                          f"{plain.failed} failed)"))
    rows += r["rows"] + kill_rows(r)
    for when in ("before", "after"):
        lg = r.get(f"log_{when}_kill")
        if lg:
            rows.append((f"broker logs {when} the kill: fence_broker / leads group (term >= 2) "
                         "/ errors / warnings / other lines with 'failed' / schedule replays (records)",
                         f"{lg['fence']} / {lg['leads']} ({lg['re_elections']}) / {lg['errors']}"
                         f" / {lg['warnings']} / {lg['failed']} / {lg['replays']}"
                         f" ({lg['replayed']:,})"))
            if "long_steps" in lg:  # 0 too: the trace is on, so none went unseen
                took, who, cpu = lg["long_max"]
                rows.append((f"loop steps of {LONG_STEP_MS} ms or more {when} the kill (the "
                             "step trace): count / of them, on a CPU that long / the longest "
                             "(its CPU time) / the most CPU time of one of them / their time "
                             "waiting for a core, and off a CPU otherwise (the GIL)",
                             f"{lg['long_steps']} / {lg['long_on_cpu']} / {took:.0f} ms, {who} "
                             f"({cpu:.0f} ms) / {lg['long_cpu_max']:.0f} ms / "
                             f"{lg['long_queued']:.0f} ms, {lg['long_gil']:.0f} ms"
                             if lg["long_steps"] else "0 / 0 / - / - / -"))
    if "end" in m and "idle" in m:
        rows.append(("wall time", f"{m['end'] - m['idle']:.0f} s"))
    lines += [f"| {a} | {b} |" for a, b in rows]
    probes = [p for p in r.get("probe", []) if "probe" in p]
    cols = [k for k, _v in phases(m)]
    lines += ["", "Control-plane probe, latency p50 / p99 / max and failures, by phase:", "",
              "| probe | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for kind in ("metadata", "create_topics", "group_join", "produce"):
        cells = []
        for ph in cols:
            sel = [p for p in probes if p["probe"] == kind and probe_phase(p, m) == ph]
            ok = [p["s"] for p in sel if p["ok"]]
            cells.append(f"{quantiles_row(ok)}, {len(sel) - len(ok)}/{len(sel)} failed"
                         if sel else "-")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    steady = [p for p in probes if p["probe"] == "plain_latency" and p["ok"]
              and p.get("i", 0) >= PLAIN_WARMUP]
    idle = [p["s"] for p in steady if probe_phase(p, m) == "idle"]
    loaded = [p["s"] for p in steady if probe_phase(p, m) not in ("idle", *DOWN_PHASES)]
    if idle:
        lines += ["", f"Plain producer latency (one acks=all record every "
                      f"{PLAIN_EVERY_S * 1000:.0f} ms, its own connection; p99 against "
                      f"idle's {fmt_s(pct(idle, .99))}), by phase:", "",
                  "| phase | samples | p50 | p99 | max | p99 / idle p99 |", "|---|---|---|---|---|---|"]
        for ph in cols:
            xs = [p["s"] for p in steady if probe_phase(p, m) == ph]
            if xs:
                lines.append(f"| {ph} | {len(xs)} | {fmt_s(pct(xs, .5))} | "
                             f"{fmt_s(pct(xs, .99))} | {fmt_s(max(xs))} | "
                             f"{pct(xs, .99) / pct(idle, .99):.1f}x |")
    cp = [p["s"] for p in probes if p["ok"] and p["probe"] in CONTROL_PROBES
          and probe_phase(p, m) not in ("idle", *DOWN_PHASES)]
    summary = []
    if cp:
        summary.append(f"control-plane probes outside the idle, kill and SIGTERM phases: p99 "
                       f"{fmt_s(pct(cp, .99))}, max {fmt_s(max(cp))}")
    if idle and loaded:
        summary.append(f"plain producer p99 outside the idle, kill and SIGTERM phases / idle: "
                       f"{pct(loaded, .99) / pct(idle, .99):.1f}x "
                       f"({fmt_s(pct(loaded, .99))} / {fmt_s(pct(idle, .99))})")
    # the same saturation without any extension: what the extension itself adds
    plain_ph = [p["s"] for p in steady if probe_phase(p, m) == "plain"]
    ext = [p["s"] for p in steady if probe_phase(p, m) not in ("idle", "plain", *DOWN_PHASES)]
    if plain_ph and ext:
        summary.append(f"plain producer p99 under the extension's load / under the plain "
                       f"produce phase's: {pct(ext, .99) / pct(plain_ph, .99):.1f}x "
                       f"({fmt_s(pct(ext, .99))} / {fmt_s(pct(plain_ph, .99))})")
    if summary:
        lines += ["", "; ".join(summary)]
    fails = [p for p in probes if not p["ok"]]
    if fails:
        lines.append("\nprobe failures (first 4): " + "; ".join(
            f"{p['probe']} at +{p['t'] - m.get('idle', p['t']):.0f} s "
            f"({phase_of(p['t'], m)}): {p.get('err', '')}" for p in fails[:4]))
    scrapes = [p for p in r.get("probe", []) if "scrape" in p]
    lines += ["", "Scraped from /metrics every few seconds:", ""]
    lines += [f"* {x}" for x in lag_summary(scrapes)]
    excerpts = (r.get("log_before_kill") or {}).get("excerpts", []) \
        + (r.get("log_after_kill") or {}).get("excerpts", [])
    if excerpts:
        lines += ["", "Log excerpts (fence_broker, re-elections, schedule replays, errors, "
                      "warnings):", "", "```", *excerpts[:16], "```"]
    errors = list(r.get("errors", []))
    for x in ("plain", "delayed"):
        if r.get(x) is not None and r[x].errors:
            errors.append(f"{x} producer: " + "; ".join(r[x].errors[:3]))
    if errors:
        lines += ["", "client errors: " + " | ".join(errors)]
    return lines


# -- main --------------------------------------------------------------------------------


SCENARIOS: dict[str, Callable[[Run], None]] = {
    "delayed": delayed_scenario,
    "dedup": dedup_scenario,
    "retry": retry_scenario,
    "share": share_scenario,
    "view": view_scenario,
}


def tree_line() -> str:
    """The commit under test and whether kcompat/ had uncommitted changes (others edit the
    broker in this working tree while a soak runs)."""
    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return r.stdout.strip()

    with contextlib.suppress(Exception):
        dirty = git("status", "--porcelain", "--", "kcompat").splitlines()
        return (f"broker tree: {git('rev-parse', '--short', 'HEAD')}"
                + (f" with {len(dirty)} uncommitted file(s) under kcompat/" if dirty else ""))
    return "broker tree: ?"


def machine_line() -> str:
    model = cpu_model()
    import confluent_kafka

    return (f"{os.cpu_count()} cores, {proc_status_kib_meminfo() / 1048576:.1f} GiB RAM, "
            f"CPU {model}, {platform.system()} {platform.release()}, Python "
            f"{platform.python_version()}, confluent-kafka {confluent_kafka.version()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="50k records, 2-15 s delays, ~3 min")
    ap.add_argument("--side", choices=("single", "cluster", "both"), default="both")
    ap.add_argument("--scenario", choices=(*SCENARIOS, "all"),
                    help="default: all (quick: delayed)")
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
    scenario = args.scenario or ("delayed" if args.quick else "all")
    scenarios = list(SCENARIOS) if scenario == "all" else [scenario]
    extra = tuple(x for kv in args.broker_set for x in ("--set", kv))
    load0, tree0 = loadavg(), tree_line()
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
            try:
                side = start_side(side_name, work / "brokers", extra)
            except Exception as e:  # noqa: BLE001 - reported, the next job still runs
                lines += [f"### {scenario} on {side_name}: the brokers did not start: {e!r}", ""]
                continue
            run = Run(side, sz, work, job_deadline, scenario, args.seed)
            try:
                try:
                    SCENARIOS[scenario](run)
                finally:
                    run.finish()
                res: dict[str, Any] | None = run.r
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
                section = report(res)
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
            f"{tree0} at the start, {tree_line()} at the end", "",
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
