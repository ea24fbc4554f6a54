"""Multi-Raft at scale (issue 16 item 2): what thousands of partitions cost 3 kcompat
brokers, side by side with a 3-node Apache Kafka 4.4.0 KRaft cluster in the same run.

Not a test: it asserts nothing, prints figures, appends a section to bench/RESULTS.md
and ends with one ``scale: ...`` line.

    .venv/bin/python bench/scale.py                  # 0 / 1,000 / 5,000 / 10,000 partitions
    .venv/bin/python bench/scale.py --quick          # 0 / 500 / 1,000, kill at 1,000: < 5 min
    .venv/bin/python bench/scale.py --counts 0,2000 --kill-at 2000 --side kcompat

Per side (Apache Kafka first, then kcompat; one cluster per side walks through the
counts, so partitions accumulate):

* the cluster: Kafka as ``KafkaReferenceCluster`` (3 combined broker+controller
  KRaft nodes, -Xmx1g each as kafka-server-start.sh, ``--kafka-heap``;
  min.insync.replicas 2, every other setting Kafka's
  default, so ``log.flush.interval.messages`` leaves flushing to the OS); kcompat as
  ``compat_tests._cluster.Cluster`` (3 brokers, Raft cluster mode) with
  ``kcompat.flush.mode=never`` and ``group.initial.rebalance.delay.ms=0``, as in
  ``compare.py``'s cluster part.
* the walk: for each count of ``--counts``, topics of ``--topic-partitions``
  partitions (RF 3) are created with confluent-kafka's AdminClient (CreateTopics
  requests of up to 1,000 partitions, one after the other) until the count is
  reached; the step's *creation time* runs from its first CreateTopics to the
  first Metadata (of all topics, from any broker) that names a leader for every
  partition, its *writable time* on until one acks=all record of 1 KiB per new
  partition has been acknowledged (Kafka's controller names the leaders before
  the brokers have created the logs; the record also waits for that). "Time to
  create 1,000 partitions" is the sum over the steps from 0 to the first count of
  at least 1,000 (the steps' idle measurements not included).
* idle cost at each count: after ``--settle-s`` (15 s; --quick 10 s) with no
  traffic, the brokers' utime+stime from /proc/<pid>/stat over ``--window-s``
  (20 s; --quick 10 s), summed over the 3 brokers, in % of one core; the whole
  machine's busy share over the same window (/proc/stat, all processes, of all
  cores) says how much else ran. Then VmRSS and RssAnon per broker, open fds per
  broker and leaders per broker (Metadata). RSS per 1,000 partition replicas =
  (the 3 brokers' RSS at the count - at 0) / (3 x count / 1,000). A JVM's RSS also
  grows as its heap fills towards -Xmx whatever the partitions, so at small counts
  Kafka's figure is mostly that; RssAnon leaves out file-backed pages (Kafka's
  mmap'd index files).
* produce, at the first count of at least ``--produce-partitions`` (1,000): one
  confluent-kafka producer (acks=all, linger.ms=5 as in compare.py, ``--linger-ms``;
  batch.size=65536, max.in.flight.requests.per.connection=5 as Kafka's Java
  producer, no compression) writes ``--records`` records of 1 KiB round-robin over the first
  1,000 partitions of the walk (several topics: one ``produce()`` per record with
  an explicit topic and partition), after a warm-up of a fifth as many (at least
  20,000, as the JVM's JIT is slow to warm on 2 busy cores; not counted). Time from the first ``produce()`` to the end of ``flush()``; MiB/s,
  records/s, the brokers' CPU and this client process's CPU over that time.
* failover, at the first count of at least ``--kill-at`` (5,000; --quick 1,000):
  the broker that is not the controller (Metadata's controller id) and leads the
  most partitions is killed with SIGKILL; from the kill, Metadata of all topics is
  asked of the live brokers until every partition the killed broker led names a
  live leader. Reported: the count it led, the time until half and until all had
  moved. Kafka's controller moves leaders once the broker's session expires
  (``broker.session.timeout.ms``, 9 s by default); kcompat's partition groups
  elect on their own Raft timeouts. If more counts follow, the broker is started
  again and the walk waits (``--recover-s``) until every partition has a live
  leader and 3 in-sync replicas (reported, not a target).

Targets (issue 16), printed as met / not met / not run, never asserted: idle CPU at
10,000 partitions <= 10 % of one core for the 3 brokers together and <= Apache
Kafka's at the same count; RSS per 1,000 partition replicas <= 30 MiB (at the
highest count run). Every phase has a time limit (``--create-timeout-s``,
``--failover-timeout-s``, ``--recover-s``, ``--side-timeout-s``): a phase that runs
out is reported, and the side's walk ends there.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import loadavg, machine, proc_cpu_s, proc_status_kib  # noqa: E402
from compat_tests._cluster import Cluster  # noqa: E402
from compat_tests.java._jvm import KAFKA_VERSION  # noqa: E402
from compat_tests.java.kafka_reference import KafkaReferenceCluster  # noqa: E402

SIZE = 3
RF = 3
RECORD_BYTES = 1024
# kafka-server-start.sh's default -Xmx1G per JVM: with compare.py's 512m a node ran out
# of heap (OutOfMemoryError) while the cluster created 5,000 partitions at RF 3
KAFKA_HEAP = "1g"
KCOMPAT_ARGS = ("--set", "kcompat.flush.mode=never", "--set", "group.initial.rebalance.delay.ms=0")
CREATE_CHUNK = 1000  # partitions per CreateTopics request
# max.in.flight 5 as Kafka's Java producer (librdkafka's default, 1,000,000, sends a
# request per linger.ms however many are outstanding: one record per partition each)
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 65536, "compression.type": "none",
            "max.in.flight.requests.per.connection": 5,
            "queue.buffering.max.kbytes": 256 << 10, "log_level": 0}
TARGET_CPU_PCT = 10.0
TARGET_CPU_COUNT = 10_000
TARGET_RSS_MIB = 30.0


class PhaseTimeout(RuntimeError):
    """A phase ran out of its time limit; the side's walk ends there."""


class BrokerDied(PhaseTimeout):
    """A broker process exited on its own."""


def last_lines(text: str, n: int = 6) -> str:
    return " | ".join(" ".join(ln.split())[:300] for ln in text.splitlines()[-n:])


# -- the two clusters behind one face --------------------------------------------------

class Side:
    name = ""
    killed: set[int]

    def check(self) -> None:
        """Raise if a broker exited that the benchmark did not kill."""
        for node, running, tail in self.states():
            if not running and node not in self.killed:
                raise BrokerDied(f"{self.name} broker {node} exited: {tail}")

    def states(self) -> list[tuple[int, bool, str]]: ...  # (node, running, last log lines)

    def start(self) -> None: ...
    def close(self) -> None: ...
    def pids(self) -> dict[int, int]: ...  # node id -> pid, live brokers only
    def live_bootstrap(self) -> str: ...
    def kill(self, node: int) -> None: ...
    def restart(self, node: int, timeout: float) -> None: ...
    def describe(self) -> str: ...


class KafkaSide(Side):
    name = f"Apache Kafka {KAFKA_VERSION}"

    def __init__(self, workdir: Path, heap: str) -> None:
        self.heap = heap
        self.killed = set()
        self.cluster = KafkaReferenceCluster(workdir / "kafka", size=SIZE, heap=heap)

    def states(self) -> list[tuple[int, bool, str]]:
        return [(n.node_id, n.running, "" if n.running else last_lines(n.tail()))
                for n in self.cluster.nodes]

    def start(self) -> None:
        self.cluster.start()

    def close(self) -> None:
        self.cluster.close()

    def pids(self) -> dict[int, int]:
        return {n.node_id: n.proc.pid for n in self.cluster.nodes
                if n.proc is not None and n.running}

    def live_bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.cluster.nodes if n.running)

    def kill(self, node: int) -> None:
        self.killed.add(node)
        self.cluster.nodes[node - 1].kill()

    def restart(self, node: int, timeout: float) -> None:
        self.cluster.nodes[node - 1].start(timeout=timeout)
        self.killed.discard(node)

    def describe(self) -> str:
        return (f"{SIZE} KRaft nodes, each combined broker+controller, -Xmx{self.heap} G1, "
                "min.insync.replicas 2, other settings Kafka's defaults (no fsync on the "
                "produce path, broker.session.timeout.ms 9000)")


class KcompatSide(Side):
    name = "kcompat"

    def __init__(self, workdir: Path) -> None:
        self.killed = set()
        self.cluster = Cluster(workdir / "kcompat", size=SIZE, extra_args=KCOMPAT_ARGS)

    def states(self) -> list[tuple[int, bool, str]]:
        return [(i, b.running, "" if b.running else
                 f"exit {b.proc.returncode if b.proc else '?'}: {last_lines(b.tail(30))}")
                for i, b in self.cluster.brokers.items()]

    def start(self) -> None:
        self.cluster.start()

    def close(self) -> None:
        self.cluster.close()

    def pids(self) -> dict[int, int]:
        return {i: b.pid for i, b in self.cluster.brokers.items()
                if b.pid is not None and b.running}

    def live_bootstrap(self) -> str:
        return self.cluster.live_bootstrap()

    def kill(self, node: int) -> None:
        self.killed.add(node)
        self.cluster.brokers[node].kill()

    def restart(self, node: int, timeout: float) -> None:
        self.cluster.brokers[node].start(timeout=timeout)
        self.killed.discard(node)

    def describe(self) -> str:
        return (f"{SIZE} brokers (compat_tests._cluster.Cluster, Raft cluster mode, "
                f"default.replication.factor 3) `{' '.join(KCOMPAT_ARGS)}`")


# -- figures ----------------------------------------------------------------------------

@dataclass
class Point:
    partitions: int
    topics: int
    create_s: float | None        # the step that reached this count (None: nothing created)
    created: int                  # partitions created by that step
    writable_s: float | None      # until one acks=all record per new partition was acknowledged
    retried: list[str] = field(default_factory=list)          # CreateTopics retried: why
    controller: int = -1                                        # Metadata's controller id
    window_s: float = 0.0
    cpu_s: dict[int, float] = field(default_factory=dict)      # per broker over the window
    machine_busy_pct: float = 0.0                                # all processes, of all cores
    rss_kib: dict[int, int] = field(default_factory=dict)
    anon_kib: dict[int, int] = field(default_factory=dict)
    fds: dict[int, int] = field(default_factory=dict)
    leaders: dict[int, int] = field(default_factory=dict)
    load: str = ""

    @property
    def idle_pct(self) -> float:
        return 100 * sum(self.cpu_s.values()) / self.window_s

    @property
    def rss_mib(self) -> float:
        return sum(self.rss_kib.values()) / 1024


@dataclass
class Failover:
    partitions: int
    killed: int = 0
    controller: int = -1
    led: int = 0
    half_s: float | None = None
    all_s: float | None = None
    left: int = 0
    polls: int = 0
    recover_s: float | None = None
    note: str = ""


@dataclass
class Produce:
    partitions: int
    topics: int
    records: int
    seconds: float = 0.0
    errors: int = 0
    broker_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    at_count: int = 0

    @property
    def mib_s(self) -> float:
        return self.records * RECORD_BYTES / 2**20 / self.seconds

    @property
    def rec_s(self) -> float:
        return self.records / self.seconds


@dataclass
class Result:
    name: str
    describe: str = ""
    startup_s: float = 0.0
    points: list[Point] = field(default_factory=list)
    produce: Produce | None = None
    failover: Failover | None = None
    errors: list[str] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def point(self, count: int) -> Point | None:
        return next((p for p in self.points if p.partitions == count), None)

    def create_first(self, at_least: int = 1000, writable: bool = False
                     ) -> tuple[int, float] | None:
        """(N, seconds): the creation time (``writable``: until one record per
        partition was acknowledged) of the partitions from 0 to the first count
        >= ``at_least``, summed over the steps."""
        total = 0.0
        if not self.points or self.points[0].partitions != 0:
            return None
        for p in self.points[1:]:
            took = p.writable_s if writable else p.create_s
            if took is None:
                return None
            total += took
            if p.partitions >= at_least:
                return p.partitions, total
        return None

    def rss_per_1k(self, p: Point) -> float | None:
        base = self.point(0)
        if base is None or p.partitions == 0:
            return None
        return (p.rss_mib - base.rss_mib) / (RF * p.partitions / 1000)


# -- /proc -----------------------------------------------------------------------------

def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + vals[4]  # idle + iowait
    total = sum(vals[:8])  # guest time is already in user
    return total - idle, total


def code_version() -> str:
    """The commit the brokers run and how many kcompat files differ from it: the
    benchmark runs the working tree, which other sessions may be editing."""
    import subprocess

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    head = git("rev-parse", "--short", "HEAD") or "?"
    dirty = [ln for ln in git("status", "--porcelain", "--", "kcompat").splitlines() if ln]
    return (f"code: kcompat at {head}"
            + (f" + uncommitted changes in {len(dirty)} kcompat file(s) of the working tree"
               if dirty else " (clean)"))


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


# -- Kafka protocol via confluent-kafka --------------------------------------------------

def admin(bootstrap: str, socket_timeout_s: float = 30.0) -> Any:
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                        "socket.timeout.ms": int(socket_timeout_s * 1000)})


def partition_view(adm: Any, prefix: str, timeout: float = 30.0
                   ) -> tuple[int, dict[tuple[str, int], tuple[int, int]]]:
    """(controller id, {(topic, partition): (leader, in-sync replica count)}) of the
    walk's topics from one Metadata request for all topics."""
    md = adm.list_topics(timeout=timeout)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for name, t in md.topics.items():
        if not name.startswith(prefix):
            continue
        for p in t.partitions.values():
            out[(name, p.id)] = (p.leader, len(p.isrs))
    return int(md.controller_id), out


def wait_until(side: Side, adm: Any, prefix: str, expected: dict[str, int], timeout: float,
               ok: Callable[[int, int], bool], what: str) -> float:
    """Poll Metadata until every partition of ``expected`` ({topic: partitions})
    satisfies ``ok(leader, isr count)``; the seconds it took."""
    t0 = time.monotonic()
    want = sum(expected.values())
    last = "no Metadata answer"
    while True:
        side.check()
        try:
            _, view = partition_view(adm, prefix)
            good = sum(1 for (t, _p), (ldr, isr) in view.items()
                       if t in expected and ok(ldr, isr))
            if good == want:
                return time.monotonic() - t0
            last = f"{good} of {want} partitions {what}"
        except Exception as e:  # noqa: BLE001 - a broker busy creating logs may time out
            last = f"Metadata failed: {' '.join(str(e).split())[:200]}"
        if time.monotonic() - t0 > timeout:
            raise PhaseTimeout(f"not all partitions {what} in {timeout:.0f} s: {last}")
        time.sleep(0.2)


def create_topics(side: Side, topics: list[tuple[str, int]], timeout: float) -> list[str]:
    """CreateTopics in requests of up to ``CREATE_CHUNK`` partitions. A topic answered
    with a retriable error (NOT_CONTROLLER, REQUEST_TIMED_OUT, ...) is sent again,
    with a fresh client (fresh metadata), as Kafka's Java AdminClient retries it;
    TOPIC_ALREADY_EXISTS on a retry is success (the first attempt committed). The
    retried errors, one entry per topic and attempt. A broker that exited on its own
    ends the step (with its log's tail) rather than a retry."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    deadline = time.monotonic() + timeout
    retried: list[str] = []
    pending = list(topics)
    attempt = 0
    while pending:
        # kcompat answers CreateTopics once the partitions have leaders, which may take
        # longer than librdkafka's socket timeout: the request's own time limit rules
        adm = admin(side.live_bootstrap(), socket_timeout_s=max(60.0, min(300.0, timeout)))
        again: list[tuple[str, int]] = []
        i = 0
        while i < len(pending):
            chunk, parts = [], 0
            while i < len(pending) and (not chunk or parts + pending[i][1] <= CREATE_CHUNK):
                chunk.append(pending[i])
                parts += pending[i][1]
                i += 1
            left = max(1.0, deadline - time.monotonic())
            futures = adm.create_topics([NewTopic(n, p, RF) for n, p in chunk],
                                        operation_timeout=min(60, left),
                                        request_timeout=min(300, left))
            for (name, parts_), fut in zip(chunk, (futures[n] for n, _ in chunk), strict=True):
                try:
                    fut.result(timeout=left + 5)
                except KafkaException as e:
                    side.check()
                    err = e.args[0]
                    if attempt and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                        continue
                    if err.retriable() or err.code() in (KafkaError.NOT_CONTROLLER,
                                                         KafkaError.REQUEST_TIMED_OUT,
                                                         KafkaError._TIMED_OUT,
                                                         KafkaError._TRANSPORT):
                        retried.append(f"{name}: {err.name()}")
                        again.append((name, parts_))
                        continue
                    raise PhaseTimeout(f"CreateTopics {name}: {err}") from e
                except Exception as e:  # noqa: BLE001 - report which topic and why
                    side.check()
                    raise PhaseTimeout(f"CreateTopics {name}: {e}") from e
        if time.monotonic() > deadline:
            raise PhaseTimeout(f"CreateTopics not answered within {timeout:.0f} s "
                               f"({len(again)} topics of the step still failing: "
                               f"{retried[-3:]})")
        pending = again
        attempt += 1
        if pending:
            time.sleep(0.5)
    return retried


# -- the phases --------------------------------------------------------------------------

def measure_idle(side: Side, point: Point, prefix: str, settle_s: float, window_s: float) -> None:
    time.sleep(settle_s)
    side.check()
    pids = side.pids()
    c0 = {n: proc_cpu_s(p) for n, p in pids.items()}
    m0 = machine_ticks()
    t0 = time.monotonic()
    time.sleep(window_s)
    c1 = {n: proc_cpu_s(p) for n, p in pids.items()}
    m1 = machine_ticks()
    point.window_s = time.monotonic() - t0
    point.cpu_s = {n: c1[n] - c0[n] for n in pids}
    point.machine_busy_pct = 100 * (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
    point.rss_kib = {n: proc_status_kib(p, "VmRSS") for n, p in pids.items()}
    point.anon_kib = {n: proc_status_kib(p, "RssAnon") for n, p in pids.items()}
    point.fds = {n: fd_count(p) for n, p in pids.items()}
    point.load = loadavg()
    try:
        point.controller, view = partition_view(admin(side.live_bootstrap()), prefix)
        for ldr, _isr in view.values():
            point.leaders[ldr] = point.leaders.get(ldr, 0) + 1
    except Exception:  # noqa: BLE001 - leaders per broker is a detail
        pass


def write_one(side: Side, step: list[tuple[str, int]], timeout: float) -> None:
    """One acks=all record of 1 KiB to every partition of ``step``, until all are
    acknowledged: the partitions are usable, not only named in Metadata (Kafka's
    controller names leaders before the brokers have created the logs)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": side.live_bootstrap(), **PRODUCER,
                         "message.timeout.ms": int(timeout * 1000)})
    errors: list[Any] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    value = b"w" * RECORD_BYTES
    for name, parts in step:
        for p in range(parts):
            producer.produce(name, value, partition=p, on_delivery=done)
        producer.poll(0)
    deadline = time.monotonic() + timeout + 5
    while len(producer) and time.monotonic() < deadline:
        side.check()
        producer.flush(1.0)
    if len(producer) or errors:
        raise PhaseTimeout(f"writing one record to each new partition: {len(producer)} "
                           f"unacknowledged, {len(errors)} failed {errors[:2]}")


def produce(side: Side, topics: list[tuple[str, int]], n: int, at_count: int,
            linger_ms: float) -> Produce:
    from confluent_kafka import Producer

    targets: list[tuple[str, int]] = []
    for name, parts in topics:
        targets += [(name, p) for p in range(parts)]
        if len(targets) >= 1000:
            break
    targets = targets[:1000]
    used = sorted({t for t, _ in targets})
    fig = Produce(len(targets), len(used), n, at_count=at_count)
    producer = Producer({"bootstrap.servers": side.live_bootstrap(), **PRODUCER,
                         "linger.ms": linger_ms})
    for t in used:
        producer.list_topics(t, timeout=30)
    errors: list[Any] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    value = b"v" * RECORD_BYTES

    def run(count: int) -> float:
        t0 = time.perf_counter()
        k = len(targets)
        for i in range(count):
            topic, part = targets[i % k]
            while True:
                try:
                    producer.produce(topic, value, partition=part, on_delivery=done)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 1000 == 0:
                producer.poll(0)
        left = producer.flush(300)
        if left:
            raise PhaseTimeout(f"produce: {left} records not acknowledged in 300 s")
        return time.perf_counter() - t0

    run(max(20_000, n // 5))  # warm-up: connections, every partition's leader, the JIT
    warm_errors = len(errors)
    errors.clear()
    pids = side.pids()
    c0 = sum(proc_cpu_s(p) for p in pids.values())
    client0 = sum(os.times()[:2])
    fig.seconds = run(n)
    fig.broker_cpu_s = sum(proc_cpu_s(p) for p in pids.values()) - c0
    fig.client_cpu_s = sum(os.times()[:2]) - client0
    fig.errors = len(errors) + warm_errors
    return fig


def failover(side: Side, prefix: str, partitions: int, timeout: float, poll_s: float = 0.1
             ) -> Failover:
    fo = Failover(partitions)
    fo.controller, view = partition_view(admin(side.live_bootstrap()), prefix)
    per: dict[int, list[tuple[str, int]]] = {}
    for tp, (ldr, _isr) in view.items():
        per.setdefault(ldr, []).append(tp)
    candidates = [n for n in side.pids() if n != fo.controller] or list(side.pids())
    fo.killed = max(candidates, key=lambda n: (len(per.get(n, [])), -n))
    led = set(per.get(fo.killed, []))
    fo.led = len(led)
    t0 = time.monotonic()
    side.kill(fo.killed)
    adm = admin(side.live_bootstrap())
    left = set(led)
    while left:
        elapsed = time.monotonic() - t0
        if elapsed > timeout:
            fo.left = len(left)
            fo.note = f"{len(left)} of {fo.led} still without a live leader after {timeout:.0f} s"
            return fo
        try:
            _, view = partition_view(adm, prefix, timeout=10)
        except Exception:  # noqa: BLE001 - keep asking until the deadline
            time.sleep(poll_s)
            continue
        fo.polls += 1
        now = time.monotonic() - t0
        left = {tp for tp in left if view.get(tp, (-1, 0))[0] in (-1, fo.killed)}
        if fo.half_s is None and len(left) <= fo.led / 2:
            fo.half_s = now
        if left:
            time.sleep(poll_s)
    fo.all_s = time.monotonic() - t0
    if fo.half_s is None:
        fo.half_s = fo.all_s
    return fo


def recover(side: Side, fo: Failover, prefix: str, expected: dict[str, int], timeout: float
            ) -> None:
    t0 = time.monotonic()
    side.restart(fo.killed, timeout)
    live = set(side.pids())
    wait_until(side, admin(side.live_bootstrap()), prefix, expected,
               max(1.0, timeout - (time.monotonic() - t0)),
               lambda ldr, isr: ldr in live and isr >= RF, f"with a leader and {RF} in sync")
    fo.recover_s = time.monotonic() - t0


def walk(side: Side, args: argparse.Namespace) -> Result:
    res = Result(side.name, side.describe(), loads=[loadavg()])
    prefix = f"scale-{os.getpid()}-"
    t_side = time.monotonic()
    t0 = time.monotonic()
    side.start()
    res.startup_s = time.monotonic() - t0
    print(f"  {side.name}: {SIZE} brokers ready in {res.startup_s:.1f} s", flush=True)
    topics: list[tuple[str, int]] = []
    have = 0
    for count in args.counts:
        if time.monotonic() - t_side > args.side_timeout_s:
            res.errors.append(f"side time limit ({args.side_timeout_s:.0f} s) reached before "
                              f"{count:,} partitions")
            break
        step: list[tuple[str, int]] = []
        while have < count:
            n = min(args.topic_partitions, count - have)
            step.append((f"{prefix}{len(topics) + len(step):04d}", n))
            have += n
        create_s = writable_s = None
        retried: list[str] = []
        if step:
            t0 = time.monotonic()
            try:
                retried = create_topics(side, step, args.create_timeout_s)
                topics += step
                left = max(1.0, args.create_timeout_s - (time.monotonic() - t0))
                wait_until(side, admin(side.live_bootstrap()), prefix, dict(topics), left,
                           lambda ldr, _isr: ldr >= 0, "with a leader")
                create_s = time.monotonic() - t0
                left = max(1.0, args.create_timeout_s - (time.monotonic() - t0))
                write_one(side, step, left)
            except PhaseTimeout as e:
                res.errors.append(f"creating {count:,} partitions: {e}")
                print(f"  {side.name}: {res.errors[-1]}", flush=True)
                break
            writable_s = time.monotonic() - t0
        created = sum(n for _, n in step)
        point = Point(count, len(topics), create_s, created, writable_s, retried)
        measure_idle(side, point, prefix, args.settle_s, args.window_s)
        res.points.append(point)
        base = res.point(0)
        per_1k = res.rss_per_1k(point) if base is not None else None
        print(f"  {side.name}: {count:6,} partitions"
              + (f" (+{created:,}: leaders in {create_s:.1f} s, writable in {writable_s:.1f} s"
                 + (f"; {len(retried)} CreateTopics retried: {', '.join(retried[:3])}"
                    if retried else "") + ")"
                 if create_s is not None and writable_s is not None else "")
              + f": idle {point.idle_pct:5.1f} % of a core (machine busy "
              f"{point.machine_busy_pct:.0f} %), RSS {point.rss_mib:.0f} MiB"
              + (f" ({per_1k:.1f} MiB per 1,000 replicas)" if per_1k is not None else "")
              + f", fds {'/'.join(str(v) for v in point.fds.values())}, load {point.load}",
              flush=True)
        if res.produce is None and count >= args.produce_partitions and count > 0:
            try:
                res.produce = produce(side, topics, args.records, count, args.linger_ms)
                p = res.produce
                print(f"  {side.name}: produce {p.records:,} x 1 KiB round-robin over "
                      f"{p.partitions:,} partitions ({p.topics} topics): {p.mib_s:.1f} MiB/s, "
                      f"{p.rec_s:,.0f} rec/s, broker cpu {p.broker_cpu_s:.1f} s, client cpu "
                      f"{p.client_cpu_s:.1f} s in {p.seconds:.1f} s, {p.errors} errors",
                      flush=True)
            except Exception as e:  # noqa: BLE001 - report, go on with the walk
                res.errors.append(f"produce at {count:,}: {type(e).__name__}: {e}")
                print(f"  {side.name}: {res.errors[-1]}", flush=True)
        if res.failover is None and count >= args.kill_at and count > 0:
            try:
                fo = res.failover = failover(side, prefix, count, args.failover_timeout_s)
                print(f"  {side.name}: kill -9 of broker {fo.killed} (controller "
                      f"{fo.controller}), which led {fo.led:,} partitions: half moved in "
                      f"{fmt_s(fo.half_s)}, all in {fmt_s(fo.all_s)} ({fo.polls} Metadata "
                      f"polls){' ' + fo.note if fo.note else ''}", flush=True)
                if count != args.counts[-1]:
                    recover(side, fo, prefix, dict(topics), args.recover_s)
                    print(f"  {side.name}: broker {fo.killed} restarted, every partition "
                          f"with a live leader and {RF} in sync after {fo.recover_s:.1f} s",
                          flush=True)
            except Exception as e:  # noqa: BLE001 - the cluster's state is unknown: stop
                res.errors.append(f"failover at {count:,}: {type(e).__name__}: "
                                  f"{' '.join(str(e).split())[:300]}")
                print(f"  {side.name}: {res.errors[-1]}", flush=True)
                break
    res.loads.append(loadavg())
    res.wall_s = time.monotonic() - t_side
    return res


def run_side(side: Side, args: argparse.Namespace) -> Result:
    try:
        return walk(side, args)
    except Exception as e:  # noqa: BLE001 - the other side's figures must survive
        res = Result(side.name, side.describe(), loads=[loadavg()])
        res.errors.append(f"{type(e).__name__}: {' '.join(str(e).split())[:400]}")
        print(f"  {side.name}: FAILED: {res.errors[-1]}", flush=True)
        return res
    finally:
        side.close()


# -- report ----------------------------------------------------------------------------

def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def per_broker(d: dict[int, Any], fmt: Callable[[Any], str]) -> str:
    return " / ".join(fmt(d[k]) for k in sorted(d))


def point_rows(r: Result) -> list[str]:
    out = []
    for p in r.points:
        per_1k = r.rss_per_1k(p)
        created = (f"+{p.created:,}: leaders {p.create_s:.1f} s "
                   f"({p.created / p.create_s:,.0f}/s), writable {p.writable_s:.1f} s"
                   if p.create_s and p.writable_s else "-")
        out.append(
            f"| {r.name} | {p.partitions:,} ({p.topics}) | {created} | **{p.idle_pct:.1f} %** "
            f"| {per_broker(p.cpu_s, lambda c, w=p.window_s: f'{100 * c / w:.1f}')} "
            f"| {p.machine_busy_pct:.0f} % | {p.rss_mib:.0f} "
            f"| {per_broker(p.rss_kib, lambda k: f'{k / 1024:.0f}')} "
            f"| {per_broker(p.anon_kib, lambda k: f'{k / 1024:.0f}')} "
            f"| {'-' if per_1k is None else f'{per_1k:.1f}'} "
            f"| {per_broker(p.fds, str)} "
            f"| {' / '.join(f'{n}:{c}' for n, c in sorted(p.leaders.items()))} "
            f"| {p.controller} | {p.load} |")
    return out


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def report(results: list[Result], args: argparse.Namespace, total_s: float,
           loads: list[str]) -> tuple[list[str], str]:
    by = {r.name: r for r in results}
    kafka = by.get(KafkaSide.name)
    kc = by.get(KcompatSide.name)
    lines = [
        f"counts {', '.join(f'{c:,}' for c in args.counts)} partitions (RF {RF}, topics of "
        f"{args.topic_partitions}), settle {args.settle_s:.0f} s then an idle window of "
        f"{args.window_s:.0f} s per count; produce {args.records:,} x {RECORD_BYTES} B at "
        f"{args.produce_partitions:,} partitions (acks=all, linger.ms={args.linger_ms:g}, "
        f"batch.size 65536, max.in.flight 5, round-robin); kill -9 at {args.kill_at:,}.",
    ]
    for r in results:
        lines.append(f"{r.name}: {r.describe}; {SIZE} brokers ready in {r.startup_s:.1f} s; "
                     f"side took {r.wall_s:.0f} s; load average start / end "
                     f"{' / '.join(r.loads)}")
    lines += [
        "",
        "| side | partitions (topics) | created by the step | idle CPU, 3 brokers "
        "(% of a core) | per broker (%) | machine busy (all, of 2 cores) | RSS sum (MiB) "
        "| RSS per broker (MiB) | RssAnon per broker (MiB) | RSS per 1,000 replicas over 0 "
        "(MiB) | open fds per broker | leaders per broker | controller | load 1/5/15 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines += point_rows(r)
    lines += ["", "| figure | " + " | ".join(r.name for r in results)
              + (" | kcompat / Kafka |" if kafka and kc else " |"),
              "|---|" + "---|" * len(results) + ("---|" if kafka and kc else "")]

    def row(label: str, get: Callable[[Result], float | None], fmt: str) -> None:
        vals = [get(r) for r in results]
        cells = ["-" if v is None else format(v, fmt) for v in vals]
        extra = ""
        if kafka and kc:
            extra = f" {ratio(get(kc), get(kafka))} |"
        lines.append(f"| {label} | " + " | ".join(cells) + " |" + extra)

    counts = sorted({p.partitions for r in results for p in r.points})
    for c in counts:
        row(f"idle CPU at {c:,} partitions (% of a core)",
            lambda r, c=c: (p.idle_pct if (p := r.point(c)) else None), ".1f")
    for c in counts:
        row(f"RSS of the 3 at {c:,} partitions (MiB)",
            lambda r, c=c: (p.rss_mib if (p := r.point(c)) else None), ".0f")
    for c in counts[1:]:
        row(f"RSS per 1,000 replicas at {c:,} (MiB)",
            lambda r, c=c: (r.rss_per_1k(p) if (p := r.point(c)) else None), ".1f")
    firsts = {r.name: r.create_first() for r in results}
    writables = {r.name: r.create_first(writable=True) for r in results}
    n_first = next((f[0] for f in firsts.values() if f), 1000)
    row(f"time to create {n_first:,} partitions: a leader each in Metadata (s)",
        lambda r: (f[1] if (f := firsts[r.name]) and f[0] == n_first else None), ".1f")
    row(f"time to create {n_first:,} partitions: a record acknowledged by each (s)",
        lambda r: (f[1] if (f := writables[r.name]) and f[0] == n_first else None), ".1f")
    row("failover: partitions the killed broker led",
        lambda r: float(r.failover.led) if r.failover else None, ".0f")
    row("failover: half of them moved (s)",
        lambda r: r.failover.half_s if r.failover else None, ".1f")
    row("failover: all moved (s)", lambda r: r.failover.all_s if r.failover else None, ".1f")
    row("restart: all in sync again (s)",
        lambda r: r.failover.recover_s if r.failover else None, ".1f")
    row("produce to 1,000 partitions (MiB/s)", lambda r: r.produce.mib_s if r.produce else None,
        ".1f")
    row("produce to 1,000 partitions (records/s)",
        lambda r: r.produce.rec_s if r.produce else None, ",.0f")
    row("produce: brokers' CPU (s)", lambda r: r.produce.broker_cpu_s if r.produce else None,
        ".1f")
    row("produce: brokers' CPU per MiB (s)",
        lambda r: r.produce.broker_cpu_s / (r.produce.records * RECORD_BYTES / 2**20)
        if r.produce else None, ".2f")
    row("produce: client CPU (s)", lambda r: r.produce.client_cpu_s if r.produce else None,
        ".1f")
    lines.append("")
    for r in results:
        if r.failover:
            fo = r.failover
            lines.append(f"{r.name} failover at {fo.partitions:,} partitions: killed broker "
                         f"{fo.killed} (controller {fo.controller}), it led {fo.led:,}; "
                         f"{fo.polls} Metadata polls{'; ' + fo.note if fo.note else ''}")
        if r.produce:
            p = r.produce
            lines.append(f"{r.name} produce at {p.at_count:,} partitions: {p.records:,} records "
                         f"over {p.partitions:,} partitions of {p.topics} topics in "
                         f"{p.seconds:.1f} s, {p.errors} delivery errors")
        for p in r.points:
            if p.retried:
                lines.append(f"{r.name} step to {p.partitions:,}: {len(p.retried)} CreateTopics "
                             f"retried ({', '.join(p.retried[:5])})")
        for e in r.errors:
            lines.append(f"{r.name}: NOT COMPLETED: {e}")
    busy = [p.machine_busy_pct for r in results for p in r.points]
    if busy and max(busy) >= 80:
        lines.append(f"NOTE: the machine was {min(busy):.0f}-{max(busy):.0f} % busy (all processes, "
                     "of all cores) during the idle windows: other work shared it. Idle CPU is "
                     "each broker's own /proc time, but creation, produce and failover times "
                     "are stretched by the wait for a core; compare them within this run only.")
    lines += ["", *targets(kafka, kc)]
    lines.append(f"load average (1/5/15 min) at start / end: {' / '.join(loads)}; "
                 f"whole run {total_s:.0f} s")
    final = summary(results, kafka, kc)
    return lines, final


def targets(kafka: Result | None, kc: Result | None) -> list[str]:
    out = []
    if kc is None:
        return ["targets: kcompat not run"]
    p10 = kc.point(TARGET_CPU_COUNT)
    top = max(kc.points, key=lambda p: p.partitions) if kc.points else None
    if p10 is not None:
        met = "met" if p10.idle_pct <= TARGET_CPU_PCT else "NOT met"
        out.append(f"target idle CPU at {TARGET_CPU_COUNT:,} partitions <= {TARGET_CPU_PCT:.0f} % "
                   f"of one core: {p10.idle_pct:.1f} % -> {met}")
        k10 = kafka.point(TARGET_CPU_COUNT) if kafka else None
        if k10 is not None:
            met = "met" if p10.idle_pct <= k10.idle_pct else "NOT met"
            out.append(f"target idle CPU at {TARGET_CPU_COUNT:,} <= Apache Kafka's: "
                       f"{p10.idle_pct:.1f} % vs {k10.idle_pct:.1f} % -> {met}")
        else:
            out.append(f"target idle CPU <= Apache Kafka's at {TARGET_CPU_COUNT:,}: not run "
                       "(no Kafka figure at that count)")
    else:
        at = (f"; at the highest count run, {top.partitions:,}: kcompat {top.idle_pct:.1f} %"
              if top else "")
        if top and kafka and (kp := kafka.point(top.partitions)):
            at += f", Apache Kafka {kp.idle_pct:.1f} %"
        out.append(f"target idle CPU at {TARGET_CPU_COUNT:,} partitions <= {TARGET_CPU_PCT:.0f} % "
                   f"of one core and <= Apache Kafka's: not run ({TARGET_CPU_COUNT:,} not "
                   f"reached){at}")
    if top is not None and top.partitions > 0 and (r := kc.rss_per_1k(top)) is not None:
        met = "met" if r <= TARGET_RSS_MIB else "NOT met"
        kr = ""
        if kafka and (kp := kafka.point(top.partitions)) and (k := kafka.rss_per_1k(kp)):
            kr = f" (Apache Kafka {k:.1f} MiB)"
        out.append(f"target RSS per 1,000 partition replicas <= {TARGET_RSS_MIB:.0f} MiB, at "
                   f"{top.partitions:,} partitions: {r:.1f} MiB{kr} -> {met}")
    else:
        out.append("target RSS per 1,000 partition replicas: not run (no count above 0)")
    return out


def summary(results: list[Result], kafka: Result | None, kc: Result | None) -> str:
    def side(r: Result | None) -> str:
        if r is None or not r.points:
            return "n/a"
        top = max(r.points, key=lambda p: p.partitions)
        first = r.create_first()
        per = r.rss_per_1k(top)
        return (f"idle@{top.partitions}={top.idle_pct:.1f}% "
                f"rss_per_1k={'n/a' if per is None else f'{per:.1f}MiB'} "
                f"create{first[0] if first else ''}="
                f"{f'{first[1]:.1f}s' if first else 'n/a'} "
                f"failover={fmt_s(r.failover.all_s if r.failover else None).replace(' ', '')} "
                f"produce={f'{r.produce.mib_s:.1f}MiB/s' if r.produce else 'n/a'}")
    tl = targets(kafka, kc)
    verdict = ",".join("met" if t.endswith("-> met") else "not-met" if "NOT met" in t
                       else "not-run" for t in tl)
    return f"scale: kafka[{side(kafka)}] kcompat[{side(kc)}] targets={verdict}"


# -- main --------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="0 / 500 / 1,000 partitions, < 5 min")
    ap.add_argument("--counts", type=str, default=None,
                    help="comma-separated partition counts (default 0,1000,5000,10000; "
                         "--quick 0,500,1000)")
    ap.add_argument("--side", choices=("kafka", "kcompat", "both"), default="both")
    ap.add_argument("--topic-partitions", type=int, default=100)
    ap.add_argument("--settle-s", type=float, default=None, help="15 s; --quick 10 s")
    ap.add_argument("--window-s", type=float, default=None, help="20 s; --quick 10 s")
    ap.add_argument("--records", type=int, default=None, help="200,000; --quick 20,000")
    ap.add_argument("--produce-partitions", type=int, default=1000)
    ap.add_argument("--linger-ms", type=float, default=5.0,
                    help="the producer's linger.ms (5, as compare.py)")
    ap.add_argument("--kill-at", type=int, default=None, help="5,000; --quick 1,000")
    ap.add_argument("--kafka-heap", default=KAFKA_HEAP)
    ap.add_argument("--create-timeout-s", type=float, default=None,
                    help="per step (900 s; --quick 240 s)")
    ap.add_argument("--failover-timeout-s", type=float, default=120.0)
    ap.add_argument("--recover-s", type=float, default=None, help="600 s; --quick 180 s")
    ap.add_argument("--side-timeout-s", type=float, default=None,
                    help="no new count after this (3,600 s; --quick 240 s)")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()
    q = args.quick
    args.counts = sorted({int(c.replace("_", "")) for c in args.counts.split(",")}) \
        if args.counts else ([0, 500, 1000] if q else [0, 1000, 5000, 10000])
    args.settle_s = args.settle_s if args.settle_s is not None else (10.0 if q else 15.0)
    args.window_s = args.window_s if args.window_s is not None else (10.0 if q else 20.0)
    args.records = args.records or (20_000 if q else 200_000)
    args.kill_at = args.kill_at if args.kill_at is not None else (1000 if q else 5000)
    args.create_timeout_s = args.create_timeout_s or (240.0 if q else 900.0)
    args.recover_s = args.recover_s or (180.0 if q else 600.0)
    args.side_timeout_s = args.side_timeout_s or (240.0 if q else 3600.0)

    started = time.monotonic()
    loads = [loadavg()]
    workdir = Path(tempfile.mkdtemp(prefix="kcompat-bench-scale-"))
    results: list[Result] = []
    try:
        if args.side in ("kafka", "both"):
            print(f"Apache Kafka {KAFKA_VERSION}, {SIZE} KRaft nodes:", flush=True)
            results.append(run_side(KafkaSide(workdir, args.kafka_heap), args))
        if args.side in ("kcompat", "both"):
            print(f"kcompat, {SIZE} brokers:", flush=True)
            results.append(run_side(KcompatSide(workdir), args))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    loads.append(loadavg())
    total = time.monotonic() - started
    lines, final = report(results, args, total, loads)
    head = [*machine(), f"nproc {os.cpu_count()}", code_version()]
    print()
    print("\n".join([*head, *lines]))
    if not args.no_results:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        cmd = " ".join(["bench/scale.py", *sys.argv[1:]])
        with open(args.results, "a") as f:
            f.write(f"\n## Multi-Raft scale (issue 16 item 2) — {stamp}\n\n`{cmd}`\n\n"
                    + "; ".join(head) + "\n\n" + "\n".join(lines) + "\n\n`" + final + "`\n")
    print(final)


if __name__ == "__main__":
    main()
