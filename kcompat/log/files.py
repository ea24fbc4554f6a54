"""File naming and small durable-write helpers of a partition directory.

Theory of operation
-------------------
A partition directory holds, per segment, ``<base>.log``, ``<base>.index``,
``<base>.timeindex`` and (if it holds abort markers) ``<base>.txnindex`` where ``<base>`` is the segment's base offset padded to 20
digits (Kafka's naming), plus ``<offset>.snapshot`` producer-state snapshots and
three small metadata files: ``log-start-offset``, ``leader-epoch-checkpoint`` and
the ``clean-shutdown`` marker.

Small metadata files are replaced atomically: write ``<name>.tmp``, sync it,
rename over the old file, sync the directory (through the ``store``). A reader therefore sees either
the old or the new content, never a torn one; stray ``.tmp`` files left by a
crash are deleted by recovery, as are ``<name>.deleted`` files: a deleted
segment's, renamed at once and unlinked later off the event loop.
"""

from __future__ import annotations

from pathlib import Path

from kcompat.log.store import OS_STORE, FileStore

OFFSET_DIGITS = 20
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
TMP_SUFFIX = ".tmp"
DELETED_SUFFIX = ".deleted"  # a deleted segment's file, until unlinked (``deferred_io``)
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
LOG_START_OFFSET_FILE = "log-start-offset"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def offset_path(directory: Path, offset: int, suffix: str) -> Path:
    """``<directory>/<offset as 20 digits><suffix>``."""
    return directory / f"{offset:0{OFFSET_DIGITS}d}{suffix}"


def offsets_with_suffix(directory: Path, suffix: str, store: FileStore = OS_STORE) -> list[int]:
    """Sorted offsets of the files named ``<20 digits><suffix>`` in ``directory``."""
    found: list[int] = []
    for name in store.names(directory):
        stem = name[: -len(suffix)]
        if name.endswith(suffix) and len(stem) == OFFSET_DIGITS and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def atomic_write(path: Path, data: bytes, store: FileStore = OS_STORE) -> None:
    """Replace ``path`` with ``data`` durably (tmp + sync + rename + directory sync)."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    f = store.open(tmp, truncate=True)
    try:
        f.append([data])
        f.sync()
    finally:
        f.close()
    store.rename(tmp, path)
    store.sync_dir(path.parent)


def read_int_file(path: Path, store: FileStore = OS_STORE) -> int | None:
    """The integer stored in a small text file, or None if missing/unreadable."""
    try:
        return int(store.read(path).decode().strip())
    except (OSError, ValueError):
        return None
