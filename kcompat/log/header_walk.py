"""Walking the batch headers of a located log range without reading its records.

Theory of operation
-------------------
A reader that only needs to know which batches a range holds (their offsets,
CRCs, record counts, sizes) — to answer from a cache of work done on them,
or to hand the reading of their bytes to a worker thread — reads each
batch's fixed header only. ``headers`` reads the range a window of
``WINDOW_BYTES`` at a time: small batches are found many to a window, a
large batch costs one small read for its header and is skipped over, so
walking a megabyte of 1 MB batches reads a few kilobytes, not the megabyte.
A batch cut by the end of the range is left out (the caller's range ends
where Fetch semantics cut it). Positional reads only; nothing is cached.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from kcompat.log.store import StoredFile
from kcompat.wire.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, parse_header

WINDOW_BYTES = 16 << 10  # bytes read at once when looking for the next header
# a header's base offset, batch length and last offset delta (bytes 0-12 and 23-27)
_PLACE = struct.Struct(">qi11xi")


def headers(file: StoredFile, position: int, length: int,
            window_bytes: int = WINDOW_BYTES) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch of the ``length`` bytes at
    ``position`` of ``file``, reading windows of ``window_bytes`` (at least a
    header) and never the records of a batch larger than a window."""
    end = position + length
    window = max(window_bytes, HEADER_SIZE)
    buf = b""
    buf_at = position
    while end - position >= HEADER_SIZE:
        off = position - buf_at
        if off + HEADER_SIZE > len(buf):
            buf_at, off = position, 0
            buf = file.pread(min(window, end - position), position)
            if len(buf) < HEADER_SIZE:
                return  # the file is shorter than the range (truncated meanwhile)
        header = parse_header(buf, off)
        if header.size < HEADER_SIZE or position + header.size > end:
            return
        yield position, header
        position += header.size


def find(file: StoredFile, position: int, length: int, offset: int,
         window_bytes: int = WINDOW_BYTES) -> tuple[int, BatchHeader] | None:
    """(position, header) of the first whole batch of the ``length`` bytes at
    ``position`` whose last offset is ``offset`` or more (None if there is
    none), read as ``headers`` reads; a batch passed over is placed by the
    three fields that place it, not parsed whole."""
    end = position + length
    window = max(window_bytes, HEADER_SIZE)
    while end - position >= HEADER_SIZE:
        buf = file.pread(min(window, end - position), position)
        if len(buf) < HEADER_SIZE:
            return None  # the file is shorter than the range (truncated meanwhile)
        off = 0
        while len(buf) - off >= HEADER_SIZE:
            base, batch_length, last_delta = _PLACE.unpack_from(buf, off)
            size = batch_length + LOG_OVERHEAD
            if size < HEADER_SIZE or position + off + size > end:
                return None  # not a batch (a torn tail), or cut by the range
            if base + last_delta >= offset:
                return position + off, parse_header(buf, off)
            off += size
        position += off
    return None
