"""File work a partition log leaves to a later pass, off the caller's thread.

Theory of operation
-------------------
A ``PartitionLog`` is synchronous and runs on the broker's event loop, where
an fsync or a directory sync may block for tens of milliseconds on a busy
disk (issue 31: rolls and DeleteRecords held the loop up to 93 ms). So the
syncs and unlinks of a roll or a deletion are not done by the call that
causes them but handed out as ``Durable`` objects, whose ``sync`` the owner
runs later in a worker thread (the broker's ``Flusher``); what lives in
memory changes at once, on the log's thread.

* ``RolledSegment``: a segment rolled out of the active place. Its ``.log``
  and index files (the index entries were written at the roll, on the log's
  thread) are synced by the log's next sync pass (``dirty_files``); the
  directory entry of the new active segment is part of that pass too
  (``DirSync``). ``done`` tells the log's clean close which ones a pass has
  not finished yet.
* ``Removal``: the segments a DeleteRecords or retention dropped. Their files
  were renamed to ``<name>.deleted`` on the log's thread (so a segment created
  again at the same base offset meanwhile is never the one unlinked); the
  pass writes the new ``log-start-offset`` first, then unlinks the renamed
  files and syncs the directory once. Recovery removes ``.deleted`` files a
  crash left.

Each ``sync`` touches only what its object holds and reads no state of the
log but its start offset, through ``StartOffsetFile`` (one lock for every
writer of ``log-start-offset``), so it is safe beside the log's thread; a
file the log closed meanwhile (a deleted segment) syncs as a no-op.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from kcompat.log.files import DELETED_SUFFIX, SEGMENT_SUFFIXES, atomic_write
from kcompat.log.segment import LogSegment
from kcompat.log.store import FileStore


class Steps:
    """I/O steps of a change whose state in memory must be complete even when
    one fails (a full disk, EIO): each failure is kept, the first raised by
    ``raise_first`` once the state is whole."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: OSError | None = None

    def run(self, step: Callable[..., object], *args: object) -> None:
        try:
            step(*args)
        except OSError as e:
            self.error = self.error or e

    def raise_first(self) -> None:
        if self.error is not None:
            raise self.error


def sync_dir_if_present(store: FileStore, directory: Path) -> None:
    try:
        store.sync_dir(directory)
    except FileNotFoundError:
        pass  # deleted meanwhile (the topic was deleted)


class DirSync:
    """Directory entries left to the next sync pass: a new log's (its
    directory and files) or a rolled log's new segment."""

    __slots__ = ("store", "dirs")

    def __init__(self, store: FileStore, dirs: tuple[Path, ...]) -> None:
        self.store, self.dirs = store, dirs

    def sync(self) -> None:
        for directory in self.dirs:
            sync_dir_if_present(self.store, directory)


class RolledSegment:
    """A segment rolled out, its files synced by the next pass."""

    __slots__ = ("segment", "done")

    def __init__(self, segment: LogSegment) -> None:
        self.segment = segment
        self.done = False

    def sync(self) -> None:
        self.segment.sync_written()
        self.done = True


class Removal:
    """The new log start, then the unlinks of deleted segments' files."""

    __slots__ = ("store", "directory", "paths", "write_start")

    def __init__(self, store: FileStore, directory: Path, paths: list[Path],
                 write_start: Callable[[], None]) -> None:
        self.store, self.directory, self.paths = store, directory, paths
        self.write_start = write_start

    def sync(self) -> None:
        # the start first; a crash before it may still find the renames made
        # durable by another directory sync: then recovery starts the log at
        # its first segment left, never past a record that was kept
        self.write_start()
        for path in self.paths:
            self.store.remove(path)
        if self.paths:
            sync_dir_if_present(self.store, self.directory)


class StartOffsetFile:
    """``log-start-offset``, written by the log's thread (a truncation, the
    clean close) and by a deferred pass: under one lock, each write the log
    start as it is then (so the last write is never a stale value), and a
    deferred one not once the log is closed (its directory may be gone, or a
    new log's)."""

    __slots__ = ("path", "store", "current", "written", "closed", "lock")

    def __init__(self, path: Path, store: FileStore, current: Callable[[], int],
                 written: int) -> None:
        self.path, self.store, self.current = path, store, current
        self.written = written  # what the file holds (no file: 0)
        self.closed = False
        self.lock = threading.Lock()

    @property
    def behind(self) -> bool:
        return self.current() != self.written

    def write(self, deferred: bool = False) -> None:
        with self.lock:
            if deferred and self.closed:
                return
            offset = self.current()
            if offset != self.written:
                atomic_write(self.path, str(offset).encode(), self.store)
                self.written = offset

    def write_deferred(self) -> None:
        self.write(deferred=True)

    def close(self) -> None:
        with self.lock:  # a deferred write under way ends first
            self.closed = True


def retire(segment: LogSegment, store: FileStore, io: Steps) -> list[Path]:
    """Close a deleted segment and rename its files ``.deleted`` (a failed
    rename leaves a file that recovery or the next deletion finds); the
    renamed paths, to unlink later."""
    io.run(segment.close)
    renamed: list[Path] = []
    for suffix in SEGMENT_SUFFIXES:
        path = segment.path(suffix)
        deleted = path.with_name(path.name + DELETED_SUFFIX)
        try:
            store.rename(path, deleted)
        except FileNotFoundError:
            continue  # (a segment without aborted transactions has no .txnindex)
        except OSError as e:
            io.error = io.error or e
            continue
        renamed.append(deleted)
    return renamed
