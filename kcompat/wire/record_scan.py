"""Scanning the records of a batch without decoding them, and splicing a subset.

Theory of operation
-------------------
Filtered views and deduplication windows look at every record of a batch
but need only a few of its parts (the headers a filter names, the dedup id,
or the key and value), and keep most records unchanged. ``scan`` walks the
record boundaries (the layout is in ``wire.records``) and returns, per record,
its byte span in the (decompressed) payload plus only what was asked for —
no ``Record`` objects, no absolute offsets, no copies of unwanted parts.
``splice`` builds the batch holding a subset of those records by joining
their raw bytes: every record's offset and timestamp are deltas from the
batch's base offset and base timestamp, which stay, so the kept records
need no re-encoding. The result equals ``records.rebuild_batch`` of the same
records (same header fields, count, length, CRC; recompressed with the
batch's codec, and an empty batch uncompressed), at a fraction of its cost.

Any malformation raises ``RecordError``. Pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kcompat.wire.batch import (
    ATTR_COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
    parse_header,
)
from kcompat.wire.compression import CompressionError, compress, decompress
from kcompat.wire.records import RecordError

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_LENGTH_AT, _CRC_AT, _ATTRIBUTES_AT, _COUNT_AT = 8, 17, 21, 57


@dataclass(slots=True)
class RawRecord:
    start: int  # the record's span in the payload, its length varint included
    end: int
    keyed: bool  # the record has a key (not null)
    key: bytes | None  # only when scanned ``with_body``
    value: bytes | None
    headers: list[tuple[str, bytes | None]]  # only the ``wanted`` names, in order
    offset_delta: int = 0
    tombstone: bool = False  # the value is null


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = buf[pos]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos + 1
        shift += 7
        if shift > 63:
            raise RecordError("varint longer than 10 bytes")


def scan(batch: bytes | memoryview, wanted: frozenset[str] | None = frozenset(),
         with_body: bool = False, with_key: bool = False,
         ) -> tuple[BatchHeader, bytes, list[RawRecord]]:
    """The batch's header, its uncompressed payload and its records (see the
    module); ``wanted`` None keeps every header; ``with_key`` copies the keys
    only (the log cleaner)."""
    header = parse_header(batch)
    try:
        payload = bytes(decompress(header.compression, memoryview(batch)[HEADER_SIZE:]))
    except CompressionError as exc:
        raise RecordError(str(exc)) from exc
    try:
        return header, payload, _records(payload, header.records_count, wanted, with_body,
                                         with_key or with_body)
    except IndexError:
        raise RecordError("a record overruns the batch") from None


def _records(buf: bytes, count: int, wanted: frozenset[str] | None,
             with_body: bool, with_key: bool) -> list[RawRecord]:
    out: list[RawRecord] = []
    pos, total = 0, len(buf)
    varint = _varint
    for _ in range(count):
        length, body = varint(buf, pos)
        end = body + length
        if length < 1 or end > total:
            raise RecordError(f"record length {length} overruns the batch")
        _ts, p = varint(buf, body + 1)
        delta, p = varint(buf, p)
        size, p = varint(buf, p)
        keyed = size >= 0
        key = buf[p:p + size] if with_key and keyed else None
        p += max(size, 0)
        size, p = varint(buf, p)
        tombstone = size < 0
        value = buf[p:p + size] if with_body and size >= 0 else None
        p += max(size, 0)
        count_h, p = varint(buf, p)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(count_h):
            size, p = varint(buf, p)
            if size < 0:
                raise RecordError("null header key")
            raw_name = buf[p:p + size]
            p += size
            size, p = varint(buf, p)
            try:
                name = raw_name.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError(f"header key is not UTF-8: {exc}") from exc
            if wanted is None or name in wanted:
                headers.append((name, buf[p:p + size] if size >= 0 else None))
            p += max(size, 0)
        if p != end:
            raise RecordError(f"record declared {length} bytes but used {length + p - end}")
        out.append(RawRecord(pos, end, keyed, key, value, headers, delta, tombstone))
        pos = end
    if pos != total:
        raise RecordError(f"{total - pos} bytes left after {count} records")
    return out


# a record's layout (``layouts``): start, end, timestamp delta, offset delta,
# where its key begins and where its header count is
Layout = tuple[int, int, int, int, int, int]


def layouts(buf: bytes, count: int) -> list[Layout]:
    """Where the parts of each of the ``count`` records of ``buf`` (a batch's
    uncompressed payload) are: what a caller needs to take some records out
    (``splice_spans``) and copy the others' key, value and headers as they
    are, without decoding them. Record and field lengths are checked
    against the batch; the headers are not read (``headers_at`` reads and
    checks them)."""
    return list(each_layout(buf, count))


def each_layout(buf: bytes, count: int) -> Iterator[Layout]:
    """``layouts`` one record at a time: a caller that is done with each
    before the next holds no tuple per record (a split of many delayed
    records in a worker thread, whose tuples the loop's collections would
    walk meanwhile). The last record's checks, and the batch's, come with
    the last one: read to the end before using what was read. The hot loop
    of a produce of delayed records: one-byte and two-byte varints are read
    in line."""
    pos, total = 0, len(buf)
    varint = _varint
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                length, body = (b >> 1) ^ -(b & 1), pos + 1
            elif buf[pos + 1] < 0x80:
                z = (b & 0x7F) | buf[pos + 1] << 7
                length, body = (z >> 1) ^ -(z & 1), pos + 2
            else:
                length, body = varint(buf, pos)
            end = body + length
            if length < 1 or end > total:
                raise RecordError(f"record length {length} overruns the batch")
            p = body + 1  # attributes: unused
            b = buf[p]
            if b < 0x80:
                ts, p = (b >> 1) ^ -(b & 1), p + 1
            elif buf[p + 1] < 0x80:
                z = (b & 0x7F) | buf[p + 1] << 7
                ts, p = (z >> 1) ^ -(z & 1), p + 2
            else:
                ts, p = varint(buf, p)
            b = buf[p]
            if b < 0x80:
                delta, p = (b >> 1) ^ -(b & 1), p + 1
            elif buf[p + 1] < 0x80:
                z = (b & 0x7F) | buf[p + 1] << 7
                delta, p = (z >> 1) ^ -(z & 1), p + 2
            else:
                delta, p = varint(buf, p)
            kv = p
            b = buf[p]
            if b < 0x80:
                size, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                size, p = varint(buf, p)
            if size > 0:
                p += size
            elif size < -1:
                raise RecordError(f"invalid length {size}")
            b = buf[p]
            if b < 0x80:
                size, p = (b >> 1) ^ -(b & 1), p + 1
            elif buf[p + 1] < 0x80:
                z = (b & 0x7F) | buf[p + 1] << 7
                size, p = (z >> 1) ^ -(z & 1), p + 2
            else:
                size, p = varint(buf, p)
            if size > 0:
                p += size
            elif size < -1:
                raise RecordError(f"invalid length {size}")
            if p >= end:
                raise RecordError("a record's key and value overrun it")
            yield pos, end, ts, delta, kv, p
            pos = end
    except IndexError:
        raise RecordError("a record overruns the batch") from None
    if pos != total:
        raise RecordError(f"{total - pos} bytes left after {count} records")


def headers_at(buf: bytes, pos: int, end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """The headers of the record whose header count is at ``pos`` and which
    ends at ``end`` (``layouts``), and where the first one begins; checked
    to fill the record exactly, names UTF-8."""
    try:
        count, p = _varint(buf, pos)
        first = p
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(count):
            size, p = _varint(buf, p)
            if size < 0:
                raise RecordError("null header key")
            name = buf[p:p + size].decode("utf-8")
            size, p = _varint(buf, p + size)
            if size < -1:
                raise RecordError(f"invalid length {size}")
            headers.append((name, buf[p:p + size] if size >= 0 else None))
            p += max(size, 0)
    except IndexError:
        raise RecordError("a header overruns its record") from None
    except UnicodeDecodeError as exc:
        raise RecordError(f"header key is not UTF-8: {exc}") from exc
    if p != end or count < 0:
        raise RecordError(f"a record's headers end at {p}, the record at {end}")
    return headers, first


def tail_at(buf: bytes, pos: int) -> tuple[int, bytes]:
    """The timestamp delta of the record that starts at ``pos`` of ``buf``
    and its tail: what follows its offset delta (key, value, header count,
    headers; ``records.record_tail``), copied as it is."""
    try:
        length, body = _varint(buf, pos)
        end = body + length
        if length < 1 or end > len(buf):
            raise RecordError(f"record length {length} overruns the batch")
        ts, p = _varint(buf, body + 1)
        _delta, p = _varint(buf, p)
    except IndexError:
        raise RecordError("a record overruns the batch") from None
    if p >= end:
        raise RecordError("a record without key, value or headers")
    return ts, buf[p:end]


def tails_at(buf: bytes, positions: Sequence[int], limits: Sequence[int]
             ) -> tuple[list[int], list[bytes | None]]:
    """``tail_at`` of the records that start at each of ``positions`` of
    ``buf`` and end by the matching one of ``limits`` (where what was read
    of their part of ``buf`` ends), as their timestamp deltas and their
    tails — a tail None for a record that runs past its limit (read in
    part). One loop; varints of one and two bytes read in line."""
    stamps: list[int] = []
    tails: list[bytes | None] = []
    try:
        for pos, limit in zip(positions, limits, strict=True):
            b = buf[pos]  # the record's length
            if b < 0x80:
                length, p = (b >> 1) ^ -(b & 1), pos + 1
            elif buf[pos + 1] < 0x80:
                b = b & 0x7F | buf[pos + 1] << 7
                length, p = (b >> 1) ^ -(b & 1), pos + 2
            else:
                length, p = _varint(buf, pos)
            end = p + length
            if length < 1:
                raise RecordError(f"record length {length} overruns the batch")
            if end > limit:
                stamps.append(0)
                tails.append(None)
                continue
            b = buf[p + 1]  # after the attributes: the timestamp delta
            if b < 0x80:
                ts, p = (b >> 1) ^ -(b & 1), p + 2
            elif buf[p + 2] < 0x80:
                b = b & 0x7F | buf[p + 2] << 7
                ts, p = (b >> 1) ^ -(b & 1), p + 3
            else:
                ts, p = _varint(buf, p + 1)
            b = buf[p]  # the offset delta, skipped
            if b < 0x80:
                p += 1
            elif buf[p + 1] < 0x80:
                p += 2
            else:
                _delta, p = _varint(buf, p)
            if p >= end:
                raise RecordError("a record without key, value or headers")
            stamps.append(ts)
            tails.append(buf[p:end])
    except IndexError:
        raise RecordError("a record overruns the batch") from None
    return stamps, tails


def splice(batch: bytes | memoryview, header: BatchHeader, payload: bytes,
           kept: Sequence[RawRecord]) -> bytes:
    """``batch`` holding only the ``kept`` records of its scanned ``payload``."""
    return splice_spans(batch, header, payload, [(r.start, r.end) for r in kept])


def splice_spans(batch: bytes | memoryview, header: BatchHeader, payload: bytes,
                 kept: Sequence[tuple[int, int]]) -> bytes:
    """``batch`` holding only the records at the ``kept`` spans (start, end)
    of its ``payload`` (``splice``)."""
    return splice_joined(batch, header, b"".join(payload[start:end] for start, end in kept),
                         len(kept))


def splice_joined(batch: bytes | memoryview, header: BatchHeader, body: bytes,
                  count: int) -> bytes:
    """``batch`` holding only ``count`` of its records, whose bytes joined
    (uncompressed) are ``body`` (``splice_spans``)."""
    codec = header.compression
    if codec and count:
        body = compress(codec, body)
    out = bytearray(memoryview(batch)[:HEADER_SIZE])
    out += body
    _I32.pack_into(out, _LENGTH_AT, len(out) - LOG_OVERHEAD)
    _I32.pack_into(out, _COUNT_AT, count)
    if not count:
        _I16.pack_into(out, _ATTRIBUTES_AT, header.attributes & ~ATTR_COMPRESSION_MASK)
    _U32.pack_into(out, _CRC_AT, compute_crc(memoryview(out)))
    return bytes(out)
