"""Reading the schedule log's records back to deliver them.

Theory of operation
-------------------
A pending entry knows where its record's bytes are (``schedule.locate``:
its stored batch, its position there). Due order has nothing to do with log
order (records produced together are due at unrelated times), so
``StoredRecords`` reads a delivery's records by stored batch: its wanted
records sorted by (batch, position) at C speed and cut into *spans* where
the next one is in another batch or more than ``READ_AHEAD`` bytes on — a
run of neighbours due together (a burst with one delay, a backlog) is one
read, a lone record one read of about its own size (twice the longest record
seen, ``READ_AHEAD`` at most; one longer is read again alone). The spans'
bytes are scanned in one loop (``record_scan.tails_at``), so the Python work
of a delivery is a few statements per read and a short loop per record —
the cost follows the records it moves, never the size of the batches they
sit in. A compressed batch (the broker writes none, but
a log may hold one) is read and decompressed whole and kept in a small
cache.

A record is delivered as it was scheduled: key, value, timestamp and the
headers it was stored with, less its own ``kc-internal`` op if it has one
(``delivered_form``). ``tails`` gives them as their stored bytes after the
offset delta, never decoded when they carry no op (the records an ``adds``
op names carry none), and ``delivery_batch`` frames them with the schedule
partition's producer id and sequence.

Pure but for the reads it is handed (``BatchSlice.file.pread``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import add, and_, gt, itemgetter, lshift, or_, rshift, sub
from typing import NamedTuple, Protocol

from kcompat.ext.schedule import Pending, located
from kcompat.ext.schedule_adds import OP_HEADER
from kcompat.wire.batch import HEADER_SIZE, BatchHeader, parse_header
from kcompat.wire.record_scan import tail_at, tails_at
from kcompat.wire.records import (
    Record,
    RecordError,
    batch_payload,
    decode_batch,
    decode_record_at,
    decode_varint,
    encode_headers,
    encode_key_value,
    encode_raw_records,
    frame_records,
    record_tail,
)

Header = tuple[str, bytes | None]
RecordInput = tuple[bytes | None, bytes | None, tuple[Header, ...], int]
Tail = tuple[int, bytes]  # a record's timestamp and ``records.record_tail``
RECORD_OVERHEAD = 24  # bytes a record takes beyond its key, value and headers (about)
_OP_NAME = encode_headers(((OP_HEADER, b""),))[:-1]  # an op header's name, encoded


def delivered_form(record: Record) -> RecordInput:
    """The record as it is appended to its target when due: key, value,
    timestamp and the headers it was scheduled with."""
    headers = tuple(h for h in record.headers if h[0] != OP_HEADER)
    return record.key, record.value, headers, record.timestamp


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


class _Span(NamedTuple):
    """How a stored batch's records are read (``StoredRecords.tails``)."""

    pread: Callable[[int, int], bytes]  # its file's
    position: int  # where its records start in the file
    size: int  # their bytes
    stamp: int  # its base timestamp; -1: compressed or log append time (read alone)


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
        self._spans: dict[int, _Span] = {}  # base offset -> how to read its records
        self._past = self.READ_AHEAD  # bytes read past the start of a span's last record
        self._longest = 0  # bytes of the longest record read (about)
        self._payloads: OrderedDict[int, bytes] = OrderedDict()  # compressed batches
        self._payload_bytes = 0
        self.cache_bytes_max = cache_bytes
        self.reads = 0  # reads of the stored log
        self.bytes_read = 0
        self.decoded = 0  # records decoded

    def delivered(self, entries: Iterable[Pending]) -> list[RecordInput]:
        return [delivered_form(self.record(p)) for p in entries]

    def tails(self, entries: Iterable[Pending]) -> list[Tail]:
        """The records of ``entries`` as they are delivered, as (timestamp,
        ``records.record_tail``): the stored bytes of their key, value and
        headers, not decoded — unless a record carries an op of its own
        (written by an older broker, or copied forward), which is taken off.
        The records of one stored batch are read together: those less than
        ``READ_AHEAD`` bytes apart with one read (see the module)."""
        listed = list(entries)
        out: list[Tail | None] = [None] * len(listed)
        mask = 0xFFFF_FFFF
        # where each record is, as one int: its batch's base offset, then its position
        # (records of one batch sort together; a gap of more than READ_AHEAD cuts a span)
        wheres = list(map(itemgetter(5), listed))
        locs = list(map(or_, map(lshift, map(sub, map(itemgetter(0), listed),
                                             map(rshift, wheres, repeat(32))), repeat(32)),
                        map(and_, wheres, repeat(mask))))  # at C speed
        located: Sequence[int] = range(len(listed))
        if -1 in wheres:
            located = [i for i, where in enumerate(wheres) if where != -1]
            for i, where in enumerate(wheres):
                if where == -1:  # not located (an older broker's record)
                    out[i] = tail_of(delivered_form(self.record(listed[i])))
            if not located:
                return out  # type: ignore[return-value]
        order = sorted(located, key=locs.__getitem__)
        at = [locs[i] for i in order]
        ahead = self.READ_AHEAD
        ends = [*compress(range(1, len(at)), map(gt, map(sub, at[1:], at), repeat(ahead))),
                len(at)]
        starts = [0, *ends[:-1]]
        firsts = [at[k] for k in starts]
        parts: list[bytes] = []  # what each span read, joined to be scanned at once
        stamps: list[int] = []  # each span's base timestamp (-1: its records read alone)
        spans, past = self._spans, self._past
        for first, end in zip(firsts, ends, strict=True):  # a read per span
            span = spans.get(first >> 32) or self._span(first >> 32)
            if span.stamp < 0:  # compressed, or log append time: read alone below
                parts.append(b"")
            else:
                data = span.pread(min((at[end - 1] & mask) + past, span.size) - (first & mask),
                                  span.position + (first & mask))
                parts.append(data)
            stamps.append(span.stamp)
        self.reads += len(parts)
        sizes = list(map(len, parts))
        self.bytes_read += sum(sizes)
        counts = list(map(sub, ends, starts))
        tops = list(accumulate(sizes, initial=0))  # where each span's bytes start, joined
        shifts = chain.from_iterable(map(repeat, map(sub, tops, map(and_, firsts, repeat(mask))),
                                         counts))
        positions = list(map(add, map(and_, at, repeat(mask)), shifts))
        limits = chain.from_iterable(map(repeat, tops[1:], counts))
        joined = b"".join(parts)
        deltas, tails = tails_at(joined, positions, list(limits))
        found: list[Tail] = list(zip(
            map(add, chain.from_iterable(map(repeat, stamps, counts)), deltas),
            tails,  # type: ignore[arg-type]  # a None one is read alone below
            strict=True))
        # read past a span's last start from now on: twice the longest record seen, so a
        # lone record costs its own bytes, not READ_AHEAD (one longer is read again alone)
        longest = max(map(len, filter(None, tails)), default=0) + RECORD_OVERHEAD
        self._longest = max(self._longest, longest)
        self._past = min(max(2 * self._longest, 256), ahead)
        if -1 in stamps or None in tails or _OP_NAME in b"\0".join(filter(None, tails)):
            for k, tail in enumerate(tails):
                if tail is None:  # past what its span read (or not read): read alone
                    found[k] = self._tail_alone(at[k] >> 32, at[k] & mask)
                elif _OP_NAME in tail:  # maybe an op header: decoded, and the op taken off
                    found[k] = self._tail_in(at[k] >> 32, self._header(at[k] >> 32)[0],
                                             joined, positions[k])
        if isinstance(located, range):  # all of them: ``found`` put back in order at C speed
            return [found[k] for k in sorted(located, key=order.__getitem__)]
        for i, one in zip(order, found, strict=True):
            out[i] = one
        return out  # type: ignore[return-value]  # every index was filled

    def _span(self, base: int) -> _Span:
        header, where = self._header(base)
        stamp = -1 if header.compression or header.is_log_append_time else header.base_timestamp
        span = self._spans[base] = _Span(where.file.pread, where.position + HEADER_SIZE,
                                         where.length - HEADER_SIZE, stamp)
        if len(self._spans) > self.HEADERS_KEPT:
            del self._spans[next(iter(self._spans))]
        return span

    def _tail_alone(self, base: int, position: int) -> Tail:
        """The tail of the record at ``position`` of the batch at ``base``:
        read alone (longer than what its span read, or in a compressed
        batch) and its op taken off if it may carry one."""
        header, where = self._header(base)
        if header.compression:
            return self._tail_in(base, header, self._payload(base, where), position)
        return self._tail_in(base, header, self._record_bytes(where, HEADER_SIZE + position), 0)

    def _tail_in(self, base: int, header: BatchHeader, payload: bytes, position: int) -> Tail:
        """The tail of the record at ``position`` of ``payload`` (bytes of the
        batch at ``base``), its op taken off if it may carry one."""
        ts, tail = tail_at(payload, position)
        if _OP_NAME in tail:  # maybe an op header: decoded, and the op taken off
            self.decoded += 1
            return tail_of(delivered_form(decode_record_at(
                payload, position, base_offset=base, base_timestamp=header.base_timestamp,
                log_append_time=header.max_timestamp if header.is_log_append_time else None)))
        return (header.max_timestamp if header.is_log_append_time
                else header.base_timestamp + ts), tail

    def _located(self, pending: Pending) -> tuple[int, BatchHeader, bytes, int]:
        """(base offset, header of its batch, bytes holding its record, where
        the record starts in them) of a located entry: the record's own bytes,
        or a compressed batch's records whole."""
        base, position = located(pending)
        header, where = self._header(base)
        if header.compression:
            return base, header, self._payload(base, where), position
        return base, header, self._record_bytes(where, HEADER_SIZE + position), 0

    def record(self, pending: Pending) -> Record:
        """The stored record of ``pending``."""
        if pending.where == -1:  # not located (not applied from its stored batch)
            where = self._slice_at(pending.entry)
            records = decode_batch(self._pread(where.file, where.length, where.position))
            self.decoded += len(records)
            return next(r for r in records if r.offset == pending.entry)
        base, header, payload, position = self._located(pending)
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


def tails_size(tails: Sequence[Tail]) -> int:
    """What ``tails`` weigh as ``take_tails_within`` counts them (at C speed)."""
    return sum(map(len, map(itemgetter(1), tails))) + RECORD_OVERHEAD * len(tails)


def take_tails_within(tails: Sequence[Tail], bytes_max: int) -> int:
    """``take_within`` of records read as tails (their running total summed
    and searched at C speed)."""
    totals = list(accumulate(map(add, map(len, map(itemgetter(1), tails)),
                                 repeat(RECORD_OVERHEAD))))
    return min(max(bisect_right(totals, bytes_max), 1), len(tails))


def tail_of(record: RecordInput) -> Tail:
    """A record as (timestamp, ``records.record_tail``)."""
    key, value, headers, timestamp = record
    return timestamp, record_tail(encode_key_value(key, value), len(headers),
                                  encode_headers(headers))


def delivery_batch(tails: Sequence[Tail], producer_id: int, base_sequence: int) -> bytes:
    """The batch that delivers ``tails`` (``encode_batch`` of their records)."""
    base = tails[0][0]
    return frame_records(encode_raw_records(tails, 0, base), base, max(map(itemgetter(0), tails)),
                         producer_id=producer_id, producer_epoch=0,
                         base_sequence=base_sequence)


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
