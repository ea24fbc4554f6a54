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
import shutil
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
