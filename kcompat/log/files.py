"""File naming and small durable-write helpers of a partition directory.

Theory of operation
-------------------
A partition directory holds, per segment, ``<base>.log``, ``<base>.index``,
``<base>.timeindex`` and (if it holds abort markers) ``<base>.txnindex`` where ``<base>`` is the segment's base offset padded to 20
digits (Kafka's naming), plus ``<offset>.snapshot`` producer-state snapshots and
three small metadata files: ``log-start-offset``, ``leader-epoch-checkpoint`` and
the ``clean-shutdown`` marker.

Small metadata files are replaced atomically: write ``<name>.tmp``, fsync it,
rename over the old file, fsync the directory. A reader therefore sees either
the old or the new content, never a torn one; stray ``.tmp`` files left by a
crash are deleted by recovery.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

OFFSET_DIGITS = 20
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
TMP_SUFFIX = ".tmp"
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
LOG_START_OFFSET_FILE = "log-start-offset"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def offset_path(directory: Path, offset: int, suffix: str) -> Path:
    """``<directory>/<offset as 20 digits><suffix>``."""
    return directory / f"{offset:0{OFFSET_DIGITS}d}{suffix}"


def offsets_with_suffix(directory: Path, suffix: str) -> list[int]:
    """Sorted offsets of the files named ``<20 digits><suffix>`` in ``directory``."""
    found: list[int] = []
    for entry in directory.iterdir():
        stem = entry.name[: -len(suffix)]
        if entry.name.endswith(suffix) and len(stem) == OFFSET_DIGITS and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably (tmp + fsync + rename + dir fsync)."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        writev_all(fd, [data])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_int_file(path: Path) -> int | None:
    """The integer stored in a small text file, or None if missing/unreadable."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def writev_all(fd: int, parts: Sequence[bytes | bytearray | memoryview]) -> int:
    """``os.writev`` until every byte of ``parts`` is written; returns the total."""
    views = [memoryview(p).cast("B") for p in parts]
    total = remaining = sum(len(v) for v in views)
    while remaining:
        written = os.writev(fd, views)
        if written <= 0:
            raise OSError(f"writev wrote {written} of {remaining} bytes")
        remaining -= written
        views = _drop_prefix(views, written)
    return total


def _drop_prefix(views: list[memoryview], count: int) -> list[memoryview]:
    rest: list[memoryview] = []
    for v in views:
        if count >= len(v):
            count -= len(v)
            continue
        rest.append(v[count:])
        count = 0
    return rest
