"""Record v2 codec: the records *inside* a RecordBatch v2, plus control records.

Theory of operation
-------------------
The broker's hot path never looks inside a batch (see :mod:`kcompat.wire.batch`);
this module is for the places that must: validating compressed producer data,
reading transaction markers, building batches the broker writes itself (control
markers, internal topics) and tests.

After the 61-byte batch header come ``recordsCount`` records, compressed as a
whole with the codec in attribute bits 0-2. Each record is::

    length          varint   (bytes after this field)
    attributes      int8     (unused, 0)
    timestampDelta  varlong  (relative to the batch's baseTimestamp)
    offsetDelta     varint   (relative to the batch's baseOffset)
    keyLength       varint   (-1 = null key)   key bytes
    valueLength     varint   (-1 = null value) value bytes
    headersCount    varint
      headerKeyLength varint, key (UTF-8, never null)
      headerValueLength varint (-1 = null), value bytes

Varints use protobuf's zig-zag encoding (int32 fields up to 5 bytes, varlongs
up to 10). Decoding makes every offset and timestamp absolute; in a
LogAppendTime batch (attribute bit 3) every record's timestamp is the batch's
``maxTimestamp``, the broker's append time. Encoding builds a complete batch the
way the Java producer does: offset deltas 0..n-1, ``baseTimestamp`` = the first
record's timestamp, ``maxTimestamp`` = the largest, CRC32C over bytes [21, end).

A control batch (attribute bit 5) holds one control record. For transaction
markers its key is ``version:int16=0, type:int16`` (0 = ABORT, 1 = COMMIT) and
its value is ``version:int16=0, coordinatorEpoch:int32``.

Any malformation raises :class:`RecordError`, a ``BatchError`` of kind
``"corrupt"``. This module is pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kcompat.wire.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CODEC_ZSTD,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchError,
    BatchHeader,
    compute_crc,
    validate,
)
from kcompat.wire.compression import CompressionError, compress, decompress

Headers = tuple[tuple[str, bytes | None], ...]
# What encode_batch takes per record: (key, value, headers, timestamp ms).
RecordInput = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class RecordError(BatchError):
    """Records inside a batch that cannot be decoded (Kafka: CORRUPT_MESSAGE)."""

    def __init__(self, message: str) -> None:
        super().__init__("corrupt", message)


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with absolute offset and timestamp (ms)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A decoded transaction marker (``control_type`` 0 = ABORT, 1 = COMMIT)."""

    control_type: int
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type == CONTROL_COMMIT

    @property
    def is_abort(self) -> bool:
        return self.control_type == CONTROL_ABORT


# --------------------------------------------------------------------- varints


def encode_varint(value: int) -> bytes:
    """Zig-zag varint/varlong encoding of a signed 64-bit ``value``."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong")
    z = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


SMALL_VARINTS_END = 1 << 13
# the varints of 0 .. SMALL_VARINTS_END - 1 (one or two bytes: the lengths,
# deltas and counts of ordinary records), looked up instead of encoded
SMALL_VARINTS = [bytes((v << 1,)) if v < 0x40 else bytes((v << 1 & 0x7F | 0x80, v >> 6))
                 for v in range(SMALL_VARINTS_END)]


_MID = 1 << 20  # a zig-zag varint of -_MID .. _MID - 1 takes three bytes at most


def varint_bytes(value: int) -> bytes:
    """``encode_varint``, looked up for small non-negative values."""
    if 0 <= value < SMALL_VARINTS_END:
        return SMALL_VARINTS[value]
    return encode_varint(value)


def decode_varint(buf: bytes | memoryview, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """Read a zig-zag varint at ``pos``; returns ``(value, next_pos)``.

    ``max_bytes`` is 5 for Kafka's varint (int32) and 10 for its varlong.
    """
    if pos < len(buf):
        first = buf[pos]
        if first < 0x80:  # one byte: most lengths, deltas and counts
            return (first >> 1) ^ -(first & 1), pos + 1
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise RecordError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            value = (result >> 1) ^ -(result & 1)
            bits = 32 if max_bytes <= 5 else 64
            if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
                raise RecordError(f"varint {value} overflows int{bits}")
            return value, pos
        shift += 7
    raise RecordError(f"varint longer than {max_bytes} bytes")


# --------------------------------------------------------------------- records


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    """One record, including its leading length varint."""
    if not _INT32_MIN <= offset_delta <= _INT32_MAX:
        raise ValueError(f"offset delta {offset_delta} does not fit an int32")
    return encode_raw_records([(timestamp_delta, _tail(key, value, headers))], offset_delta)[0]


def _tail(key: bytes | None, value: bytes | None,
          headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """``record_tail`` of a record given as its key, value and headers."""
    if not headers:
        return encode_key_value(key, value) + b"\x00"
    return record_tail(encode_key_value(key, value), len(headers), encode_headers(headers))


def encode_raw_record(offset_delta: int, timestamp_delta: int, body: bytes,
                      header_count: int, headers: bytes) -> bytes:
    """One record, including its leading length varint, from parts already
    encoded: ``body`` its key and value (each with its length varint) and
    ``headers`` its ``header_count`` headers (without their count)."""
    return encode_raw_records([(timestamp_delta, record_tail(body, header_count, headers))],
                              offset_delta)[0]


def record_tail(body: bytes, header_count: int, headers: bytes) -> bytes:
    """What follows a record's offset delta: its key and value (``body``,
    each with its length varint), its header count and its ``headers``."""
    return b"".join((body, varint_bytes(header_count), headers))


def encode_raw_records(records: Sequence[tuple[int, bytes]], first_offset_delta: int,
                       base_timestamp: int = 0) -> list[bytes]:
    """Records (each with its leading length varint) from their timestamp
    and ``record_tail``, with offset deltas from ``first_offset_delta`` on
    and timestamp deltas from ``base_timestamp``: the loop of a batch whose
    records' keys, values and headers are bytes already."""
    small, end = SMALL_VARINTS, SMALL_VARINTS_END
    out = []
    for delta, (timestamp, tail) in enumerate(records, first_offset_delta):
        ts = timestamp - base_timestamp
        if 0 <= ts < end:
            stamp = small[ts]
        elif -_MID <= ts < _MID:  # three bytes (a minute or so either way), in line
            z = (ts << 1) ^ (ts >> 63)
            stamp = (bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14)) if z >> 14
                     else bytes((z & 0x7F | 0x80, z >> 7)) if z >> 7 else bytes((z,)))
        else:
            stamp = encode_varint(ts)
        rest = b"".join((b"\x00", stamp, small[delta] if delta < end else encode_varint(delta),
                         tail))
        size = len(rest)
        out.append((small[size] if size < end else encode_varint(size)) + rest)
    return out


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """Headers as a record holds them, without their count."""
    out = bytearray()
    small, end = SMALL_VARINTS, SMALL_VARINTS_END  # in line: a DLQ move encodes 14 headers
    for h_key, h_value in headers:
        name = h_key.encode("utf-8")
        size = len(name)
        out += small[size] if size < end else encode_varint(size)
        out += name
        if h_value is None:
            out += b"\x01"  # zig-zag -1
        else:
            size = len(h_value)
            out += small[size] if size < end else encode_varint(size)
            out += h_value
    return bytes(out)


def encode_key_value(key: bytes | None, value: bytes | None) -> bytes:
    """A record's key and value, each with its length varint."""
    out = bytearray()
    _put_bytes(out, key)
    _put_bytes(out, value)
    return bytes(out)


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += b"\x01"  # zig-zag -1
    else:
        size = len(data)
        out += SMALL_VARINTS[size] if size < SMALL_VARINTS_END else encode_varint(size)
        out += data


def _get_bytes(buf: bytes | memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    size, pos = decode_varint(buf, pos)
    if size < 0:
        if size != -1:
            raise RecordError(f"invalid length {size}")
        return None, pos
    if pos + size > end:
        raise RecordError(f"field of {size} bytes overruns its record")
    return bytes(buf[pos : pos + size]), pos + size


def decode_records(
    data: bytes | memoryview,
    count: int,
    *,
    base_offset: int = 0,
    base_timestamp: int = 0,
    log_append_time: int | None = None,
) -> list[Record]:
    """Decode ``count`` records that make up all of ``data`` (uncompressed)."""
    if count < 0:
        raise RecordError(f"negative record count {count}")
    buf = memoryview(data)
    total = len(buf)
    out: list[Record] = []
    pos = 0
    for _ in range(count):
        record, pos = _decode_one(buf, pos, total, base_offset, base_timestamp, log_append_time)
        out.append(record)
    if pos != total:
        raise RecordError(f"{total - pos} bytes left after {count} records")
    return out


def decode_record_at(
    data: bytes | memoryview,
    pos: int,
    *,
    base_offset: int = 0,
    base_timestamp: int = 0,
    log_append_time: int | None = None,
) -> Record:
    """The one record that starts at ``pos`` of the uncompressed records
    ``data`` (a position ``record_scan.scan`` gave: ``RawRecord.start``)."""
    buf = memoryview(data)
    return _decode_one(buf, pos, len(buf), base_offset, base_timestamp, log_append_time)[0]


def _decode_one(buf: memoryview, pos: int, total: int, base_offset: int, base_timestamp: int,
                log_append_time: int | None) -> tuple[Record, int]:
    length, pos = decode_varint(buf, pos)
    end = pos + length
    if length < 1 or end > total:
        raise RecordError(f"record length {length} overruns the batch")
    pos += 1  # attributes: unused
    ts_delta, pos = decode_varint(buf, pos, 10)
    offset_delta, pos = decode_varint(buf, pos)
    key, pos = _get_bytes(buf, pos, end)
    value, pos = _get_bytes(buf, pos, end)
    n_headers, pos = decode_varint(buf, pos)
    if n_headers < 0:
        raise RecordError(f"negative header count {n_headers}")
    headers: list[tuple[str, bytes | None]] = []
    for _h in range(n_headers):
        h_key, pos = _get_bytes(buf, pos, end)
        if h_key is None:
            raise RecordError("null header key")
        h_value, pos = _get_bytes(buf, pos, end)
        try:
            headers.append((h_key.decode("utf-8"), h_value))
        except UnicodeDecodeError as exc:
            raise RecordError(f"header key is not UTF-8: {exc}") from exc
    if pos != end:
        raise RecordError(f"record declared {length} bytes but used {length + pos - end}")
    timestamp = base_timestamp + ts_delta if log_append_time is None else log_append_time
    return Record(base_offset + offset_delta, timestamp, key, value, tuple(headers)), end


# --------------------------------------------------------------------- batches


def decode_batch(batch: bytes | memoryview) -> list[Record]:
    """All records of one complete RecordBatch v2, with absolute offsets/timestamps.

    Checks the header (magic, length, CRC) first. Raises ``BatchError`` (and its
    subclass ``RecordError``) on anything malformed, including bad compression.
    """
    header, data = batch_payload(batch)
    return decode_records(
        data,
        header.records_count,
        base_offset=header.base_offset,
        base_timestamp=header.base_timestamp,
        log_append_time=header.max_timestamp if header.is_log_append_time else None,
    )


def batch_payload(batch: bytes | memoryview) -> tuple[BatchHeader, bytes]:
    """A checked batch's header and its records, uncompressed."""
    header = validate(batch)
    body = memoryview(batch)[HEADER_SIZE:]
    try:
        return header, decompress(header.compression, body)
    except CompressionError as exc:
        raise RecordError(str(exc)) from exc


def encode_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    codec: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = 0,
) -> bytes:
    """Build a complete, CRC-valid RecordBatch v2 (CreateTime) from records.

    ``records`` is a non-empty sequence of ``(key, value, headers, timestamp_ms)``
    where ``headers`` is a sequence of ``(str, bytes | None)``. Record *i* gets
    offset ``base_offset + i``. ``codec`` is a Kafka compression id (0-4); the
    records are compressed with it even when that does not make them smaller.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    if not 0 <= codec <= CODEC_ZSTD:
        raise ValueError(f"unknown compression codec {codec}")
    base_timestamp = records[0][3]
    max_timestamp = max(r[3] for r in records)
    if len(records) - 1 > _INT32_MAX:
        raise ValueError("too many records for one batch")
    body = b"".join(encode_raw_records(
        [(timestamp, _tail(key, value, headers)) for key, value, headers, timestamp in records],
        0, base_timestamp))
    payload = compress(codec, body) if codec else body
    attributes = (
        (codec & ATTR_COMPRESSION_MASK)
        | (ATTR_TRANSACTIONAL if transactional else 0)
        | (ATTR_CONTROL if control else 0)
    )
    return _framed(payload, len(records), base_timestamp, max_timestamp, base_offset=base_offset,
                   attributes=attributes, producer_id=producer_id,
                   producer_epoch=producer_epoch, base_sequence=base_sequence,
                   partition_leader_epoch=partition_leader_epoch)


def frame_records(records: Sequence[bytes], base_timestamp: int, max_timestamp: int, *,
                  producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
                  base_sequence: int = NO_SEQUENCE, transactional: bool = False) -> bytes:
    """A complete, CRC-valid, uncompressed RecordBatch v2 (CreateTime) of
    ``records`` already encoded (``encode_raw_record``: offset deltas
    0..n-1, timestamp deltas from ``base_timestamp``): ``encode_batch``
    for records whose parts are bytes already."""
    if not records:
        raise ValueError("a batch needs at least one record")
    return _framed(b"".join(records), len(records), base_timestamp, max_timestamp,
                   attributes=ATTR_TRANSACTIONAL if transactional else 0,
                   producer_id=producer_id, producer_epoch=producer_epoch,
                   base_sequence=base_sequence)


def _framed(payload: bytes, count: int, base_timestamp: int, max_timestamp: int, *,
            base_offset: int = 0, attributes: int = 0, producer_id: int = NO_PRODUCER_ID,
            producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE,
            partition_leader_epoch: int = 0) -> bytes:
    out = bytearray(HEADER_SIZE + len(payload))
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        HEADER_SIZE + len(payload) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_V2,
        0,  # crc, filled below
        attributes,
        count - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out[HEADER_SIZE:] = payload
    _U32.pack_into(out, 17, compute_crc(memoryview(out)))
    return bytes(out)


def rebuild_batch(header: BatchHeader, records: Sequence[Record]) -> bytes:
    """``header``'s batch holding only ``records`` (a subset of its own, with
    their absolute offsets and timestamps): what Kafka's log cleaner writes.

    The base offset, ``lastOffsetDelta``, timestamps, producer id, epoch, base
    sequence and attributes (compression, transactional, timestamp type) stay;
    the record count, length and CRC follow the records kept. No records
    leaves an empty batch, which keeps its offsets and sequence range.
    """
    body = bytearray()
    for r in records:
        body += encode_record(r.offset - header.base_offset, r.timestamp - header.base_timestamp,
                              r.key, r.value, r.headers)
    codec = header.compression
    payload = compress(codec, bytes(body)) if codec and records else bytes(body)
    attributes = header.attributes if records else header.attributes & ~ATTR_COMPRESSION_MASK
    out = bytearray(HEADER_SIZE + len(payload))
    _HEADER.pack_into(
        out, 0, header.base_offset, HEADER_SIZE + len(payload) - LOG_OVERHEAD,
        header.partition_leader_epoch, MAGIC_V2, 0, attributes, header.last_offset_delta,
        header.base_timestamp, header.max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, len(records),
    )
    out[HEADER_SIZE:] = payload
    _U32.pack_into(out, 17, compute_crc(memoryview(out)))
    return bytes(out)


# ------------------------------------------------------------- control records


def encode_control_record(control_type: int, coordinator_epoch: int) -> tuple[bytes, bytes]:
    """Key and value of a transaction marker (``CONTROL_ABORT``/``CONTROL_COMMIT``)."""
    return _CONTROL_KEY.pack(0, control_type), _CONTROL_VALUE.pack(0, coordinator_epoch)


def decode_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Parse a control record's key and value.

    Newer key/value versions are read by their version-0 prefix, as Kafka does.
    Non-marker control types (e.g. KRaft's LeaderChange, type 2+) keep
    ``coordinator_epoch`` -1, since their value has another schema.
    """
    if key is None or len(key) < _CONTROL_KEY.size:
        raise RecordError("control record key shorter than 4 bytes")
    key_version, control_type = _CONTROL_KEY.unpack_from(key)
    if key_version < 0:
        raise RecordError(f"invalid control record key version {key_version}")
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        return ControlRecord(control_type, -1)
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise RecordError("transaction marker value shorter than 6 bytes")
    _value_version, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    return ControlRecord(control_type, coordinator_epoch)


def encode_marker_batch(
    commit: bool,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A one-record transactional control batch holding a COMMIT or ABORT marker."""
    key, value = encode_control_record(
        CONTROL_COMMIT if commit else CONTROL_ABORT, coordinator_epoch
    )
    return encode_batch(
        [(key, value, (), timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def marker_aborts(batch: bytes | memoryview) -> bool:
    """Whether a control batch is an ABORT marker (False for COMMIT)."""
    records = decode_batch(batch)
    if not records:
        raise RecordError("control batch without a record")
    return decode_control_record(records[0].key, records[0].value).control_type == CONTROL_ABORT
