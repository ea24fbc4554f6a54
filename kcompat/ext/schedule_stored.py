"""Reading the schedule log's records back to deliver them.

Theory of operation
-------------------
A pending entry knows where its record's bytes are (``schedule.locate``:
its stored batch, its position there). Due order has nothing to do with log
order (records produced together are due at unrelated times), so
``StoredRecords`` reads a delivery's records by stored batch: the header of
the batch (kept for the last ``HEADERS_KEPT`` batches), then its wanted
records in position order, those less than ``READ_AHEAD`` bytes apart with
one read (a run of neighbours due together: a burst with one delay, a
backlog), one alone otherwise — the cost of a delivery follows the records
it moves, never the size of the batches they sit in, and the bytes read stay
within ``READ_AHEAD`` per record (one longer than what its run read is read
again, alone). A compressed batch (the broker writes none, but
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

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from kcompat.ext.schedule import Pending, located
from kcompat.ext.schedule_adds import OP_HEADER
from kcompat.wire.batch import HEADER_SIZE, BatchHeader, parse_header
from kcompat.wire.record_scan import tail_at
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

    def tails(self, entries: Iterable[Pending]) -> list[Tail]:
        """The records of ``entries`` as they are delivered, as (timestamp,
        ``records.record_tail``): the stored bytes of their key, value and
        headers, not decoded — unless a record carries an op of its own
        (written by an older broker, or copied forward), which is taken off.
        The records of one stored batch are read together: those less than
        ``READ_AHEAD`` bytes apart with one read (``_spans``)."""
        listed = list(entries)
        out: list[Tail | None] = [None] * len(listed)
        by_batch: dict[int, list[tuple[int, int]]] = {}  # base -> (position, index)
        for i, pending in enumerate(listed):
            if pending.where == -1:
                out[i] = tail_of(delivered_form(self.record(pending)))
            else:
                base, position = located(pending)
                found = by_batch.get(base)
                if found is None:
                    by_batch[base] = [(position, i)]
                else:
                    found.append((position, i))
        for base, wanted in by_batch.items():
            header, where = self._header(base)
            if header.compression:
                payload = self._payload(base, where)
                for position, i in wanted:
                    out[i] = self._tail_in(base, header, payload, position)
                continue
            wanted.sort()
            for span in _spans(wanted, self.READ_AHEAD):
                first = HEADER_SIZE + span[0][0]
                size = min(HEADER_SIZE + span[-1][0] + self.READ_AHEAD, where.length) - first
                if size <= 0:
                    raise RecordError("a located record lies past its batch")
                data = self._pread(where.file, size, where.position + first)
                for position, i in span:
                    try:
                        out[i] = self._tail_in(base, header, data, HEADER_SIZE + position - first)
                    except RecordError:  # longer than what was read: read it alone
                        out[i] = self._tail_in(
                            base, header, self._record_bytes(where, HEADER_SIZE + position), 0)
        return out  # type: ignore[return-value]  # every index was filled

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


def _spans(wanted: list[tuple[int, int]], gap_max: int) -> list[list[tuple[int, int]]]:
    """Sorted (position, index) pairs cut where the next position is more
    than ``gap_max`` bytes on: each part is read at once."""
    spans = [[wanted[0]]]
    for item in wanted[1:]:
        if item[0] - spans[-1][-1][0] > gap_max:
            spans.append([item])
        else:
            spans[-1].append(item)
    return spans


def take_tails_within(tails: Sequence[Tail], bytes_max: int) -> int:
    """``take_within`` of records read as tails."""
    total = 0
    for n, (_ts, tail) in enumerate(tails):
        total += len(tail) + RECORD_OVERHEAD
        if total > bytes_max and n > 0:
            return n
    return len(tails)


def tail_of(record: RecordInput) -> Tail:
    """A record as (timestamp, ``records.record_tail``)."""
    key, value, headers, timestamp = record
    return timestamp, record_tail(encode_key_value(key, value), len(headers),
                                  encode_headers(headers))


def delivery_batch(tails: Sequence[Tail], producer_id: int, base_sequence: int) -> bytes:
    """The batch that delivers ``tails`` (``encode_batch`` of their records)."""
    base = tails[0][0]
    return frame_records(encode_raw_records(tails, 0, base), base, max(t for t, _ in tails),
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
