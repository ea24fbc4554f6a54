"""Taking records out of a produced batch to move them (docs/extensions.md, rules 1, 4, 5).

Theory of operation
-------------------
Rule 1 (free when unused): ``may_carry_headers`` — a batch whose bytes do
not contain ``kc-`` carries no extension header, and that substring search
(C speed over the raw bytes; compressed batches are decompressed first) is
all a plain batch pays before it is stored as sent. Otherwise
``split(view, header, now_ms, max_delay_ms)`` classifies every record's
headers (``delay.classify``): records to deliver later and cancellations are
taken out, and the batch is rebuilt with the same base offset, ``lastOffsetDelta``, producer id, epoch and
base sequence and fewer records — a batch with holes, as Kafka's log cleaner
leaves them (rule 4), possibly empty. Offsets and idempotent-producer state
therefore stay exactly what they would have been.

A retry topic (``retry``: its policy) takes every record out: each is either
retried in the same partition after its backoff or moved to the dead-letter
topic (``ext.retry.route_headers``), so its batch is always empty — delay
headers are ignored there. Its records are read like delayed ones (their
layout and headers; key and value kept as produced, never decoded).

Each record taken out becomes a move (``ext.moves``: the batch's moves in
columns, no object per record): when (``due_ms``), where (its own partition,
or ``topic``), with which headers — and its key, value and headers as the
producer encoded them, so that the schedule log stores it without decoding
and encoding it again. Records are not decoded at all: their
layout (``record_scan.layouts``) gives their headers and where their parts
are; the batch with holes joins the kept records' bytes
(``record_scan.splice_spans``). A record with ``kc-delay-ms`` alone, the
common case, is classified without ``delay.classify``'s general checks.
A batch is split by the same loop in C (``_native.split_delays``, when
built: ``ext.native``; 20 times cheaper) unless a record has a header name
that is not ASCII, a delay or time that is not plain digits, or anything this
module's loop refuses: that batch, and every error, is this module's loop.

Rule 5: one bad header value raises ``HeaderError`` and nothing of the batch
is stored (the caller answers INVALID_RECORD with the message).

Pure: bytes and ``now_ms`` in, values out.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass

from kcompat.ext import native
from kcompat.ext.delay import (
    DELAY_MAX_MS_DEFAULT,
    DELAY_MS,
    SCHEDULE_ID,
    Cancel,
    Deliver,
    classify,
)
from kcompat.ext.moves import Move, Moves
from kcompat.ext.retry import Retry, RetryPolicy, route_headers
from kcompat.wire.batch import HEADER_SIZE, BatchHeader
from kcompat.wire.compression import CompressionError, decompress
from kcompat.wire.record_scan import each_layout, headers_at, splice_joined, splice_spans
from kcompat.wire.records import (
    RecordError,
    encode_headers,
    rebuild_batch,
)

_MARK = re.compile(b"kc-")  # searches a memoryview in place (``in`` would not)
_FAST_DIGITS = 18  # a kc-delay-ms this short is an int64 whatever its digits
# a header block of kc-delay-ms alone, up to its value's length: one header, its name;
# and one of kc-delay-ms then kc-schedule-id (two headers)
_DELAY_NAME = encode_headers(((DELAY_MS, b""),))[:-1]
_DELAY_ALONE = b"\x02" + _DELAY_NAME
_DELAY_FIRST = b"\x04" + _DELAY_NAME
_VALUE_AT = len(_DELAY_ALONE)  # where the value's length is, from the header count
_ID_NAME = encode_headers(((SCHEDULE_ID, b""),))[:-1]


@dataclass(frozen=True, slots=True)
class Split:
    hole: bytes  # the batch to store in the partition, with holes
    taken: Moves  # the records taken out, in columns (``ext.moves``)
    cancels: tuple[tuple[int, Cancel], ...]  # (offset: its hole, the cancellation)
    topics: frozenset[str] = frozenset()  # the other topics moves go to

    @property
    def moves(self) -> tuple[Move, ...]:
        """The moves one by one (made on each call: for tests and slow paths)."""
        return tuple(self.taken)


def may_carry_headers(view: memoryview | bytes, header: BatchHeader) -> bool:
    """False when no record of the batch can carry a ``kc-`` header."""
    if header.compression == 0:
        return _MARK.search(view, HEADER_SIZE) is not None
    try:
        return _MARK.search(decompress(header.compression, memoryview(view)[HEADER_SIZE:])
                            ) is not None
    except CompressionError:
        return True  # decode_batch reports it


def split(view: memoryview | bytes, header: BatchHeader, now_ms: int,
          max_delay_ms: int = DELAY_MAX_MS_DEFAULT, retry: RetryPolicy | None = None
          ) -> Split | None:
    """The records to move and the cancellations taken out, or None when
    there are none (see the module); the caller has ruled out a plain batch
    with ``may_carry_headers`` (unless ``retry``). Raises ``HeaderError`` or
    ``BatchError``."""
    if retry is not None:
        return _retries(view, header, now_ms, retry)
    payload, base_offset, base_ts, append_time = _opened(view, header)
    if native.MODULE is not None:
        columns = native.MODULE.split_delays(payload, header.records_count, base_offset,
                                             base_ts, append_time, now_ms, max_delay_ms)
        if columns is not None:
            return _natively_split(view, header, columns)
    kept: list[tuple[int, int]] = []
    moves = Moves()
    cancels: list[tuple[int, Cancel]] = []
    # a column each (``ext.moves``): no object per record for the collector to walk
    offsets, stamps, bodies = moves.offsets.append, moves.timestamps.append, moves.bodies.append
    counts, blocks, dues = (moves.header_counts.append, moves.header_bytes.append,
                            moves.dues.append)
    named, names = moves.id_rows.append, moves.id_names.append
    for start, end, ts, delta, kv, hc in each_layout(payload, header.records_count):
        if payload[hc] == 0 and hc + 1 == end:  # no header
            kept.append((start, end))
            continue
        if payload.startswith(_DELAY_ALONE, hc):  # the common case: kc-delay-ms alone
            value, schedule_id = payload[hc + _VALUE_AT + 1:end], None
            if payload[hc + _VALUE_AT] != 2 * len(value):  # its length, zig-zag
                value = b""
        else:
            value, schedule_id = _delay_and_id(payload, hc, end)
        if value and len(value) <= _FAST_DIGITS and value.isdigit():
            delay_ms = int(value)
            if delay_ms > max_delay_ms:
                classify(((DELAY_MS, value),), now_ms, max_delay_ms)  # raises HeaderError
            if delay_ms == 0:
                kept.append((start, end))
                continue
            if schedule_id is not None:
                named(len(moves.offsets))
                names(schedule_id)
            offsets(base_offset + delta)
            stamps(base_ts + ts if append_time is None else append_time)
            bodies(payload[kv:hc])
            counts(1 if schedule_id is None else 2)
            blocks(payload[hc + 1:end])
            dues(now_ms + delay_ms)
            continue
        found, first = headers_at(payload, hc, end)
        asked = classify(found, now_ms, max_delay_ms)
        if asked is None:
            kept.append((start, end))
        elif isinstance(asked, Deliver):
            moves.add(Move(
                base_offset + delta, base_ts + ts if append_time is None else append_time,
                payload[kv:hc], len(found), payload[first:end], asked.due_ms,
                asked.schedule_id))
        else:
            cancels.append((base_offset + delta, asked))
    if not moves and not cancels:
        return None
    return Split(splice_spans(view, header, payload, kept), moves, tuple(cancels))


def _natively_split(view: memoryview | bytes, header: BatchHeader,
                    found: native.SplitColumns) -> Split | None:
    """The ``Split`` of ``_native.split_delays``'s answer (its columns)."""
    (kept, kept_count, offsets, stamps, bodies, counts, blocks, dues, id_rows, id_names,
     cancelled, cancelled_ids) = found
    if not bodies and not cancelled_ids:
        return None
    holes = array("q")
    holes.frombytes(cancelled)
    moves = Moves()
    moves.offsets.frombytes(offsets)
    moves.timestamps.frombytes(stamps)
    moves.header_counts.frombytes(counts)
    moves.dues.frombytes(dues)
    moves.id_rows.frombytes(id_rows)
    moves.bodies, moves.header_bytes, moves.id_names = bodies, blocks, id_names
    return Split(splice_joined(view, header, kept, kept_count), moves,
                 tuple(zip(holes, map(Cancel, cancelled_ids), strict=True)))


def _delay_and_id(payload: bytes, hc: int, end: int) -> tuple[bytes, str | None]:
    """The ``kc-delay-ms`` value and ``kc-schedule-id`` of a record whose
    header block (its count at ``hc``) is exactly those two headers, in that
    order, recognised by their bytes (an id of up to 63 bytes, UTF-8, not
    empty); (b"", None) for any other."""
    if not payload.startswith(_DELAY_FIRST, hc):
        return b"", None
    at = hc + _VALUE_AT
    size = payload[at]
    stop = at + 1 + (size >> 1)
    if size & 1 or not payload.startswith(_ID_NAME, stop):
        return b"", None
    at = stop + len(_ID_NAME)
    schedule_id = payload[at + 1:end]
    if not schedule_id or payload[at] != 2 * len(schedule_id):
        return b"", None
    try:
        return payload[hc + _VALUE_AT + 1:stop], schedule_id.decode("utf-8")
    except UnicodeDecodeError:
        return b"", None



def _opened(view: memoryview | bytes, header: BatchHeader
            ) -> tuple[bytes, int, int, int | None]:
    """A batch's records section decompressed, its base offset and timestamp,
    and the log-append time its records take (None: their own)."""
    try:
        payload = bytes(decompress(header.compression, memoryview(view)[HEADER_SIZE:]))
    except CompressionError as exc:
        raise RecordError(str(exc)) from exc
    append_time = header.max_timestamp if header.is_log_append_time else None
    return payload, header.base_offset, header.base_timestamp, append_time

def _retries(view: memoryview | bytes, header: BatchHeader, now_ms: int,
             policy: RetryPolicy) -> Split:
    """Every record of a retry topic's batch moved: routed from its headers
    (``route_headers``), its key and value kept as produced — nothing is
    decoded but the headers (a per-record cost on the nack path)."""
    payload, base_offset, base_ts, append_time = _opened(view, header)
    moves = Moves(routed=True)
    for _start, end, ts, delta, kv, hc in each_layout(payload, header.records_count):
        found, first = headers_at(payload, hc, end)
        timestamp = base_ts + ts if append_time is None else append_time
        where = route_headers(found, timestamp, policy, now_ms)
        retry = isinstance(where, Retry)
        moves.add(Move(
            base_offset + delta, timestamp, payload[kv:hc], len(found), payload[first:end],
            where.due_ms if isinstance(where, Retry) else now_ms, None, where.headers,
            None if isinstance(where, Retry) else where.topic,
            -1 if isinstance(where, Retry) else where.partition, retry))
    assert moves.routes is not None
    return Split(rebuild_batch(header, []), moves, (),
                 frozenset(topic for _, topic, _, _ in moves.routes if topic is not None))
