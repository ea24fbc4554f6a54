"""The ``adds`` op of the schedule log: a produced batch's delayed records, one op per batch.

Theory of operation
-------------------
A produce that takes delayed records out of its batch writes them to the
schedule log (``schedule_log``) in batches of their own. Such a batch's first
record (offset delta 0, no key, no value) carries, as its only header, the
``kc-internal`` op ``adds``, which names the records after it — offset deltas
1..n, each the record to deliver stored whole (key, value, timestamp and
the headers it is delivered with) and without an op of its own:

* one byte ``ADDS_FORMAT`` (a JSON op starts with ``{``), then little-endian
  uint32 n and uint32 m;
* m bytes of JSON: ``op`` ``adds``, the partition ``t``/``p`` the records were
  produced to (the source: the default target, the scope of cancellations
  and of duplicate detection), ``src`` (the producer: id, epoch, base
  sequence), and when any: ``ids`` ([index, kc-schedule-id]), ``c`` (the
  batch's cancellations, [hole, id], applied after the adds), ``ts`` and
  ``ti`` (other targets, and each record's index into [source, *ts]);
* three arrays of n little-endian int64: each record's hole (its offset in
  the source partition), its due time, and where it starts in the batch's
  records (what ``schedule.locate`` takes).

The per-record JSON ``add`` and ``cancel`` ops of older brokers stay
readable (``schedule_log`` applies both). Applying an ``adds`` op reads one
header of one record per batch, whatever its size, and the state machine
receives its records' positions instead of scanning for them.

Pure: bytes in, values out.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from kcompat.ext import native
from kcompat.ext.delay import SCHEDULED_OFFSET
from kcompat.ext.moves import Moves
from kcompat.wire.records import (
    SMALL_VARINTS,
    SMALL_VARINTS_END,
    encode_headers,
    encode_raw_record,
    encode_raw_records,
    frame_records,
    varint_bytes,
)

OP_HEADER = "kc-internal"
ADDS_FORMAT = 1
_HEAD = struct.Struct("<BII")
_NULL_KEY_VALUE = b"\x01\x01"  # zig-zag -1 twice

Target = tuple[str, int]
# a record to schedule, already encoded: its timestamp and what follows its
# offset delta (``records.record_tail``: key, value, header count, headers)
AddParts = tuple[int, bytes]
# records encoded with offset deltas 1..n, their base and max timestamps
Encoded = tuple[list[bytes], int, int]
_SCHEDULED_NAME = encode_headers(((SCHEDULED_OFFSET, b""),))[:-1]  # its name, encoded


def adds_batch(source: Target, src: Sequence[int], parts: Sequence[AddParts],
               holes: Sequence[int], dues: Sequence[int], *, timestamp: int = 0,
               **kw: Any) -> bytes:
    """The schedule-log batch of ``parts`` (the records, in order, with their
    ``holes`` and ``dues``) produced to ``source`` by ``src`` (see the
    module; ``kw``: those of ``adds_batch_of``); ``timestamp``: the op's,
    when there is no record (else the first record's)."""
    return adds_batch_of(source, src, encode_adds(parts, timestamp), holes, dues, **kw)


def encode_adds(parts: Sequence[AddParts], timestamp: int = 0) -> Encoded:
    """``parts`` as ``adds_batch_of`` takes them (``timestamp``: the base
    when there is none)."""
    base_ts = parts[0][0] if parts else timestamp
    return (encode_raw_records(parts, 1, base_ts), base_ts,
            max([base_ts, *(p[0] for p in parts)]))


def delayed_records(moves: Moves, shift: int) -> Encoded:
    """The records of delayed ``moves`` as ``adds_batch_of`` takes them: each
    with its own headers and ``kc-scheduled-offset`` naming its hole (its
    offset in the produced batch plus ``shift``), its key, value and headers
    the bytes its producer encoded. The loop of a produce of delayed records:
    one join per record, or the same loop in C (``_native.delayed_records``)."""
    if not moves:
        return [], 0, 0
    if native.MODULE is not None:  # the same loop in C (``_native.c``)
        found = native.MODULE.delayed_records(moves.offsets, moves.timestamps, moves.bodies,
                                              moves.header_counts, moves.header_bytes, shift)
        if found is not None:
            return found
    small, end = SMALL_VARINTS, SMALL_VARINTS_END
    base_ts = max_ts = moves.timestamps[0]
    out = []
    for delta, (offset, timestamp, body, header_count, header_bytes) in enumerate(zip(
            moves.offsets, moves.timestamps, moves.bodies, moves.header_counts,
            moves.header_bytes, strict=True), 1):
        digits = b"%d" % (offset + shift)
        ts = timestamp - base_ts
        if ts > 0 and timestamp > max_ts:
            max_ts = timestamp
        count = header_count + 1
        rest = b"".join((b"\x00", small[ts] if 0 <= ts < end else varint_bytes(ts),
                         small[delta] if delta < end else varint_bytes(delta), body,
                         small[count] if count < end else varint_bytes(count), header_bytes,
                         _SCHEDULED_NAME, small[len(digits)], digits))
        size = len(rest)
        out.append((small[size] if size < end else varint_bytes(size)) + rest)
    return out, base_ts, max_ts


def adds_batch_of(source: Target, src: Sequence[int], records: Encoded, holes: Sequence[int],
                  dues: Sequence[int], *, ids: Sequence[tuple[int, str]] = (),
                  cancels: Sequence[tuple[int, str]] = (), targets: Sequence[Target] = (),
                  target_of: Sequence[int] = (), producer_id: int = -1,
                  producer_epoch: int = -1, transactional: bool = False) -> bytes:
    """The schedule-log batch of ``records`` (encoded with offset deltas
    1..n from their base timestamp: ``adds_batch``, ``delayed_records``),
    with their ``holes`` and ``dues``, and of ``cancels`` (see the module)."""
    encoded, base_ts, max_ts = records
    doc: dict[str, Any] = {"op": "adds", "t": source[0], "p": source[1], "src": list(src)}
    if ids:
        doc["ids"] = [[i, sid] for i, sid in ids]
    if cancels:
        doc["c"] = [[hole, sid] for hole, sid in cancels]
    if targets:
        doc["ts"] = [[t, p] for t, p in targets]
        doc["ti"] = list(target_of)
    meta = json.dumps(doc, separators=(",", ":")).encode()
    n = len(encoded)
    # the op's size does not depend on the positions it holds
    first_size = len(_op_record(bytes(_HEAD.size + len(meta) + 24 * n)))
    positions = list(accumulate(map(len, encoded[:-1]), initial=first_size))
    op = b"".join((_HEAD.pack(ADDS_FORMAT, n, len(meta)), meta, _int64s(holes),
                   _int64s(dues), _int64s(positions if n else [])))
    first = _op_record(op)
    assert len(first) == first_size
    return frame_records([first, *encoded], base_ts, max_ts, producer_id=producer_id,
                         producer_epoch=producer_epoch, transactional=transactional)


def _op_record(op: bytes) -> bytes:
    return encode_raw_record(0, 0, _NULL_KEY_VALUE, 1, encode_headers(((OP_HEADER, op),)))


def is_adds(value: bytes | memoryview | None) -> bool:
    """Whether a ``kc-internal`` value is an ``adds`` op (not JSON)."""
    return value is not None and len(value) > 0 and value[0] == ADDS_FORMAT


def parse_adds(value: bytes | memoryview) -> dict[str, Any] | None:
    """An ``adds`` op as a document: the JSON part with ``o`` (holes),
    ``due`` and ``pos`` (positions) as arrays; None when malformed."""
    try:
        fmt, n, size = _HEAD.unpack_from(value)
        start = _HEAD.size + size
        doc = json.loads(bytes(value[_HEAD.size:start]))
        if fmt != ADDS_FORMAT or len(value) != start + 24 * n or not isinstance(doc, dict):
            return None
        doc["o"], doc["due"], doc["pos"] = (
            _int64s_from(value[start + 8 * n * k:start + 8 * n * (k + 1)]) for k in range(3))
    except (struct.error, ValueError):
        return None
    return doc if doc.get("op") == "adds" else None


def _int64s(values: Sequence[int]) -> bytes:
    out = array("q", values)
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()


def _int64s_from(data: bytes | memoryview) -> array[int]:
    out = array("q")
    out.frombytes(data)
    if sys.byteorder == "big":
        out.byteswap()
    return out
