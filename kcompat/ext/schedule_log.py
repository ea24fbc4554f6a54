"""The schedule log of delayed records: its records and its state machine.

Theory of operation
-------------------
Delayed records wait in the internal topic ``__kc_schedule`` (RecordBatch v2,
replicated like ``__consumer_offsets``; DESIGN §1.1, EXTENSIONS rule 2). A
topic-partition's records always go to the same schedule partition (chosen
by the host with the coordinators' key hash). Every record of the log carries one internal header
``kc-internal`` whose JSON value says what it is:

* ``add`` — a record to move, stored whole (key, value, timestamp and the
  headers it is delivered with: ``kc-scheduled-offset`` added for a delayed
  record, the DLQ context for a dead letter) with its target ``t``/``p``, the
  offset ``o`` of its hole in the partition it was produced to (``s``, when
  not the target), its due time and optional schedule id, and the producer
  of the batch it came in (``src``:
  id, epoch, base sequence). A retried produce, which the partition answers
  as a duplicate, is written again with the same holes: a record whose
  producer batch and hole were seen is skipped (the last
  ``PRODUCER_BATCHES`` batches per target and producer are kept, as the
  partition keeps for its duplicate check);
* ``cancel`` — ``kc-cancel-schedule`` for the target's earliest pending
  record with that id (with its own hole and ``src``, skipped alike);
* ``out`` — the leader starts delivering these due entries (with their due
  times) to the target: applying it fixes which entries (those still pending)
  and their producer
  sequence (``next_seq`` per target), so a leader that fails halfway is
  replaced by one that re-sends exactly the same batch;
* ``done`` — that delivery is committed in the target partition;
* ``drop`` — the target no longer exists; its entries are discarded.

A transactional produce writes its adds in a transactional batch of the
producer (the schedule partition joins its transaction): they are ``held``
until the transaction's marker reaches the schedule log, applied on commit
and dropped on abort (``end_txn``).

Exactly-once movement (rule 3): the delivery batch carries the schedule
partition's internal producer id (``internal_producer_id``, epoch 0) and
its sequence, so the target's idempotence check turns a re-sent batch into
a duplicate. One delivery per target is in flight at a time, and a new
leader finishes the one in flight first.

``ScheduleLog`` is the machine: ``apply`` each committed record in log order
on every replica; the leader asks ``due_targets(now_ms)`` where records are
due and ``schedule.due`` which, and finishes ``inflight`` deliveries first.
Pure: no clock, no I/O.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kcompat.ext.schedule import Pending, Schedule, Target, locate, located
from kcompat.wire import record_scan
from kcompat.wire.batch import HEADER_SIZE, BatchHeader, parse_header
from kcompat.wire.records import (
    Record,
    RecordError,
    batch_payload,
    decode_batch,
    decode_record_at,
    decode_varint,
)

SCHEDULE_TOPIC = "__kc_schedule"
OP_HEADER = "kc-internal"
PRODUCER_BATCHES = 5
MAX_TRACKED_PRODUCERS = 100_000
INTERNAL_PRODUCER_BASE = 1 << 62  # never handed to clients (ids grow from 0)
SEQ_MODULUS = 1 << 31
_OP_ONLY = frozenset({OP_HEADER})
RECORD_OVERHEAD = 24  # bytes a record takes beyond its key, value and headers (about)

Header = tuple[str, bytes | None]
RecordInput = tuple[bytes | None, bytes | None, tuple[Header, ...], int]


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
    doc["e"] = [p.entry if isinstance(p, Pending) else p for p in listed]
    if listed and all(isinstance(p, Pending) for p in listed):
        doc["u"] = [p.due_ms for p in listed if isinstance(p, Pending)]
    return None, None, (_op(doc),), now_ms


def done_record(target: Target, seq: int, now_ms: int) -> RecordInput:
    return None, None, (_op({"op": "done", "t": target[0], "p": target[1], "seq": seq}),), now_ms


def drop_record(target: Target, now_ms: int) -> RecordInput:
    return None, None, (_op({"op": "drop", "t": target[0], "p": target[1]}),), now_ms


def read_op(record: Record) -> dict[str, Any] | None:
    """The op of a schedule-log record (None: not one of ours)."""
    if not record.headers or record.headers[-1][0] != OP_HEADER:
        return None
    return parse_op(record.headers[-1][1])


def parse_op(value: bytes | None) -> dict[str, Any] | None:
    """The op in a ``kc-internal`` header's value (None: not one)."""
    try:
        doc = json.loads(value) if value is not None else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "op" in doc else None


def delivered_form(record: Record) -> RecordInput:
    """The record as it is appended to its target when due: key, value,
    timestamp and the headers it was scheduled with."""
    headers = tuple(h for h in record.headers if h[0] != OP_HEADER)
    return record.key, record.value, headers, record.timestamp


@dataclass(frozen=True, slots=True)
class Delivery:
    """Entries moving to ``target`` as one batch with producer sequence ``seq``."""

    target: Target
    seq: int
    entries: tuple[Pending, ...]


class ScheduleLog:
    def __init__(self) -> None:
        self.schedule = Schedule()
        self.inflight: dict[Target, Delivery] = {}
        self.next_seq: dict[Target, int] = {}
        self.pending_by_target: dict[Target, int] = {}
        # (target, producer id) -> its last batches: (epoch, base sequence) -> holes seen
        # producer id -> its open transaction's ops: (offset, op, where)
        self.held: dict[int, list[StoredOp]] = {}
        self._seen: OrderedDict[tuple[Target, int], OrderedDict[tuple[int, int], set[int]]] = (
            OrderedDict())

    def __len__(self) -> int:
        return len(self.schedule) + sum(len(d.entries) for d in self.inflight.values())

    # -- replay: every replica, in log order -------------------------------------------------

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
        self.apply_op(record.offset, _op_value(record), where)

    def apply_op(self, offset: int, op: bytes | None, where: int = -1) -> None:
        """The op (``kc-internal`` value) of the record at ``offset``."""
        doc = parse_op(op)
        if doc is None:
            return
        try:
            if doc["op"] in ("add", "cancel") and self._repeated(doc):
                return  # a retried produce the partition answered as a duplicate
            self._apply(offset, doc, where)
        except (KeyError, TypeError, ValueError, IndexError):
            return  # not a record the broker wrote: the log holds it, the schedule ignores it

    def _repeated(self, doc: dict[str, Any]) -> bool:
        pid, epoch, seq = doc.get("src") or (-1, -1, -1)
        if pid < 0 or seq < 0:
            return False  # not idempotent: a retry is a new record, as in Kafka
        source = doc.get("s") or (doc["t"], doc["p"])
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
        hole = int(doc.get("o", -1))
        if hole in holes:
            return True
        holes.add(hole)
        return False

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
                taking = (self.schedule.take(int(e), int(u)) for e, u in zip(doc["e"], due,
                                                                               strict=True))
            else:  # an out record of an older broker: promote what is due, then take
                self.schedule.promote(int(doc["at"]), limit=None)
                taking = (self.schedule.delivered(e) for e in doc["e"])
            taken = [p for p in taking if p is not None]
            if taken:
                seq = self.next_seq.get(target, 0)
                self.inflight[target] = Delivery(target, seq, tuple(taken))
                self.next_seq[target] = (seq + len(taken)) % SEQ_MODULUS
                self._count(target, -len(taken))
        elif op == "done":
            found = self.inflight.get(target)
            if found is not None and found.seq == int(doc["seq"]):
                del self.inflight[target]
        elif op == "drop":
            self.inflight.pop(target, None)
            self.schedule.drop_target(target)
            self.pending_by_target.pop(target, None)

    def _count(self, target: Target, delta: int) -> None:
        left = self.pending_by_target.get(target, 0) + delta
        if left > 0:
            self.pending_by_target[target] = left
        else:
            self.pending_by_target.pop(target, None)

    # -- the leader -----------------------------------------------------------------------

    def due_targets(self, now_ms: int) -> list[Target]:
        """Targets with records due at ``now_ms`` and no delivery in flight
        (``inflight`` is finished first); ``schedule.due`` lists them."""
        return [t for t in self.schedule.due_targets(now_ms)
                if t is not None and t not in self.inflight]

    def next_due_ms(self) -> int | None:
        return self.schedule.next_due_ms()

    def listing(self) -> list[tuple[Pending, bool]]:
        """Every scheduled record, earliest due first: (entry, in flight?)."""
        rows = [(p, True) for d in self.inflight.values() for p in d.entries]
        rows += [(p, False) for p in self.schedule.pending()]
        return sorted(rows, key=lambda r: (r[0].due_ms, r[0].entry))



StoredOp = tuple[int, bytes | None, int]  # offset, op (kc-internal value), where


def located_ops(batch: bytes | memoryview) -> list[StoredOp]:
    """The op of each record of a stored schedule-log batch, with its offset
    and where the record is (``schedule.locate``): a scan that copies only
    the ``kc-internal`` header, not the records' keys and values."""
    header, _payload, raws = record_scan.scan(batch, _OP_ONLY)
    base = header.base_offset
    return [(base + r.offset_delta, r.headers[-1][1] if r.headers else None,
             locate(base + r.offset_delta, base, r.start)) for r in raws]


def _op_value(record: Record) -> bytes | None:
    """The value of a record's own ``kc-internal`` header (the last one)."""
    if not record.headers or record.headers[-1][0] != OP_HEADER:
        return None
    return record.headers[-1][1]


class BatchFile(Protocol):
    def pread(self, size: int, position: int) -> bytes: ...


class BatchSlice(Protocol):
    """Where a stored batch is: ``length`` bytes at ``position`` of ``file``."""

    @property
    def file(self) -> BatchFile: ...
    @property
    def position(self) -> int: ...
    @property
    def length(self) -> int: ...


class StoredRecords:
    """The records of pending entries, as they are delivered, read from the
    schedule log. Due order has nothing to do with log order (records
    produced together are due at unrelated times), so each located entry is
    read on its own: the header of its stored batch (kept for the last
    ``HEADERS_KEPT`` batches), then its record's bytes alone, and only that
    record is decoded — the cost of a delivery follows the records it moves,
    never the size of the batches they sit in. A compressed batch (the broker
    writes none, but a log may hold one) is read and decompressed whole and
    kept in a small cache. ``reads``, ``bytes_read`` and ``decoded`` count
    the work done."""

    HEADERS_KEPT = 4096
    READ_AHEAD = 4096  # bytes read for a record whose length is not known yet

    def __init__(self, slice_at: Callable[[int], BatchSlice],
                 cache_bytes: int = 16 << 20) -> None:
        self._slice_at = slice_at  # where the stored batch holding an offset is
        self._headers: OrderedDict[int, tuple[BatchHeader, BatchSlice]] = OrderedDict()
        self._payloads: OrderedDict[int, bytes] = OrderedDict()  # compressed batches
        self._payload_bytes = 0
        self.cache_bytes_max = cache_bytes
        self.reads = 0  # reads of the stored log
        self.bytes_read = 0
        self.decoded = 0  # records decoded

    def delivered(self, entries: Iterable[Pending]) -> list[RecordInput]:
        return [delivered_form(self.record(p)) for p in entries]

    def record(self, pending: Pending) -> Record:
        """The stored record of ``pending``."""
        if pending.where < 0:  # not located (not applied from its stored batch)
            where = self._slice_at(pending.entry)
            records = decode_batch(self._pread(where.file, where.length, where.position))
            self.decoded += len(records)
            return next(r for r in records if r.offset == pending.entry)
        base, position = located(pending)
        header, where = self._header(base)
        if header.compression:
            payload = self._payload(base, where)
        else:
            payload = self._record_bytes(where, HEADER_SIZE + position)
            position = 0
        self.decoded += 1
        return decode_record_at(
            payload, position, base_offset=base, base_timestamp=header.base_timestamp,
            log_append_time=header.max_timestamp if header.is_log_append_time else None)

    def _pread(self, file: BatchFile, size: int, position: int) -> bytes:
        self.reads += 1
        self.bytes_read += size
        return file.pread(size, position)

    def _header(self, base: int) -> tuple[BatchHeader, BatchSlice]:
        found = self._headers.get(base)
        if found is not None:
            self._headers.move_to_end(base)
            return found
        where = self._slice_at(base)
        found = parse_header(self._pread(where.file, HEADER_SIZE, where.position)), where
        self._headers[base] = found
        if len(self._headers) > self.HEADERS_KEPT:
            self._headers.popitem(last=False)
        return found

    def _record_bytes(self, where: BatchSlice, start: int) -> bytes:
        """The bytes of the record at ``start`` of an uncompressed batch."""
        left = where.length - start
        if left <= 0:
            raise RecordError("a located record lies past its batch")
        data = self._pread(where.file, min(self.READ_AHEAD, left), where.position + start)
        length, body = decode_varint(data, 0)
        size = body + length
        if size > left:
            raise RecordError(f"record length {length} overruns the batch")
        if size > len(data):
            data += self._pread(where.file, size - len(data), where.position + start + len(data))
        return data[:size]

    def _payload(self, base: int, where: BatchSlice) -> bytes:
        found = self._payloads.get(base)
        if found is not None:
            self._payloads.move_to_end(base)
            return found
        _header, found = batch_payload(self._pread(where.file, where.length, where.position))
        self._payloads[base] = found
        self._payload_bytes += len(found)
        while self._payload_bytes > self.cache_bytes_max and len(self._payloads) > 1:
            self._payload_bytes -= len(self._payloads.popitem(last=False)[1])
        return found


def take_within(records: Sequence[RecordInput], bytes_max: int) -> int:
    """How many of ``records`` (at least one) fit ``bytes_max``: a delivery
    batch stays an ordinary batch in size."""
    total = 0
    for n, (key, value, headers, _ts) in enumerate(records):
        total += (len(key or b"") + len(value or b"") + RECORD_OVERHEAD
                  + sum(len(k) + len(v or b"") for k, v in headers))
        if total > bytes_max and n > 0:
            return n
    return len(records)
