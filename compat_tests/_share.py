"""Harness for the share-group suites (KIP-932) with confluent-kafka's ShareConsumer.

- ``set_group_configs``: group configs through IncrementalAlterConfigs on a
  GROUP resource (``share.auto.offset.reset``, ``share.record.lock.duration.ms``,
  kcompat's ``kc.share.*``), as an operator sets them before the group reads.
- ``ShareMember``: a ``compat_tests/_share_member.py`` process; ``deliveries()``
  parses its out-file into ``Delivery`` rows, each marked settled once the broker
  confirmed its acknowledgement (a ShareAcknowledge answered ok, or the
  acknowledgement-commit callback of a ShareFetch that carried it).
- ``Ledger``: the deliveries of every member of a run, and the checks the tests
  share: every record settled, who saw what, FIFO order per message group.

All times are the machine's wall clock in milliseconds (every process of a run
is on this machine), so an event in one member can be ordered against another's.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from ._broker import REPO_ROOT
from ._groups import TIMEOUT_S, create_topic, wait_for

#: Final decisions: a record ACCEPTed or REJECTed is never delivered again.
FINAL = ("A", "X")
#: The APIs a ShareConsumer needs, by key (librdkafka 2.16 sends v1 of each).
SHARE_APIS = {76: "ShareGroupHeartbeat", 78: "ShareFetch", 79: "ShareAcknowledge"}


def advertised_api_keys(bootstrap: str) -> set[int]:
    """The API keys the first bootstrap broker lists in its ApiVersions v0 answer."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    frame = struct.pack(">hhih", 18, 0, 1, 5) + b"share"
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise AssertionError(f"{bootstrap} closed the connection on ApiVersions")
            data += chunk
    _corr, err, count = struct.unpack_from(">ihi", data, 4)
    assert err == 0, f"ApiVersions v0 answered error {err}"
    return {struct.unpack_from(">h", data, 14 + 6 * i)[0] for i in range(count)}


def require_share_apis(bootstrap: str) -> None:
    """Fail at once, not after a long wait, if the broker lacks a share-group API:
    librdkafka's ShareConsumer then just never gets a record."""
    missing = {k: n for k, n in SHARE_APIS.items() if k not in advertised_api_keys(bootstrap)}
    if missing:
        pytest.fail(f"{bootstrap} does not advertise "
                    + ", ".join(f"{n} ({k})" for k, n in sorted(missing.items()))
                    + " in ApiVersions: no share groups to test")


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET on the GROUP resource; raises on any error."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[int, str | None, str]]) -> None:
    """``(partition, key, value)`` in order, idempotent (one partition's records
    land in the order given); every delivery must succeed."""
    errors: list[str] = []

    def cb(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for partition, key, value in records:
        p.produce(topic, key=None if key is None else key.encode(), value=value.encode(),
                  partition=partition, on_delivery=cb)
        p.poll(0)
    left = p.flush(TIMEOUT_S)
    assert left == 0 and not errors, f"produce: {left} undelivered, errors {errors[:5]}"


@dataclass
class Delivery:
    member: str
    ts_ms: int
    partition: int
    offset: int
    count: int  # the delivery count the broker handed out
    decision: str  # A ACCEPT, R RELEASE, X REJECT
    key: str
    value: str
    settled_ms: int | None = None  # sent (ShareAcknowledge) or confirmed (callback)
    failed: bool = False  # the broker answered the acknowledgement with an error
    answered_ms: int | None = None  # when the acknowledgement's answer came (ok or not)


def read_deliveries(path: Path, member: str) -> tuple[list[Delivery], list[str]]:
    """The member's deliveries (settled where its log says so) and its ``#`` lines."""
    rows: list[Delivery] = []
    notes: list[str] = []
    unsettled: dict[tuple[int, int], deque[Delivery]] = defaultdict(deque)
    batch: list[Delivery] = []
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines():
        f = line.split(" ")
        if f[0] == "D" and len(f) == 8:
            d = Delivery(member, int(f[1]), int(f[2]), int(f[3]), int(f[4]), f[5], f[6], f[7])
            rows.append(d)
            batch.append(d)
            unsettled[(d.partition, d.offset)].append(d)
        elif f[0] == "C" and len(f) >= 3:
            ok = {int(p) for p, _, r in (x.partition(":") for x in f[3:]) if r == "ok"}
            for d in batch:
                _settle(unsettled, d.partition, d.offset, int(f[1]), d.partition in ok,
                        int(f[2]))
            batch = []
        elif f[0] == "K" and len(f) >= 3:
            for part in f[3:]:
                p, _, offs = part.partition(":")
                for o in filter(None, offs.split(",")):
                    _settle(unsettled, int(p), int(o), int(f[1]), f[2] == "ok", int(f[1]))
        elif line.startswith("#"):
            notes.append(line)
    return rows, notes


def _settle(unsettled: dict[tuple[int, int], deque[Delivery]], partition: int, offset: int,
            ts_ms: int, ok: bool, answered_ms: int) -> None:
    """Acknowledgements are answered in the order they were made: the first
    unsettled delivery of the record is the one this answer is about."""
    q = unsettled.get((partition, offset))
    if not q:
        return
    d = q.popleft()
    d.answered_ms = answered_ms
    if ok:
        d.settled_ms = ts_ms
    else:
        d.failed = True


class ShareMember:
    """One ``python -m compat_tests._share_member`` process."""

    def __init__(self, bootstrap: str, topic: str, group: str, out: Path, name: str,
                 *extra: str) -> None:
        self.name, self.out = name, Path(out)
        self.stderr_path = self.out.with_suffix(".stderr")
        self.cmd = [sys.executable, "-m", "compat_tests._share_member", bootstrap, topic,
                    group, str(self.out), *extra]
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.cmd, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def deliveries(self) -> list[Delivery]:
        return read_deliveries(self.out, self.name)[0]

    def notes(self) -> list[str]:
        return read_deliveries(self.out, self.name)[1]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stderr_tail(self, n: int = 1500) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def describe(self) -> str:
        rows = self.deliveries()
        settled = sum(1 for d in rows if d.settled_ms is not None)
        return (f"{self.name}: alive={self.alive()} deliveries={len(rows)} settled={settled} "
                f"notes={self.notes()[-4:]}\n  stderr tail: {self.stderr_tail(600)!r}")


def stop_all(members: Iterable[ShareMember], timeout: float = 20.0) -> None:
    """SIGTERM (each closes its consumer: acknowledgements out, leave), then wait."""
    members = list(members)
    for m in members:
        if m.alive():
            m.proc.send_signal(signal.SIGTERM)
    for m in members:
        try:
            m.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait(10)


class Ledger:
    """Every delivery of a run, from all members' logs."""

    def __init__(self, members: Iterable[ShareMember]) -> None:
        self.rows = sorted((d for m in members for d in m.deliveries()), key=lambda d: d.ts_ms)

    def by_value(self) -> dict[str, list[Delivery]]:
        out: dict[str, list[Delivery]] = defaultdict(list)
        for d in self.rows:
            out[d.value].append(d)
        return out

    def settled_final(self) -> dict[str, list[Delivery]]:
        """value -> its deliveries whose ACCEPT or REJECT the broker took."""
        out: dict[str, list[Delivery]] = defaultdict(list)
        for d in self.rows:
            if d.decision in FINAL and d.settled_ms is not None:
                out[d.value].append(d)
        return out

    def per_member(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for d in self.rows:
            counts[d.member] += 1
        return dict(counts)


def wait_all_settled(members: Sequence[ShareMember], values: Iterable[str],
                     timeout: float) -> Ledger:
    """Until every value has a settled final acknowledgement."""
    wanted = set(values)
    state: dict[str, Ledger] = {}

    def done() -> bool:
        state["l"] = Ledger(members)
        return wanted <= set(state["l"].settled_final())

    def what() -> str:
        missing = sorted(wanted - set(state["l"].settled_final()))
        return (f"{len(missing)} of {len(wanted)} records never settled (first {missing[:10]})\n"
                + "\n".join(m.describe() for m in members))

    wait_for(done, timeout, what, interval=0.2)
    return state["l"]


def fifo_violations(ledger: Ledger, produced: dict[str, list[str]]) -> list[str]:
    """FIFO message groups: per key, the settled ACCEPTs in delivery order are the
    produced values, once each; and no record of a group was handed out before
    the ACCEPT of the record produced before it had been sent to the broker."""
    problems: list[str] = []
    accepted: dict[str, list[Delivery]] = defaultdict(list)
    for d in ledger.rows:
        if d.decision == "A" and d.settled_ms is not None:
            accepted[d.key].append(d)
    handed = ledger.by_value()
    for key, values in produced.items():
        got = [d.value for d in accepted.get(key, [])]
        if got != values:
            problems.append(f"group {key}: accepted {got}, produced {values}")
            continue
        accept_sent = {d.value: d.settled_ms for d in accepted[key]}
        for prev, cur in zip(values, values[1:], strict=False):
            for d in handed[cur]:
                if d.ts_ms < (accept_sent[prev] or 0):
                    problems.append(f"group {key}: {cur} handed to {d.member} at {d.ts_ms} "
                                    f"(count {d.count}) before {prev} was accepted "
                                    f"at {accept_sent[prev]}")
    return problems


# -- scenario: ACCEPT, RELEASE, REJECT (the member's ``modulo`` policy) ----------------

MODULO_RECORDS = 200


def expected_modulo(i: int) -> list[tuple[int, str]]:
    """(delivery count, decision) of every delivery of record ``i``, in order."""
    if i % 10 == 7:
        return [(1, "X")]
    if i % 10 == 3:
        return [(1, "R"), (2, "A")]
    return [(1, "A")]


def run_modulo(bootstrap: str, topic: str, group: str, workdir: Path, *, replication: int,
               configs: dict[str, str], timeout: float = 45.0) -> Ledger:
    """Two members on a 2-partition topic of ``MODULO_RECORDS`` records (record i
    on partition i // 10 % 2, so each holds every kind): ``m0`` acknowledges with ShareAcknowledge
    (``commit_sync``), ``m1`` on its next ShareFetch. Returns once every record
    was accepted or rejected and both members closed."""
    require_share_apis(bootstrap)
    create_topic(bootstrap, topic, 2, replication)
    set_group_configs(bootstrap, group, configs)
    members = [ShareMember(bootstrap, topic, group, workdir / "m0.log", "m0", "--ack", "commit"),
               ShareMember(bootstrap, topic, group, workdir / "m1.log", "m1", "--ack", "poll")]
    try:
        produce(bootstrap, topic, ((i // 10 % 2, None, str(i)) for i in range(MODULO_RECORDS)))
        wait_all_settled(members, (str(i) for i in range(MODULO_RECORDS)), timeout)
    finally:
        stop_all(members)
    return Ledger(members)


def delivery_problems(ledger: Ledger, count: int,
                      expected: Callable[[int], list[tuple[int, str]]],
                      require_ok: bool = False) -> list[str]:
    """Records ``0 .. count-1`` (the value is the number) were handed out with
    exactly the (delivery count, decision) sequence ``expected`` gives, each
    acknowledgement settled (and answered ok with ``require_ok``)."""
    problems: list[str] = []
    handed = ledger.by_value()
    for i in range(count):
        ds = handed.get(str(i), [])
        got = [(d.count, d.decision) for d in ds]
        if got != expected(i):
            problems.append(f"record {i}: deliveries {got}, want {expected(i)}"
                            f" (members {[d.member for d in ds]})")
        elif any(d.settled_ms is None or (require_ok and d.failed) for d in ds):
            problems.append(f"record {i}: acknowledgement not settled ok: {ds}")
    return problems


def modulo_problems(ledger: Ledger) -> list[str]:
    """RELEASEd records came back once with delivery count 2, REJECTed and
    ACCEPTed ones never came back."""
    return delivery_problems(ledger, MODULO_RECORDS, expected_modulo)
