"""Shared helpers for the consumer-group suites (client-independent checks).

- ``BackgroundProducer``: a thread that produces unique values round-robin over the
  partitions (librdkafka producer) and remembers where each one was acknowledged.
- ``Ledger``: what every group member processed, checked for loss and duplicates.
- ``MemberProc`` / ``read_member_log``: ``compat_tests/_group_member.py`` subprocesses
  and the "partition offset value" / ``# event`` lines they append to their out-file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ._broker import REPO_ROOT

if TYPE_CHECKING:
    from ._deployment import Deployment

TIMEOUT_S = 30.0

# Fast group settings for tests that do not measure the defaults. The broker's
# group.min.session.timeout.ms is 6000 (Kafka's default).
FAST_BROKER_ARGS = ("--set", "group.initial.rebalance.delay.ms=0")
SESSION_MS = 6000
HEARTBEAT_MS = 500


def unique_group(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(pred: Callable[[], object], timeout: float, what: Callable[[], str] | str,
             interval: float = 0.05) -> float:
    """Poll ``pred`` until truthy; return the seconds it took. Fails with ``what``."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() > deadline:
            msg = what() if callable(what) else what
            raise AssertionError(f"after {timeout:.1f}s: {msg}")
        time.sleep(interval)


def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1) -> None:
    """CreateTopics (librdkafka sends it to the controller); returns once
    Metadata names a leader for every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication)],
        operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    futs[name].result(timeout=TIMEOUT_S)

    def ready() -> bool:
        t = admin.list_topics(topic=name, timeout=TIMEOUT_S).topics.get(name)
        return (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values()))

    wait_for(ready, TIMEOUT_S, f"topic {name} never showed {partitions} led partitions")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("watermarks"),
                  "enable.auto.commit": False})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)[1]
                for p in range(partitions)}
    finally:
        c.close()


def produce_sync(bootstrap: str, topic: str, values_by_partition: dict[int, list[bytes]]
                 ) -> dict[bytes, tuple[int, int]]:
    """Produce and wait; returns value -> (partition, offset) as acknowledged."""
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []

    def cb(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part, values in values_by_partition.items():
        for v in values:
            p.produce(topic, value=v, partition=part, on_delivery=cb)
            p.poll(0)
    left = p.flush(TIMEOUT_S)
    assert left == 0 and not errors, f"produce: {left} undelivered, errors {errors[:5]}"
    return acked


class BackgroundProducer(threading.Thread):
    """Produces ``count`` unique values ``<tag>-<i>`` to partition ``i % partitions``
    at about ``rate`` records per second; with ``held``, the last ``held_count``
    only once that event is set (so that records arrive after, say, a group's
    last join however long the joins took)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, count: int,
                 rate: float = 500.0, tag: str | None = None,
                 held: threading.Event | None = None, held_count: int = 0) -> None:
        super().__init__(daemon=True, name=f"producer-{topic}")
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.count, self.rate = count, rate
        self.held, self.held_from = held, count - held_count if held is not None else count
        self.tag = tag or uuid.uuid4().hex[:6]
        self.values = [f"{self.tag}-{i:06d}".encode() for i in range(count)]
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.errors: list[str] = []
        self.exc: BaseException | None = None
        self.sent = 0
        self._lock = threading.Lock()

    def _cb(self, err: object, msg: object) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    def run(self) -> None:
        try:
            p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                          "message.timeout.ms": int(TIMEOUT_S * 1000)})
            t0 = time.monotonic()
            for i, v in enumerate(self.values):
                if i == self.held_from and self.held is not None:
                    p.flush(TIMEOUT_S)
                    self.held.wait(TIMEOUT_S)
                    t0 = time.monotonic() - i / self.rate
                ahead = i / self.rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
                p.produce(self.topic, value=v, partition=i % self.partitions, on_delivery=self._cb)
                p.poll(0)
                self.sent = i + 1
            p.flush(TIMEOUT_S)
        except BaseException as exc:  # surfaced by finish()
            self.exc = exc

    def finish(self, timeout: float = TIMEOUT_S + 30) -> dict[bytes, tuple[int, int]]:
        self.join(timeout)
        assert not self.is_alive(), f"producer still running after {timeout}s ({self.sent} sent)"
        assert self.exc is None, f"producer thread failed: {self.exc!r}"
        assert not self.errors, f"producer: {len(self.errors)} delivery errors, e.g. {self.errors[:3]}"
        assert len(self.acked) == self.count, (
            f"producer: {len(self.acked)} of {self.count} records acknowledged")
        return dict(self.acked)

    def end_offsets(self) -> dict[int, int]:
        ends = {p: 0 for p in range(self.partitions)}
        for p, o in self.acked.values():
            ends[p] = max(ends[p], o + 1)
        return ends


@dataclass(frozen=True)
class Processed:
    member: str
    partition: int
    offset: int
    value: bytes


class Ledger:
    """Thread-safe list of every record a member processed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: list[Processed] = []
        self._values: set[bytes] = set()

    def add(self, member: str, partition: int, offset: int, value: bytes) -> None:
        with self._lock:
            self.rows.append(Processed(member, partition, offset, value))
            self._values.add(value)

    def extend(self, rows: Iterable[Processed]) -> None:
        for r in rows:
            self.add(r.member, r.partition, r.offset, r.value)

    def distinct(self) -> int:
        with self._lock:
            return len(self._values)

    def has_all(self, values: Iterable[bytes]) -> bool:
        with self._lock:
            return all(v in self._values for v in values)

    def snapshot(self) -> list[Processed]:
        with self._lock:
            return list(self.rows)

    def per_member(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.snapshot():
            out[r.member] = out.get(r.member, 0) + 1
        return out


def check_exactly_once(acked: dict[bytes, tuple[int, int]], rows: Sequence[Processed],
                       client: str) -> None:
    """Every acknowledged value processed once, at the offset it was acknowledged at."""
    by_value: dict[bytes, list[Processed]] = {}
    for r in rows:
        by_value.setdefault(r.value, []).append(r)
    missing = sorted(v for v in acked if v not in by_value)
    dupes = {v: [(r.member, r.partition, r.offset) for r in rs]
             for v, rs in by_value.items() if len(rs) > 1}
    alien = sorted(v for v in by_value if v not in acked)
    wrong_place = [(v, acked[v], (rs[0].partition, rs[0].offset))
                   for v, rs in by_value.items() if v in acked
                   and (rs[0].partition, rs[0].offset) != acked[v]]
    assert not missing, (
        f"{client}: {len(missing)} of {len(acked)} produced records never consumed by any member,"
        f" e.g. {missing[:5]} at {[acked[v] for v in missing[:5]]}")
    assert not dupes, (
        f"{client}: {len(dupes)} records consumed more than once although every member committed "
        f"synchronously after processing, e.g. {list(dupes.items())[:5]}")
    assert not alien, f"{client}: consumed values nobody produced: {alien[:5]}"
    assert not wrong_place, (
        f"{client}: records consumed at another (partition, offset) than acknowledged "
        f"(value, acked, seen): {wrong_place[:5]}")


# -- _group_member.py subprocesses ---------------------------------------------------------


@dataclass
class MemberLog:
    records: list[Processed] = field(default_factory=list)
    # index into ``assignments`` in effect when each record was processed (-1: none yet)
    record_epochs: list[int] = field(default_factory=list)
    # (wall time, partitions) each time the member's assignment changed
    assignments: list[tuple[float, frozenset[int]]] = field(default_factory=list)
    commits: dict[int, int] = field(default_factory=dict)  # last committed offset per partition
    commit_errors: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    @property
    def current(self) -> frozenset[int]:
        return self.assignments[-1][1] if self.assignments else frozenset()


def read_member_log(path: Path, name: str) -> MemberLog:
    log = MemberLog()
    if not path.exists():
        return log
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            log.events.append(line)
            parts = line[1:].split()
            if parts[:1] == ["assigned"] and len(parts) >= 2:
                ps = frozenset(int(x) for x in parts[2].split(",") if x) if len(parts) > 2 else frozenset()
                log.assignments.append((float(parts[1]), ps))
            elif parts[:1] == ["committed"]:
                for item in parts[1:]:
                    p, o = item.split(":")
                    log.commits[int(p)] = int(o)
            elif parts[:1] == ["commit-error"]:
                log.commit_errors.append(line)
            continue
        fields = line.split(" ", 2)
        if len(fields) != 3 or not fields[0].isdigit() or not fields[1].isdigit():
            continue  # a line cut short by kill -9
        log.records.append(Processed(name, int(fields[0]), int(fields[1]), fields[2].encode()))
        log.record_epochs.append(len(log.assignments) - 1)
    return log


class MemberProc:
    """One ``python -m compat_tests._group_member`` process."""

    def __init__(self, client: str, bootstrap: str, topic: str, group: str, out: Path,
                 name: str, *extra: str) -> None:
        self.name, self.out = name, Path(out)
        self.stderr_path = self.out.with_suffix(".stderr")
        cmd = [sys.executable, "-m", "compat_tests._group_member", client, bootstrap, topic,
               group, str(self.out), *extra]
        self.cmd = cmd
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def log(self) -> MemberLog:
        return read_member_log(self.out, self.name)

    def stderr_tail(self, n: int = 2000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM: the member closes its consumer (LeaveGroup) and exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(
                    f"member {self.name} did not exit within {timeout}s of SIGTERM; "
                    f"stderr: {self.stderr_tail()}") from None
        return self.proc.returncode

    def describe(self) -> str:
        lg = self.log()
        return (f"{self.name}: alive={self.alive()} records={len(lg.records)} "
                f"assignment={sorted(lg.current)} commits={lg.commits} "
                f"commit_errors={lg.commit_errors[-3:]} stderr tail:\n{self.stderr_tail(800)}")


def stop_all(members: Iterable[MemberProc]) -> None:
    for m in members:
        if m.alive():
            m.proc.send_signal(signal.SIGTERM)
    for m in members:
        try:
            m.proc.wait(20)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait(10)


def assignment_covers(assignments: Sequence[frozenset[int]], partitions: int,
                      require_all_nonempty: bool = True) -> bool:
    """Disjoint, covering all partitions, and (optionally) nobody empty."""
    union: set[int] = set()
    for a in assignments:
        if union & a:
            return False
        union |= a
        if require_all_nonempty and not a:
            return False
    return union == set(range(partitions))


# -- scenarios shared by the client suites -----------------------------------------------


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """OffsetFetch through librdkafka (no join): partition -> committed offset (-1001: none)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def _all_values(logs: Iterable[MemberLog]) -> set[bytes]:
    return {r.value for lg in logs for r in lg.records}


def kill_member_scenario(client: str, broker: Deployment, tmp: Path, count: int = 2400,
                         extra: Sequence[str] = ()) -> None:
    """Three member processes under live production; kill -9 one; the survivors take
    its partitions within session.timeout.ms + margin and resume from its commits."""
    bs = broker.bootstrap
    from ._broker import unique_topic

    topic, group = unique_topic(f"kill-{client}"), unique_group(f"kill-{client}")
    create_topic(bs, topic, 6, broker.replication)
    # half the records only once the members share the partitions: a member slow to
    # join on a loaded host would otherwise find everything consumed by the others
    formed = threading.Event()
    prod = BackgroundProducer(bs, topic, 6, count, rate=250, held=formed, held_count=count // 2)
    prod.start()
    args = ("--session-timeout-ms", str(SESSION_MS), "--heartbeat-ms", str(HEARTBEAT_MS), *extra)
    members = [MemberProc(client, bs, topic, group, tmp / f"m{i}.log", f"m{i}", *args)
               for i in range(3)]
    try:
        def desc() -> str:
            return "\n".join(m.describe() for m in members)

        wait_for(lambda: assignment_covers([m.log().current for m in members], 6), 45,
                 lambda: f"{client}: 3 members never shared 6 partitions:\n{desc()}")
        formed.set()
        wait_for(lambda: all(m.log().commits for m in members), 45,
                 lambda: f"{client}: 3 members sharing 6 partitions never all committed:\n{desc()}")
        time.sleep(0.5)
        victim, survivors = members[0], members[1:]
        t_kill = time.time()
        victim.kill9()
        vlog = victim.log()
        owned = vlog.current
        assert owned, f"{client}: test bug: victim owned nothing"
        took = wait_for(lambda: assignment_covers([s.log().current for s in survivors], 6), 60,
                        lambda: f"{client}: survivors never took over all 6 partitions after "
                                f"kill -9 of {victim.name} (owned {sorted(owned)}):\n{desc()}")
        limit = SESSION_MS / 1000 + 5
        assert took <= limit, (
            f"{client}: partitions {sorted(owned)} of the killed member were reassigned after "
            f"{took:.1f}s, expected within session.timeout.ms={SESSION_MS} + 5 s")
        acked = prod.finish()
        wait_for(lambda: set(acked) <= _all_values([m.log() for m in members]), 45,
                 lambda: f"{client}: consumed {len(_all_values([m.log() for m in members]))} "
                         f"of {len(acked)} distinct records after the kill:\n{desc()}")
        time.sleep(0.5)  # last commits
    finally:
        stop_all(members)
        prod.join(5)
    logs = {m.name: m.log() for m in members}
    slog = [logs[s.name] for s in survivors]
    # every record at least once
    seen: dict[bytes, list[tuple[str, int, int]]] = {}
    for name, lg in logs.items():
        for r in lg.records:
            seen.setdefault(r.value, []).append((name, r.partition, r.offset))
    missing = sorted(v for v in acked if v not in seen)
    assert not missing, (
        f"{client}: {len(missing)} records skipped after kill -9 of a member, e.g. "
        f"{[(v, acked[v]) for v in missing[:5]]}; victim commits {vlog.commits}")
    # duplicates only for what the victim processed after its last commit
    bad = []
    for v, where in seen.items():
        if len(where) == 1:
            continue
        by_victim = [w for w in where if w[0] == victim.name]
        others = [w for w in where if w[0] != victim.name]
        ok = (len(by_victim) == 1 and len(others) == 1
              and by_victim[0][2] >= vlog.commits.get(by_victim[0][1], 0))
        if not ok:
            bad.append((v, where))
    assert not bad, (
        f"{client}: records consumed twice that the killed member had committed (or that "
        f"survivors consumed twice): {bad[:5]}; victim's last commits {vlog.commits}")
    # the new owners started each taken-over partition at (or after) the victim's commit
    for p in sorted(owned):
        firsts = []
        for lg in slog:
            post = [i for i, (t, _) in enumerate(lg.assignments) if t >= t_kill]
            if not post:
                continue
            offs = [r.offset for r, e in zip(lg.records, lg.record_epochs, strict=True)
                    if r.partition == p and e >= post[0]]
            firsts += offs[:1]
        if p in vlog.commits and firsts:
            assert min(firsts) >= vlog.commits[p], (
                f"{client}: partition {p} resumed at offset {min(firsts)} after the kill, but the "
                f"killed member had committed {vlog.commits[p]}")
    ends = prod.end_offsets()
    got = committed_offsets(bs, group, topic, 6)
    assert got == ends, f"{client}: final committed offsets {got} != end offsets {ends}"
    errs = [e for lg in slog for e in lg.commit_errors]
    assert not errs, f"{client}: survivors' synchronous commits failed: {errs[:5]}"


def clean_leave_scenario(client: str, broker: Deployment, tmp: Path, count: int = 1200,
                         extra: Sequence[str] = ()) -> None:
    """Two members with session.timeout.ms=30000; one closes cleanly (LeaveGroup):
    the other owns everything long before the session timeout, nothing lost or doubled."""
    bs = broker.bootstrap
    from ._broker import unique_topic

    topic, group = unique_topic(f"leave-{client}"), unique_group(f"leave-{client}")
    create_topic(bs, topic, 6, broker.replication)
    formed = threading.Event()  # half the records once both share the partitions (above)
    prod = BackgroundProducer(bs, topic, 6, count, rate=250, held=formed, held_count=count // 2)
    prod.start()
    args = ("--session-timeout-ms", "30000", "--heartbeat-ms", "1000", *extra)
    members = [MemberProc(client, bs, topic, group, tmp / f"m{i}.log", f"m{i}", *args)
               for i in range(2)]
    stay, leaver = members
    try:
        def desc() -> str:
            return "\n".join(m.describe() for m in members)

        wait_for(lambda: assignment_covers([m.log().current for m in members], 6), 45,
                 lambda: f"{client}: 2 members never shared 6 partitions:\n{desc()}")
        formed.set()
        wait_for(lambda: all(m.log().records for m in members), 45,
                 lambda: f"{client}: 2 members sharing 6 partitions never both consumed:\n{desc()}")
        t0 = time.monotonic()
        rc = leaver.terminate()
        assert rc == 0, f"{client}: leaving member exited {rc}:\n{leaver.stderr_tail()}"
        took = wait_for(lambda: stay.log().current == frozenset(range(6)), 40,
                        lambda: f"{client}: remaining member never got all partitions:\n{desc()}")
        took = time.monotonic() - t0
        assert took < 10, (
            f"{client}: remaining member owned all 6 partitions {took:.1f}s after the other "
            f"closed (session.timeout.ms=30000): LeaveGroup did not trigger a rebalance")
        acked = prod.finish()
        wait_for(lambda: set(acked) <= _all_values([m.log() for m in members]), 45,
                 lambda: f"{client}: consumed {len(_all_values([m.log() for m in members]))} "
                         f"of {len(acked)}:\n{desc()}")
        time.sleep(0.5)
    finally:
        stop_all(members)
        prod.join(5)
    rows = [r for m in members for r in m.log().records]
    check_exactly_once(acked, rows, client)
    ends = prod.end_offsets()
    got = committed_offsets(bs, group, topic, 6)
    assert got == ends, f"{client}: final committed offsets {got} != end offsets {ends}"
