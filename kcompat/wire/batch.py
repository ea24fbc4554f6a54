"""RecordBatch v2 (magic 2) header view — the unit of the batch-level hot path.

Theory of operation
-------------------
Every log in kcompat stores Kafka RecordBatch v2 bytes exactly as a client sent
them. The broker never decodes individual records on the hot path: it reads the
fixed 61-byte header, checks the CRC32C (which covers everything from the
``attributes`` field to the end of the batch), and rewrites only the two fields
that lie *outside* the CRC: ``baseOffset`` and ``partitionLeaderEpoch``.

Header layout (big-endian), byte offsets::

    0  baseOffset            int64     -- outside CRC
    8  batchLength           int32     (bytes after this field)
    12 partitionLeaderEpoch  int32     -- outside CRC
    16 magic                 int8      (must be 2)
    17 crc                   uint32    CRC32C of bytes [21, end)
    21 attributes            int16     bits 0-2 codec, 3 timestamp type,
                                       4 transactional, 5 control
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records...

This module is pure: it works on ``bytes``/``memoryview`` and returns values.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c as _crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
MAGIC_V2 = 2

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # 1 = LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


class BatchError(ValueError):
    """A batch that cannot be stored; ``kind`` names the Kafka error to answer."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "corrupt" | "invalid"


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in a log."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    def placed(self, base_offset: int, partition_leader_epoch: int) -> BatchHeader:
        """This header at ``base_offset``, stamped with ``partition_leader_epoch``
        (as the log writes it). Made field by field: ``dataclasses.replace``
        takes twice as long (4 us against 2), and a produce request makes two."""
        return BatchHeader(base_offset, self.batch_length, partition_leader_epoch, self.magic,
                           self.crc, self.attributes, self.last_offset_delta,
                           self.base_timestamp, self.max_timestamp, self.producer_id,
                           self.producer_epoch, self.base_sequence, self.records_count)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Read the fixed header at ``pos``; the caller ensures 61 bytes are there."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def batch_length_at(buf: bytes | memoryview, pos: int) -> int:
    """Total size of the batch starting at ``pos`` (needs 12 bytes)."""
    return int(_I32.unpack_from(buf, pos + 8)[0]) + LOG_OVERHEAD


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    return int(_crc32c.crc32c(memoryview(batch)[21:]))


def validate(batch: bytes | memoryview) -> BatchHeader:
    """Check one complete batch as received from a producer.

    Raises BatchError("corrupt", ...) for a CRC or framing problem and
    BatchError("invalid", ...) for a well-formed batch Kafka would refuse.
    """
    if len(batch) < HEADER_SIZE:
        raise BatchError("corrupt", f"batch of {len(batch)} bytes is shorter than a header")
    header = parse_header(batch)
    if header.magic > MAGIC_V2:  # a magic no format has (Kafka: CORRUPT_MESSAGE)
        raise BatchError("corrupt", f"unknown magic {header.magic}")
    if header.magic != MAGIC_V2:
        raise BatchError("invalid", f"magic {header.magic} is not supported (only v2)")
    if header.size != len(batch):
        raise BatchError("corrupt", f"batchLength {header.batch_length} disagrees with size")
    if compute_crc(batch) != header.crc:
        raise BatchError("corrupt", "CRC32C mismatch")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise BatchError("invalid", "negative lastOffsetDelta or record count")
    if header.compression > CODEC_ZSTD:  # Kafka fails on it: UNKNOWN_SERVER_ERROR
        raise BatchError("unknown", f"unknown compression type id: {header.compression}")
    return header


def split_batches(records: bytes | memoryview) -> list[memoryview]:
    """Cut a records field into complete batches; a partial tail is an error."""
    view = memoryview(records)
    out: list[memoryview] = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < LOG_OVERHEAD:
            raise BatchError("corrupt", "truncated batch header")
        size = batch_length_at(view, pos)
        if size < HEADER_SIZE or pos + size > len(view):
            raise BatchError("corrupt", "truncated or undersized batch")
        out.append(view[pos : pos + size])
        pos += size
    return out


def iter_headers(buf: bytes | memoryview, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch in ``buf`` from ``pos``."""
    end = len(buf)
    while end - pos >= HEADER_SIZE:
        size = batch_length_at(buf, pos)
        if size < HEADER_SIZE or pos + size > end:
            return
        yield pos, parse_header(buf, pos)
        pos += size


def offset_field(base_offset: int) -> bytes:
    return _I64.pack(base_offset)


def epoch_field(leader_epoch: int) -> bytes:
    return _I32.pack(leader_epoch)


def with_create_time(batch: bytes | memoryview) -> bytearray:
    """Copy of ``batch`` with the timestamp type bit cleared (CreateTime), CRC
    recomputed: a producer's batch on a CreateTime topic is stored as that."""
    out = bytearray(batch)
    attrs = struct.unpack_from(">h", out, 21)[0] & ~ATTR_TIMESTAMP_TYPE
    struct.pack_into(">h", out, 21, attrs)
    _U32.pack_into(out, 17, compute_crc(out))
    return out


def with_log_append_time(batch: bytes | memoryview, now_ms: int) -> bytearray:
    """Copy of ``batch`` stamped with LogAppendTime (timestamp type bit and
    maxTimestamp set, CRC recomputed) — the one header rewrite inside the CRC."""
    out = bytearray(batch)
    attrs = struct.unpack_from(">h", out, 21)[0] | ATTR_TIMESTAMP_TYPE
    struct.pack_into(">h", out, 21, attrs)
    struct.pack_into(">q", out, 35, now_ms)
    _U32.pack_into(out, 17, compute_crc(out))
    return out
