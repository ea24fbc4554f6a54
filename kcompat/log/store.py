"""The file store under the log: the only place ``kcompat.log`` touches the disk.

Theory of operation
-------------------
Segments, indexes, snapshots and small metadata files are written through a
``FileStore`` and the ``StoredFile`` handles it opens. The interface is what
an append-only log needs and nothing more: open (create or truncate) a file
for appending, append with one gathered write, read at a position, truncate,
sync; and on the namespace: read a whole small file, list, remove, rename,
make a directory, sync a directory.

The rules it encodes are POSIX's (and Kafka's assumptions about them): an
appended byte is durable only after ``sync`` of its file; a created, renamed
or removed name only after ``sync_dir`` of its directory. ``atomic_write``
(``files``) builds the tmp + sync + rename + directory sync protocol from them.

``OsFileStore`` (here) is the real implementation over ``os``: appends use
``O_APPEND`` and ``writev``, reads ``pread``, so no file pointer moves. The
in-memory store of the simulator (``kcompat.testing.memory_store``) follows
the same rules and, when told to crash, keeps only what they promise.
"""

from __future__ import annotations

import os
import resource
import shutil
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

Buffer = bytes | bytearray | memoryview


class Durable(Protocol):
    """Something a sync pass makes durable: a file, a directory entry, a pending write."""

    def sync(self) -> None: ...


class StoredFile(Protocol):
    """An open file, written only at its end."""

    def append(self, parts: Sequence[Buffer]) -> int:
        """Write every byte of ``parts`` at the end; returns how many."""

    def pread(self, size: int, position: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (fewer at the end of the file)."""

    def size(self) -> int: ...

    def truncate(self, size: int) -> None: ...

    def sync(self) -> None:
        """Make every byte written so far durable (no-op once closed)."""

    def mtime_ms(self) -> int: ...

    def close(self) -> None: ...


class FileStore(Protocol):
    # syncs block the calling thread for real (the broker runs them in a worker thread)
    blocking: bool

    def open(self, path: Path, truncate: bool = False) -> StoredFile:
        """Open ``path`` for appending and reading, creating it if missing."""

    def read(self, path: Path) -> bytes:
        """The whole content of a small file; OSError (FileNotFoundError) if absent."""

    def exists(self, path: Path) -> bool: ...

    def names(self, directory: Path) -> list[str]:
        """The names in ``directory`` (OSError if it does not exist)."""

    def make_dirs(self, directory: Path) -> bool:
        """Create ``directory`` and its parents; True if it did not exist."""

    def remove(self, path: Path) -> None:
        """Remove a file; nothing if it does not exist."""

    def remove_tree(self, directory: Path) -> None: ...

    def rename(self, src: Path, dst: Path) -> None:
        """Rename, replacing ``dst`` if it exists."""

    def sync_dir(self, directory: Path) -> None: ...


_APPEND_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


class OsFile:
    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def append(self, parts: Sequence[Buffer]) -> int:
        views = [memoryview(p).cast("B") for p in parts]
        total = remaining = sum(len(v) for v in views)
        while remaining:
            written = os.writev(self.fd, views)
            if written <= 0:
                raise OSError(f"writev wrote {written} of {remaining} bytes")
            remaining -= written
            views = _drop_prefix(views, written)
        return total

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self.fd, size, position)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def sync(self) -> None:
        fd = self.fd
        if fd < 0:
            return
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno != 9:  # EBADF: closed meanwhile (its data was synced by the close)
                raise

    def mtime_ms(self) -> int:
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class OsFileStore:
    """The real disk."""

    blocking = True

    def open(self, path: Path, truncate: bool = False) -> OsFile:
        return OsFile(os.open(path, _APPEND_FLAGS | (os.O_TRUNC if truncate else 0), 0o644))

    def read(self, path: Path) -> bytes:
        return Path(path).read_bytes()

    def exists(self, path: Path) -> bool:
        return os.path.exists(path)

    def names(self, directory: Path) -> list[str]:
        return os.listdir(directory)

    def make_dirs(self, directory: Path) -> bool:
        if os.path.isdir(directory):
            return False
        os.makedirs(directory, exist_ok=True)
        return True

    def remove(self, path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def remove_tree(self, directory: Path) -> None:
        shutil.rmtree(directory, ignore_errors=True)

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def sync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS_STORE = OsFileStore()


def _drop_prefix(views: list[memoryview], count: int) -> list[memoryview]:
    rest: list[memoryview] = []
    for v in views:
        if count >= len(v):
            count -= len(v)
            continue
        rest.append(v[count:])
        count = 0
    return rest


class FdCache:
    """Keeps at most ``limit`` of the files it manages open: the least recently
    used one is closed, and reopened by path at its next use. Index files
    need their descriptor only to append a few bytes now and then (their
    entries live in memory), so thousands of partitions do not cost three
    descriptors each (Kafka maps its indexes and keeps no descriptor either).
    One lock covers every operation on a managed file and every eviction, so
    a descriptor is never closed under a writer in another thread; a sync
    takes a duplicate of the descriptor under it and fsyncs outside it."""

    def __init__(self, limit: int) -> None:
        self.limit = max(2, limit)
        self.lock = threading.Lock()
        self._open: OrderedDict[int, CachedFile] = OrderedDict()

    def use(self, f: CachedFile) -> None:
        """``f`` is open and used now (call with the lock held)."""
        self._open[id(f)] = f
        self._open.move_to_end(id(f))
        while len(self._open) > self.limit:
            _key, oldest = self._open.popitem(last=False)
            oldest.evict()

    def forget(self, f: CachedFile) -> None:
        self._open.pop(id(f), None)


def _default_fd_limit() -> int:
    """A quarter of the process's descriptor limit for index files (the
    segments' ``.log`` files, sockets and the rest need the others)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 4096 if soft == resource.RLIM_INFINITY else max(64, soft // 4)


FD_CACHE = FdCache(_default_fd_limit())


class CachedFile:
    """A ``StoredFile`` whose descriptor ``FD_CACHE`` may close between uses
    (reopened by path; never renamed while open, which index files are not).
    A sync after an eviction syncs through a new descriptor: on Linux fsync
    makes the file's data durable whichever descriptor wrote it."""

    __slots__ = ("path", "_store", "_cache", "_file", "_closed")

    def __init__(self, path: Path, store: OsFileStore, truncate: bool = False,
                 cache: FdCache | None = None) -> None:
        self.path = path
        self._store = store
        self._cache = cache or FD_CACHE
        self._closed = False
        with self._cache.lock:
            self._file: OsFile | None = store.open(path, truncate=truncate)
            self._cache.use(self)

    def _get(self) -> OsFile:
        if self._closed:
            raise ValueError(f"{self.path} is closed")
        if self._file is None:
            self._file = self._store.open(self.path)
        self._cache.use(self)
        return self._file

    def evict(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def append(self, parts: Sequence[Buffer]) -> int:
        with self._cache.lock:
            return self._get().append(parts)

    def pread(self, size: int, position: int) -> bytes:
        with self._cache.lock:
            return self._get().pread(size, position)

    def size(self) -> int:
        with self._cache.lock:
            return self._get().size()

    def truncate(self, size: int) -> None:
        with self._cache.lock:
            self._get().truncate(size)

    def sync(self) -> None:
        """fsync through a descriptor of its own, outside the cache's lock:
        the lock is every index file's, and the event loop takes it to append
        an index entry, so a sync pass's worker threads must not hold it for
        an fsync (tens of milliseconds on a busy disk, several in a parallel
        pass). A duplicate of the open descriptor (eviction may close the
        original meanwhile), else the file opened anew; no-op once closed."""
        with self._cache.lock:
            if self._closed:
                return
            fd = os.dup(self._file.fd) if self._file is not None else -1
        if fd < 0:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return  # deleted meanwhile, as a closed file
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mtime_ms(self) -> int:
        with self._cache.lock:
            return self._get().mtime_ms()

    def close(self) -> None:
        with self._cache.lock:
            self._closed = True
            self._cache.forget(self)
            self.evict()
