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
``find`` walks the same way to the batch that holds an offset (a log
look-up, from the offset-index entry before it); both place a batch by the
three fields that do (base offset, length, last offset delta) and parse
only the headers they return. A batch cut by the end of the range is left
out (the caller's range ends where Fetch semantics cut it). Positional reads only; nothing is cached.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from kcompat.log.store import StoredFile
from kcompat.wire.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, parse_header

WINDOW_BYTES = 16 << 10  # bytes read at once when looking for the next header
# a header's base offset, batch length and last offset delta (bytes 0-12 and 23-27)
_PLACE = struct.Struct(">qi11xi")


def _walk(file: StoredFile, position: int, length: int, window_bytes: int,
          offset: int) -> Iterator[tuple[int, bytes, int]]:
    """(position, window, where in it) of each whole batch of the ``length``
    bytes at ``position`` of ``file`` whose last offset is ``offset`` or more,
    reading windows of ``window_bytes`` (at least a header) and never the
    records of a batch larger than a window. A batch is placed by three
    fields, not parsed, and one passed over costs no step of this generator
    (``find`` looks up an offset 40 small batches past an index entry: a
    yield each doubled its time). The walk ends at a header whose length is
    no batch's (a torn tail), at a batch cut by the range, and where the file
    is shorter than the range (truncated meanwhile)."""
    end = position + length
    window = max(window_bytes, HEADER_SIZE)
    while end - position >= HEADER_SIZE:
        buf = file.pread(min(window, end - position), position)
        if len(buf) < HEADER_SIZE:
            return
        off = 0
        while len(buf) - off >= HEADER_SIZE:
            base, batch_length, last_delta = _PLACE.unpack_from(buf, off)
            size = batch_length + LOG_OVERHEAD
            if size < HEADER_SIZE or position + off + size > end:
                return
            if base + last_delta >= offset:
                yield position + off, buf, off
            off += size
        position += off


def headers(file: StoredFile, position: int, length: int,
            window_bytes: int = WINDOW_BYTES) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch of the ``length`` bytes at
    ``position`` of ``file`` (``_walk``)."""
    for at, buf, off in _walk(file, position, length, window_bytes, -1):
        yield at, parse_header(buf, off)


def find(file: StoredFile, position: int, length: int, offset: int,
         window_bytes: int = WINDOW_BYTES) -> tuple[int, BatchHeader] | None:
    """(position, header) of the first whole batch of the ``length`` bytes at
    ``position`` whose last offset is ``offset`` or more, None if there is
    none (``_walk``)."""
    for at, buf, off in _walk(file, position, length, window_bytes, offset):
        return at, parse_header(buf, off)
    return None
