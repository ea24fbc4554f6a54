"""Sparse offset and time indexes of one segment (Kafka's ``.index`` / ``.timeindex``).

Theory of operation
-------------------
``OffsetIndex`` maps a batch's base offset (stored relative to the segment's
base offset, int32) to the batch's byte position in the ``.log`` file (int32):
8 big-endian bytes per entry. ``TimeIndex`` maps a running maximum timestamp
(int64) to the relative base offset of the batch that first reached it (int32):
12 bytes per entry. Both are sparse — the segment adds an entry every
``index_interval_bytes`` of log — and both are strictly ordered by key, so a
lookup is a ``bisect`` over an in-memory ``array``.

Persistence is append-only and lazy: entries live in memory and are written to
the file by ``write_pending`` (called when the segment is fsynced, rolled or
closed; a rolled segment's files are synced by the log's next sync pass, off
the event loop). An index file is only trusted where recovery trusts the
segment (synced by a clean close); recovery rebuilds the others' indexes from
a log scan, and ``load`` refuses (returns None) a file that fails the sanity checks:
size a multiple of the entry size, keys and values monotonic, positions inside
the log, offsets below the next segment's base offset. A write that fails
(a full disk, EIO) cuts whatever part of it reached the file and leaves the
entries pending for the next sync: the file never holds a torn entry.
"""

from __future__ import annotations

import contextlib
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from kcompat.log.store import OS_STORE, CachedFile, FileStore, OsFileStore, StoredFile

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def open_index_file(path: Path, store: FileStore, truncate: bool = False) -> StoredFile:
    """Index files on the real disk share ``FD_CACHE`` (at most so many
    descriptors open); other stores (the simulator's) open them plainly."""
    if isinstance(store, OsFileStore):
        return CachedFile(path, store, truncate)
    return store.open(path, truncate=truncate)


class _IndexFile:
    """The open index file and how many entries of it are on disk."""

    def __init__(self, path: Path, entry: struct.Struct, file: StoredFile | None,
                 persisted: int) -> None:
        self.path = path
        self._entry = entry
        self._file = file
        self._persisted = persisted

    def _entries(self, start: int) -> list[tuple[int, int]]:
        raise NotImplementedError

    def write_pending(self) -> None:
        """Append the entries not yet on disk to the file (no fsync)."""
        pending = self._entries(self._persisted)
        if pending and self._file is not None:
            try:
                self._file.append([b"".join(self._entry.pack(k, v) for k, v in pending)])
            except OSError:
                # a full disk or EIO: cut a torn entry off (the entries stay in
                # memory and are written by the next sync) and report it
                with contextlib.suppress(OSError):
                    self._file.truncate(self._persisted * self._entry.size)
                raise
            self._persisted += len(pending)

    def _truncate_file(self, count: int) -> None:
        if self._persisted > count and self._file is not None:
            self._file.truncate(count * self._entry.size)
            self._persisted = count

    def fsync(self) -> None:
        self.write_pending()
        self.sync_file()

    def sync_file(self) -> None:
        """Sync what was written, writing nothing (safe beside the writer's
        thread; a file closed meanwhile is a no-op)."""
        f = self._file
        if f is not None:
            f.sync()

    def close(self) -> None:
        if self._file is not None:
            try:
                self.write_pending()
            finally:  # a failed write (a full disk) still closes the file
                self._file.close()
                self._file = None


class OffsetIndex(_IndexFile):
    """Relative offset -> file position; lookup gives the greatest entry <= target."""

    ENTRY_BYTES = _OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int, file: StoredFile | None,
                 data: bytes = b"") -> None:
        super().__init__(path, _OFFSET_ENTRY, file, len(data) // self.ENTRY_BYTES)
        self.base_offset = base_offset
        flat = array("i", data)
        if sys.byteorder == "little":
            flat.byteswap()
        self._relative = flat[0::2]
        self._positions = flat[1::2]

    @classmethod
    def create(cls, path: Path, base_offset: int, store: FileStore = OS_STORE) -> OffsetIndex:
        """A new empty index, replacing any file at ``path``."""
        return cls(path, base_offset, open_index_file(path, store, truncate=True))

    @classmethod
    def load(
        cls, path: Path, base_offset: int, log_size: int, offset_limit: int | None,
        store: FileStore = OS_STORE,
    ) -> OffsetIndex | None:
        """The index stored at ``path`` if it passes the sanity checks, else None."""
        try:
            data = store.read(path)
        except OSError:
            return None
        if len(data) % cls.ENTRY_BYTES:
            return None
        index = cls(path, base_offset, open_index_file(path, store), data)
        if not index._sane(log_size, offset_limit):
            index.close()
            return None
        return index

    def _sane(self, log_size: int, offset_limit: int | None) -> bool:
        rel, pos = self._relative, self._positions
        if any(rel[i] >= rel[i + 1] or pos[i] >= pos[i + 1] for i in range(len(rel) - 1)):
            return False
        if not rel:
            return True
        if rel[0] < 0 or pos[0] < 0 or pos[-1] >= log_size:
            return False
        return offset_limit is None or self.base_offset + rel[-1] < offset_limit

    def _entries(self, start: int) -> list[tuple[int, int]]:
        return list(zip(self._relative[start:], self._positions[start:], strict=True))

    def __len__(self) -> int:
        return len(self._relative)

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        assert not self._relative or relative > self._relative[-1], "offsets must grow"
        self._relative.append(relative)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry <= ``offset``; (base, 0) if none."""
        i = bisect_right(self._relative, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative[i], self._positions[i]

    def last_entry(self) -> tuple[int, int] | None:
        if not self._relative:
            return None
        return self.base_offset + self._relative[-1], self._positions[-1]

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries pointing at ``position`` or beyond."""
        count = bisect_left(self._positions, position)
        del self._relative[count:]
        del self._positions[count:]
        self._truncate_file(count)


class TimeIndex(_IndexFile):
    """Max timestamp so far -> relative offset of the batch that reached it."""

    ENTRY_BYTES = _TIME_ENTRY.size

    def __init__(self, path: Path, base_offset: int, file: StoredFile | None,
                 data: bytes = b"") -> None:
        super().__init__(path, _TIME_ENTRY, file, len(data) // self.ENTRY_BYTES)
        self.base_offset = base_offset
        self._timestamps = array("q")
        self._relative = array("i")
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            self._timestamps.append(ts)
            self._relative.append(rel)

    @classmethod
    def create(cls, path: Path, base_offset: int, store: FileStore = OS_STORE) -> TimeIndex:
        return cls(path, base_offset, open_index_file(path, store, truncate=True))

    @classmethod
    def load(cls, path: Path, base_offset: int, offset_limit: int | None,
             store: FileStore = OS_STORE) -> TimeIndex | None:
        try:
            data = store.read(path)
        except OSError:
            return None
        if len(data) % cls.ENTRY_BYTES:
            return None
        index = cls(path, base_offset, open_index_file(path, store), data)
        if not index._sane(offset_limit):
            index.close()
            return None
        return index

    def _sane(self, offset_limit: int | None) -> bool:
        ts, rel = self._timestamps, self._relative
        if any(ts[i] >= ts[i + 1] or rel[i] > rel[i + 1] for i in range(len(ts) - 1)):
            return False
        if not ts:
            return True
        return rel[0] >= 0 and (offset_limit is None or self.base_offset + rel[-1] < offset_limit)

    def _entries(self, start: int) -> list[tuple[int, int]]:
        return list(zip(self._timestamps[start:], self._relative[start:], strict=True))

    def __len__(self) -> int:
        return len(self._timestamps)

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry: the segment's indexed maximum."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._relative[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is above the last one."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        self._timestamps.append(timestamp)
        self._relative.append(offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry whose timestamp < ``timestamp``.

        Every batch before that offset has a max timestamp below ``timestamp``,
        so a search for the first batch reaching ``timestamp`` may start there.
        """
        i = bisect_left(self._timestamps, timestamp) - 1
        if i < 0:
            return None
        return self._timestamps[i], self.base_offset + self._relative[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop the entries whose offset is ``offset`` or beyond."""
        count = bisect_left(self._relative, offset - self.base_offset)
        del self._timestamps[count:]
        del self._relative[count:]
        self._truncate_file(count)
