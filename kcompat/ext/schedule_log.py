"""The schedule log of delayed records: its records and its state machine.

Theory of operation
-------------------
Delayed records wait in the internal topic ``__kc_schedule`` (RecordBatch v2,
replicated like ``__consumer_offsets``; docs/architecture.md, principle 1, docs/extensions.md, rule 2). A
topic-partition's records always go to the same schedule partition (chosen
by the host with the coordinators' key hash). A record of the log carries an
internal header ``kc-internal`` whose value says what it is — or none, when
the ``adds`` op ahead of it in its batch names it:

* ``adds`` (binary, ``ext.schedule_adds``: how a produce schedules) — the
  records after it in its batch, each a record to move stored whole (key,
  value, timestamp and the headers it is delivered with:
  ``kc-scheduled-offset`` added for a delayed record, the DLQ context for a
  dead letter) and each an entry, with its target, the offset of its hole
  in the partition it was produced to, its due time, optional schedule id
  and where it is in the batch; then the batch's cancellations. It names the
  producer of the batch they came in (``src``: id, epoch, base sequence). A
  retried produce, which the partition answers as a duplicate, is written
  again with the same holes: a record whose producer batch and hole were
  seen is skipped (the last ``PRODUCER_BATCHES`` batches per source and
  producer are kept, as the partition keeps for its duplicate check);
* ``add`` and ``cancel`` (JSON, one record each: as older brokers wrote
  them, still applied alike) — a record to move with its target ``t``/``p``,
  hole ``o`` (in ``s``, when not the target), due time, schedule id and
  ``src``; ``kc-cancel-schedule`` for the target's earliest pending record
  with that id (with its own hole and ``src``, skipped alike);
* ``out`` — the leader starts delivering these due entries (with their due
  times) to the target: applying it fixes which entries (those still pending)
  and their producer
  sequence (``next_seq`` per target), so a leader that fails halfway is
  replaced by one that re-sends exactly the same batch;
* ``done`` — that delivery is committed in the target partition;
* ``drop`` — the target no longer exists; its entries are discarded;
* ``move`` — a pending record copied forward whole, naming its entry ``e``
  and due time: the entry (its identity unchanged) is read from the copy
  from then on — if it is still pending; else the copy is ignored;
* ``snap`` — one part of a snapshot (below).

Snapshots bound the log (the host decides when). ``capture(at)`` copies the
state after the records below ``at``; ``snapshot_batches`` writes it as
batches marked in their header (``SNAPSHOT_EPOCH``): first the small state
(producer sequences, deliveries in flight, open transactions' ops, the
producers' last batches), then the pending entries as int64 cells, 10,000
per record. A machine that applied everything ignores them. The log may
then start at the lowest offset still needed (``snapshot_batches`` says
which: ``at``, or the batch of an older pending record). A machine whose log
starts past what it applied (``fresh_from``: a restart, a follower sent the
leader's log start) skips every batch by its header until a whole snapshot
taken at or after its log start, installs it, and asks the host to
``reread`` the batches from ``at`` up to that snapshot's end — written while
it went out, they are not in it. Every replica then holds what one that
applied the whole history holds: the snapshot is that state at ``at``, and
the rest is the same records applied in the same order.

A transactional produce writes its adds in a transactional batch of the
producer (the schedule partition joins its transaction): they are ``held``
until the transaction's marker reaches the schedule log, applied on commit
and dropped on abort (``end_txn``); a snapshot keeps a held ``adds`` op in
base64, JSON ones as text.

A stored batch is applied from its ops alone (``located_ops``): the first
record's, when it is an ``adds`` op (its records are not scanned), else each
record's ``kc-internal`` header, with where the record is.

Exactly-once movement (rule 3): the delivery batch carries the schedule
partition's internal producer id (``internal_producer_id``, epoch 0) and
its sequence, so the target's idempotence check turns a re-sent batch into
a duplicate. One delivery per target is in flight at a time, and a new
leader finishes the one in flight first. Its leader may hold a delivery's
``done`` back until the next ``out`` of that target (one Raft round for
both): it notes the delivery ``stored`` meanwhile, so its gauges count the
records delivered.

``ScheduleLog`` is the machine: ``apply`` each committed record in log order
on every replica; the leader asks ``due_targets(now_ms)`` where records are
due and ``schedule.due`` which, and finishes ``inflight`` deliveries first.
Pure: no clock, no I/O.
"""

from __future__ import annotations

import base64
import json
import sys
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter, or_, rshift, sub
from typing import Any

from kcompat.ext.schedule import (
    CELLS,
    PROMOTE_CHUNK,
    Pending,
    Schedule,
    ScheduleImage,
    Target,
    locate,
)
from kcompat.ext.schedule_adds import OP_HEADER, is_adds, parse_adds
from kcompat.ext.schedule_cells import GIL_RUN
from kcompat.ext.schedule_image import image_cells

# StoredRecords, delivered_form and take_within (the delivery side of this
# log) live in ``schedule_stored``; callers found them here
from kcompat.ext.schedule_stored import (
    Header,
    RecordInput,
)
from kcompat.ext.schedule_stored import (
    StoredRecords as StoredRecords,
)
from kcompat.ext.schedule_stored import (
    delivered_form as delivered_form,
)
from kcompat.ext.schedule_stored import (
    take_within as take_within,
)
from kcompat.wire import record_scan
from kcompat.wire.batch import HEADER_SIZE, BatchHeader, parse_header
from kcompat.wire.records import (
    Record,
    RecordError,
    decode_batch,
    decode_record_at,
    encode_batch,
    marker_aborts,
)

SCHEDULE_TOPIC = "__kc_schedule"
PRODUCER_BATCHES = 5
MAX_TRACKED_PRODUCERS = 100_000
INTERNAL_PRODUCER_BASE = 1 << 62  # never handed to clients (ids grow from 0)
SEQ_MODULUS = 1 << 31
_OP_ONLY = frozenset({OP_HEADER})
# a snapshot batch: no producer id, this producer epoch (skipped by its header
# alone by a replica rebuilding from a snapshot)
SNAPSHOT_EPOCH = 32_000
SNAPSHOT_CHUNK = 10_000  # entries per snapshot record (a batch each: ~0.5 MB)



def internal_producer_id(schedule_partition: int) -> int:
    return INTERNAL_PRODUCER_BASE + schedule_partition


def _op(doc: dict[str, Any]) -> Header:
    return OP_HEADER, json.dumps(doc, separators=(",", ":")).encode()


def add_record(record: Record, target: Target, due_ms: int, schedule_id: str | None,
               src: tuple[int, int, int], headers: tuple[Header, ...],
               source: Target | None = None) -> RecordInput:
    """A record to deliver to ``target`` at ``due_ms`` with ``headers``;
    ``record.offset`` is its hole in ``source`` (default: the target), where
    producer ``src`` wrote it."""
    doc: dict[str, Any] = {"op": "add", "t": target[0], "p": target[1], "o": record.offset,
                           "due": due_ms, "id": schedule_id, "src": list(src)}
    if source is not None and source != target:
        doc["s"] = list(source)
    return record.key, record.value, (*headers, _op(doc)), record.timestamp


def cancel_record(topic: str, partition: int, hole: int, schedule_id: str,
                  src: tuple[int, int, int], now_ms: int) -> RecordInput:
    doc = {"op": "cancel", "t": topic, "p": partition, "o": hole, "id": schedule_id,
           "src": list(src)}
    return None, None, (_op(doc),), now_ms


def out_record(target: Target, entries: Iterable[Pending | int], now_ms: int) -> RecordInput:
    """Entries due by ``now_ms`` start moving to ``target`` (with their due
    times, ``u``, when given as ``Pending``: replicas take them as they are,
    without promoting what the leader did)."""
    doc: dict[str, Any] = {"op": "out", "t": target[0], "p": target[1], "at": now_ms}
    listed = list(entries)
    if listed and all(map(isinstance, listed, repeat(Pending))):  # C speed, as below
        doc["e"] = list(map(itemgetter(0), listed))  # type: ignore[arg-type]
        doc["u"] = list(map(itemgetter(1), listed))  # type: ignore[arg-type]
    else:
        doc["e"] = [p.entry if isinstance(p, Pending) else p for p in listed]
    return None, None, (_op(doc),), now_ms


def done_record(target: Target, seq: int, now_ms: int) -> RecordInput:
    return None, None, (_op({"op": "done", "t": target[0], "p": target[1], "seq": seq}),), now_ms


def drop_record(target: Target, now_ms: int) -> RecordInput:
    return None, None, (_op({"op": "drop", "t": target[0], "p": target[1]}),), now_ms


def move_record(record: Record, pending: Pending, now_ms: int) -> RecordInput:
    """``pending``'s stored ``record`` copied forward (to the log end), so the
    log start may pass where it was; the entry keeps its identity."""
    target = pending.target or ("", -1)
    doc = {"op": "move", "e": pending.entry, "u": pending.due_ms, "t": target[0],
           "p": target[1], "at": now_ms}
    key, value, headers, timestamp = delivered_form(record)
    return key, value, (*headers, _op(doc)), timestamp


def is_snapshot_batch(header: BatchHeader) -> bool:
    return header.producer_id < 0 and header.producer_epoch == SNAPSHOT_EPOCH


def read_op(record: Record) -> dict[str, Any] | None:
    """The op of a schedule-log record (None: not one of ours)."""
    if not record.headers or record.headers[-1][0] != OP_HEADER:
        return None
    return parse_op(record.headers[-1][1])


def parse_op(value: bytes | None) -> dict[str, Any] | None:
    """The op in a ``kc-internal`` header's value (None: not one)."""
    if is_adds(value):
        assert value is not None
        return parse_adds(value)
    try:
        doc = json.loads(value) if value is not None else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "op" in doc else None


@dataclass(frozen=True, slots=True)
class Delivery:
    """Entries moving to ``target`` as one batch with producer sequence ``seq``."""

    target: Target
    seq: int
    entries: tuple[Pending, ...]


# the host re-applies the log's batches in [start, end) to the machine (after a snapshot)
Reread = Callable[["ScheduleLog", int, int], None]


class ScheduleLog:
    """``fresh_from``: the log starts there, past what this machine applied
    (a restart, or a follower that was sent the leader's log start): nothing
    counts until a whole snapshot taken at or after it, which ``reread`` then
    completes with the log's batches from where it was taken."""

    def __init__(self, fresh_from: int | None = None, reread: Reread | None = None) -> None:
        self.schedule = Schedule()
        self.inflight: dict[Target, Delivery] = {}
        # the leader's own note: deliveries in flight already stored on their target,
        # their ``done`` not committed yet (it waits for the next ``out``): delivered
        # for the gauges (``waiting_by_target``, ``earliest_due_ms``), not replicated
        self.stored: set[Target] = set()
        self.next_seq: dict[Target, int] = {}
        self.pending_by_target: dict[Target, int] = {}
        # (target, producer id) -> its last batches: (epoch, base sequence) -> holes seen
        # producer id -> its open transaction's ops: (offset, op, where)
        self.held: dict[int, list[StoredOp]] = {}
        self._seen: OrderedDict[tuple[Target, int], OrderedDict[tuple[int, int], set[int]]] = (
            OrderedDict())
        self.fresh_from = fresh_from
        self.reread = reread
        self.snapshot_at = -1  # where the last whole snapshot in the log was taken
        self._staging: dict[int, _Staging] = {}  # a fresh machine's snapshots being read

    def __len__(self) -> int:
        return len(self.schedule) + sum(len(d.entries) for d in self.inflight.values())

    # -- replay: every replica, in log order -------------------------------------------------

    def feed(self, batch: memoryview, header: BatchHeader) -> None:
        """One committed batch of the schedule log as stored, whatever it is."""
        if self.fresh_from is not None:  # only a snapshot counts yet (its header says so)
            if is_snapshot_batch(header) and header.records_count:
                for record in decode_batch(batch):
                    self._snapshot_record(record)
        elif header.is_control:
            if header.producer_id >= 0:  # a transaction marker (else a Raft record)
                self.end_txn(header.producer_id, not marker_aborts(batch))
        elif header.is_transactional:
            self.hold_stored(header.producer_id, batch)
        elif header.records_count:
            self.apply_stored(batch)

    def apply_stored(self, batch: bytes | memoryview) -> None:
        """One committed batch of the schedule log, as stored: each entry
        learns where its record is (``StoredRecords`` reads it from there)."""
        for offset, op, where in located_ops(batch):
            self.apply_op(offset, op, where)

    def hold_stored(self, producer_id: int, batch: bytes | memoryview) -> None:
        """A transactional batch: applied if its transaction commits."""
        self.held.setdefault(producer_id, []).extend(located_ops(batch))

    def apply_batch(self, records: Iterable[Record]) -> None:
        """Decoded records of one committed batch (their place unknown)."""
        for record in records:
            self.apply(record)

    def hold(self, producer_id: int, records: Iterable[Record]) -> None:
        """Decoded records of a transactional batch (``hold_stored``)."""
        self.held.setdefault(producer_id, []).extend(
            (r.offset, _op_value(r), -1) for r in records)

    def end_txn(self, producer_id: int, commit: bool) -> None:
        """A transaction marker of ``producer_id`` in the schedule log."""
        held = self.held.pop(producer_id, [])
        if commit:
            for offset, op, where in held:
                self.apply_op(offset, op, where)

    def apply(self, record: Record, where: int = -1) -> None:
        """One committed record of the schedule log (any other is ignored)."""
        if self.fresh_from is not None:
            self._snapshot_record(record)
        else:
            self.apply_op(record.offset, _op_value(record), where)

    def apply_op(self, offset: int, op: bytes | None, where: int = -1) -> None:
        """The op (``kc-internal`` value) of the record at ``offset``."""
        doc = parse_op(op)
        if doc is None or self.fresh_from is not None:
            return
        if doc["op"] == "snap":  # this machine holds that state already
            if doc.get("n") == doc.get("of", 0) - 1 and isinstance(doc.get("a"), int):
                self.snapshot_at = max(self.snapshot_at, doc["a"])
            return
        try:
            if doc["op"] == "adds":
                self._apply_adds(offset, doc, where)
                return
            if doc["op"] in ("add", "cancel") and self._repeated(doc):
                return  # a retried produce the partition answered as a duplicate
            self._apply(offset, doc, where)
        except (KeyError, TypeError, ValueError, IndexError):
            return  # not a record the broker wrote: the log holds it, the schedule ignores it

    def _repeated(self, doc: dict[str, Any]) -> bool:
        holes = self._holes_seen(doc.get("s") or (doc["t"], doc["p"]), doc.get("src"))
        if holes is None:
            return False  # not idempotent: a retry is a new record, as in Kafka
        hole = int(doc.get("o", -1))
        if hole in holes:
            return True
        holes.add(hole)
        return False

    def _holes_seen(self, source: Sequence[Any], src: Sequence[int] | None) -> set[int] | None:
        """The holes already scheduled from the produced batch ``src`` (producer
        id, epoch, base sequence) of ``source``; None for a producer that is
        not idempotent."""
        pid, epoch, seq = src or (-1, -1, -1)
        if pid < 0 or seq < 0:
            return None
        key = ((str(source[0]), int(source[1])), int(pid))
        batches = self._seen.get(key)
        if batches is None:
            batches = self._seen[key] = OrderedDict()
            if len(self._seen) > MAX_TRACKED_PRODUCERS:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(key)
        holes = batches.get((epoch, seq))
        if holes is None:
            holes = batches[(epoch, seq)] = set()
            if len(batches) > PRODUCER_BATCHES:
                batches.popitem(last=False)
        return holes

    def _apply_adds(self, offset: int, doc: dict[str, Any], where: int) -> None:
        """An ``adds`` op at ``offset`` (``ext.schedule_adds``): the records
        after it in its batch, then the batch's cancellations; a hole seen
        before (a retried produce) is skipped, as ``_repeated`` does."""
        source: Target = (str(doc["t"]), int(doc["p"]))
        holes, dues, positions = doc["o"], doc["due"], doc["pos"]
        n = len(holes)
        if len(dues) != n or len(positions) != n:
            raise ValueError("adds op arrays of different lengths")
        targets = [source, *((str(t), int(p)) for t, p in doc.get("ts", ()))]
        target_of = doc.get("ti")
        ids = {int(i): str(sid) for i, sid in doc.get("ids", ())}
        seen = self._holes_seen(source, doc.get("src"))
        if where == -1:
            wheres: Sequence[int] = [-1] * n
        else:  # the i-th record: entry offset + 1 + i, in the op's batch (C speed)
            first = offset + 1 - (offset - (where >> 32))
            wheres = list(map(or_, range(first << 32, (first + n) << 32, 1 << 32), positions))
        if target_of is None and (not seen or seen.isdisjoint(holes)):  # a new batch: empty
            if seen is not None:
                seen.update(holes)
            self._count(source, self.schedule.add_run(offset + 1, dues, source, holes, wheres,
                                                      ids))
        else:
            added: dict[Target, int] = {}
            for i in range(n):
                hole = holes[i]
                if seen is not None:
                    if hole in seen:
                        continue
                    seen.add(hole)
                target = source if target_of is None else targets[target_of[i]]
                if self.schedule.add(offset + 1 + i, dues[i], ids.get(i), target, hole,
                                     wheres[i]):
                    added[target] = added.get(target, 0) + 1
            for target, count in added.items():
                self._count(target, count)
        for hole, sid in doc.get("c", ()):
            if seen is not None:
                if hole in seen:
                    continue
                seen.add(hole)
            if self.schedule.cancel(str(sid), source) is not None:
                self._count(source, -1)

    def _apply(self, offset: int, doc: dict[str, Any], where: int) -> None:
        op = doc["op"]
        target: Target = (str(doc["t"]), int(doc["p"]))
        if op == "add":
            if self.schedule.add(offset, int(doc["due"]), doc.get("id"), target, int(doc["o"]),
                                 where):
                self._count(target, 1)
        elif op == "cancel":
            if self.schedule.cancel(str(doc["id"]), target) is not None:
                self._count(target, -1)
        elif op == "out":
            if target in self.inflight:
                return  # one delivery per target at a time (a stale leader's)
            due = doc.get("u")
            if isinstance(due, list) and len(due) == len(doc["e"]):
                taken = self.schedule.take_all(doc["e"], due)
            else:  # an out record of an older broker: promote what is due, then take
                self.schedule.promote(int(doc["at"]), limit=None)
                taken = [p for p in map(self.schedule.delivered, doc["e"]) if p is not None]
            if taken:
                seq = self.next_seq.get(target, 0)
                self.inflight[target] = Delivery(target, seq, tuple(taken))
                self.next_seq[target] = (seq + len(taken)) % SEQ_MODULUS
                self._count(target, -len(taken))
        elif op == "move":  # ``where`` of the copy, told from its entry
            entry = int(doc["e"])
            if where != -1:
                where = locate(entry, offset - (where >> 32), where & 0xFFFF_FFFF)
            self.schedule.relocate(entry, int(doc["u"]), where)
        elif op == "done":
            found = self.inflight.get(target)
            if found is not None and found.seq == int(doc["seq"]):
                del self.inflight[target]
                self.stored.discard(target)
        elif op == "drop":
            self.inflight.pop(target, None)
            self.stored.discard(target)
            self.schedule.drop_target(target)
            self.pending_by_target.pop(target, None)

    def _count(self, target: Target, delta: int) -> None:
        left = self.pending_by_target.get(target, 0) + delta
        if left > 0:
            self.pending_by_target[target] = left
        else:
            self.pending_by_target.pop(target, None)

    # -- the leader -----------------------------------------------------------------------

    def due_targets(self, now_ms: int, promote_limit: int = PROMOTE_CHUNK,
                    linger_ms: int = 0) -> list[Target]:
        """Targets with records due at ``now_ms`` (for ``linger_ms`` at
        least) and no delivery in flight (``inflight`` is finished first);
        ``schedule.due`` lists them. ``promote_limit``: as
        ``Schedule.due_targets``."""
        return [t for t in self.schedule.due_targets(now_ms, promote_limit, linger_ms)
                if t is not None and t not in self.inflight]

    def next_due_ms(self) -> int | None:
        return self.schedule.next_due_ms()

    def waiting_by_target(self) -> dict[Target, int]:
        """The records not delivered yet per target: pending, or in a
        delivery in flight not yet stored on its target (``stored``)."""
        counts = dict(self.pending_by_target)
        for target, delivery in self.inflight.items():
            if target not in self.stored:
                counts[target] = counts.get(target, 0) + len(delivery.entries)
        return counts

    def earliest_due_ms(self) -> int | None:
        """The earliest due time of what is not delivered yet — in flight and
        not ``stored`` yet (a delivery's entries are earliest first) or pending, as
        ``Schedule.next_due_ms`` knows it: exact, or at most one slot early
        while a large slot is promoted (None: nothing)."""
        earliest = [d.entries[0].due_ms for t, d in self.inflight.items()
                    if d.entries and t not in self.stored]
        due = self.schedule.next_due_ms()
        if due is not None:
            earliest.append(due)
        return min(earliest, default=None)

    # -- snapshots -------------------------------------------------------------------------

    def capture(self, at: int) -> Capture:
        """A copy of the state after the log's records below ``at`` (all this
        machine applied), to write as a snapshot (``snapshot_batches``, off
        the loop). Copies containers only: a few milliseconds per 100k
        pending records."""
        meta = {
            "last": self.schedule.last_entry,
            "next_seq": [[t, p, seq] for (t, p), seq in self.next_seq.items()],
            "inflight": [[t, p, d.seq, [_pending_row(e) for e in d.entries]]
                         for (t, p), d in self.inflight.items()],
            "held": [[pid, [[o, _op_text(op), w] for o, op, w in ops]]
                     for pid, ops in self.held.items()],
            "seen": [[t, p, pid, [[e, q, sorted(holes)] for (e, q), holes in batches.items()]]
                     for ((t, p), pid), batches in self._seen.items()],
        }
        low = min([at, *(p.base for d in self.inflight.values() for p in d.entries),
                   *(_held_base(o, w) for ops in self.held.values() for o, _op, w in ops)])
        return Capture(at, self.schedule.export(), meta, low)

    def _snapshot_record(self, record: Record) -> None:
        """A record read while rebuilding: the chunks of a snapshot taken at
        or after the log start are gathered in order; the last one installs it."""
        doc = read_op(record)
        if doc is None or doc.get("op") != "snap" or self.fresh_from is None:
            return
        try:
            at, n, count = int(doc["a"]), int(doc["n"]), int(doc["of"])
            if at < self.fresh_from:
                return  # taken below the log start: the records after it are gone
            staging = self._staging.get(at)
            if n == 0 and staging is None:
                staging = self._staging[at] = _Staging(count, json.loads(record.value or b""))
            elif staging is None or n != staging.next:
                return  # a copy of a chunk already read (a second writer of the same state)
            else:
                staging.chunk(record.key or b"", json.loads(record.value or b""))
            staging.next += 1
        except (KeyError, TypeError, ValueError) as e:
            raise RecordError(f"unreadable snapshot record at {record.offset}: {e}") from e
        if staging.next == staging.count:
            self._install(at, staging, record.offset)

    def _install(self, at: int, staging: _Staging, end: int) -> None:
        machine = staging.build()
        self.schedule, self.inflight, self.next_seq = (
            machine.schedule, machine.inflight, machine.next_seq)
        self.pending_by_target, self.held, self._seen = (
            machine.pending_by_target, machine.held, machine._seen)
        self.fresh_from, self.snapshot_at = None, at
        self.stored = set()
        self._staging.clear()
        if self.reread is not None:  # what was written meanwhile, on top
            self.reread(self, at, end)

    def listing(self) -> list[tuple[Pending, bool]]:
        """Every scheduled record not delivered yet, earliest due first:
        (entry, in flight?) — a delivery ``stored`` is not listed."""
        rows = [(p, True) for t, d in self.inflight.items() if t not in self.stored
                for p in d.entries]
        rows += [(p, False) for p in self.schedule.pending()]
        return sorted(rows, key=lambda r: (r[0].due_ms, r[0].entry))



StoredOp = tuple[int, bytes | None, int]  # offset, op (kc-internal value), where


def _pending_row(p: Pending) -> list[Any]:
    target = p.target or ("", -1)
    return [p.entry, p.due_ms, p.schedule_id, target[0], target[1], p.offset, p.where]


def _op_text(op: bytes | None) -> str | list[str] | None:
    """A held op as a snapshot keeps it: JSON as text, an ``adds`` op in base64."""
    if op is None:
        return None
    if is_adds(op):
        return ["b64", base64.b64encode(op).decode()]
    return bytes(op).decode("utf-8", "replace")


def _op_value_of(text: str | list[str] | None) -> bytes | None:
    """``_op_text`` read back (a snapshot of an older broker holds text only)."""
    if isinstance(text, list):
        return base64.b64decode(text[1])
    return None if text is None else text.encode()


def _held_base(offset: int, where: int) -> int:
    return offset if where == -1 else offset - (where >> 32)


@dataclass(slots=True)
class Capture:
    """The state of a schedule log after its records below ``at``."""

    at: int
    image: ScheduleImage
    meta: dict[str, Any]
    low: int  # the lowest offset the log must keep for what is in flight or held


def snapshot_batches(capture: Capture, now_ms: int) -> tuple[list[bytes], int]:
    """The batches of a snapshot (one record each, marked ``SNAPSHOT_EPOCH``):
    first the small state (sequences, deliveries in flight, open
    transactions, the producers' last batches), then the pending entries,
    ``SNAPSHOT_CHUNK`` per record (the key: their cells as little-endian
    int64; the value: their schedule ids and targets) — and the lowest
    offset the log must keep: below ``capture.at``, only the batches holding
    a pending record. Pure: a worker thread builds them."""
    cells, ids = image_cells(capture.image)
    targets = [None if t is None else list(t) for t in capture.image.targets]
    per = SNAPSHOT_CHUNK * CELLS
    chunks = [cells[i:i + per] for i in range(0, len(cells), per)]
    count = 1 + len(chunks)
    low = capture.low
    entries, wheres = cells[1::CELLS], cells[4::CELLS]
    for i in range(0, len(entries), GIL_RUN):  # in runs: the GIL changes hands between them
        run, at = entries[i:i + GIL_RUN], wheres[i:i + GIL_RUN]
        if -1 not in at:  # each record's batch: its entry less the distance to it (C speed)
            low = min(low, min(map(sub, run, map(rshift, at, repeat(32)))))
        else:  # some not located (an older broker's records): their entry
            for entry, where in zip(run, at, strict=True):
                low = min(low, entry if where == -1 else entry - (where >> 32))

    def record(n: int, key: bytes | None, value: dict[str, Any]) -> bytes:
        doc = {"op": "snap", "a": capture.at, "n": n, "of": count}
        return encode_batch([(key, json.dumps(value, separators=(",", ":")).encode(),
                              (_op(doc),), now_ms)], producer_epoch=SNAPSHOT_EPOCH)

    out = [record(0, None, capture.meta)]
    for n, chunk in enumerate(chunks, 1):
        entries = chunk[1::CELLS]
        chunk_ids = [[e, ids[e]] for e in entries if e in ids] if ids else []
        out.append(record(n, _little(chunk).tobytes(), {"ids": chunk_ids, "targets": targets}))
    return out, low


def _little(cells: array[int]) -> array[int]:
    if sys.byteorder == "big":
        cells = array("q", cells)
        cells.byteswap()
    return cells


@dataclass(slots=True)
class _Staging:
    """A snapshot being read: its small state, then its entries."""

    count: int
    meta: dict[str, Any]
    next: int = 0
    schedule: Schedule = field(default_factory=Schedule)
    pending: dict[Target, int] = field(default_factory=dict)

    def chunk(self, key: bytes, value: dict[str, Any]) -> None:
        cells = array("q")
        cells.frombytes(key)
        cells = _little(cells)
        targets: list[Target | None] = [None if t is None else (str(t[0]), int(t[1]))
                                         for t in value["targets"]]
        ids = {int(e): str(i) for e, i in value["ids"]}
        self.schedule.load(cells, ids, targets)
        for tid, count in Counter(cells[3::CELLS]).items():  # counted at C speed
            target = targets[tid]
            if target is not None:
                self.pending[target] = self.pending.get(target, 0) + count

    def build(self) -> ScheduleLog:
        meta = self.meta
        machine = ScheduleLog()
        self.schedule.loaded(int(meta["last"]))
        machine.schedule = self.schedule
        machine.pending_by_target = self.pending
        machine.next_seq = {(str(t), int(p)): int(seq) for t, p, seq in meta["next_seq"]}
        for t, p, seq, rows in meta["inflight"]:
            target = (str(t), int(p))
            machine.inflight[target] = Delivery(target, int(seq), tuple(
                Pending(int(e), int(u), i, (str(tt), int(pp)), int(o), int(w))
                for e, u, i, tt, pp, o, w in rows))
        machine.held = {int(pid): [(int(o), _op_value_of(op), int(w)) for o, op, w in ops]
                        for pid, ops in meta["held"]}
        for t, p, pid, batches in meta["seen"]:
            machine._seen[((str(t), int(p)), int(pid))] = OrderedDict(
                ((int(e), int(q)), {int(h) for h in holes}) for e, q, holes in batches)
        return machine


def located_ops(batch: bytes | memoryview) -> list[StoredOp]:
    """The op of each record of a stored schedule-log batch, with its offset
    and where the record is (``schedule.locate``): a scan that copies only
    the ``kc-internal`` header, not the records' keys and values — or, in a
    batch that starts with an ``adds`` op, that op alone (its records have
    none: the op says where they are)."""
    first = _adds_first(batch)
    if first is not None:
        return [first]
    header, _payload, raws = record_scan.scan(batch, _OP_ONLY)
    base = header.base_offset
    return [(base + r.offset_delta, r.headers[-1][1] if r.headers else None,
             locate(base + r.offset_delta, base, r.start)) for r in raws]


def _adds_first(batch: bytes | memoryview) -> StoredOp | None:
    """The ``adds`` op of a batch's first record, if it has one (uncompressed:
    the broker writes its batches so)."""
    header = parse_header(batch)
    if header.compression or header.records_count < 1:
        return None
    payload = memoryview(batch)[HEADER_SIZE:]
    try:
        first = decode_record_at(payload, 0, base_offset=header.base_offset)
    except RecordError:
        return None
    op = _op_value(first)
    if not is_adds(op):
        return None
    return first.offset, op, locate(first.offset, header.base_offset, 0)


def _op_value(record: Record) -> bytes | None:
    """The value of a record's own ``kc-internal`` header (the last one)."""
    if not record.headers or record.headers[-1][0] != OP_HEADER:
        return None
    return record.headers[-1][1]
