"""An in-memory ``FileStore`` that loses what a crash may lose.

Theory of operation
-------------------
A broker's disk, for the simulators and for tests. It keeps the POSIX rules
the log relies on (``kcompat.log.store``) and nothing more:

* File contents: each file (an inode) has its *durable* bytes — as of its last
  ``sync`` — and the writes since then, in order (appends and truncations).
* Names: the *current* namespace and the *durable* one. Creating or removing
  a file, or renaming one, changes the current namespace; ``sync_dir`` of a
  directory makes the current entries of that directory durable. A new
  directory's own name is durable once its parent is synced. (Directory
  renames, used only to mark a deleted topic, are durable at once.)

``crash(rng)`` is a power cut: the namespace falls back to its durable state,
and each surviving file keeps its durable bytes plus a random prefix of its
unsynced writes — the last write kept may be torn, and with ``garble`` its
torn tail holds garbage instead. Handles opened before the crash are dead:
writing through one raises ``OSError``, as the process that held them is gone.

Disk faults (``DiskFaults``, set on ``faults``): a ``capacity`` in bytes of
file data — an append that does not fit writes what does (a short write) and
fails with ENOSPC, as ``writev`` on a full filesystem; ``write_errno`` — every
append fails (EIO), with ``short`` first writing half its bytes; and
``sync_errno`` — ``sync`` and ``sync_dir`` fail (see below); ``read_errno``
— positional reads fail (an unreadable sector).
``paths`` limits the faults to paths containing it (one partition's
directory). Clearing a field ends that fault: space returned, disk healed.
A failed sync behaves as Linux's fsync after a write-back error: the file's
dirty pages are dropped and reported clean — readers still see the bytes
(the page cache), but the disk holds zeros there (``_Inode.lost``), and a
later successful sync does not bring them back: only writing those bytes
again does. So a broker that merely syncs again after a failure loses data
at the next power cut; it must rewrite what the failed round wrote
(``kcompat.broker.replication.disk_faults``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from random import Random

Buffer = bytes | bytearray | memoryview


@dataclass(eq=False)
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    # unsynced writes, in order: ("append", bytes) or ("truncate", size)
    pending: list[tuple[str, bytes | int]] = field(default_factory=list)
    mtime_ms: int = 0
    # byte ranges a failed sync dropped: zeros on the disk until written again
    lost: list[tuple[int, int]] = field(default_factory=list)

    def on_disk(self) -> bytes:
        """What a sync makes durable: the data, with the dropped ranges as zeros."""
        if not self.lost:
            return bytes(self.data)
        data = bytearray(self.data)
        for start, end in self.lost:
            end = min(end, len(data))
            if start < end:
                data[start:end] = bytes(end - start)
        return bytes(data)

    def unsynced_ranges(self) -> list[tuple[int, int]]:
        """The byte ranges the pending appends wrote (clipped by later truncations)."""
        ranges: list[tuple[int, int]] = []
        size = len(self.durable)
        for kind, arg in self.pending:
            if kind == "truncate":
                assert isinstance(arg, int)
                size = arg
                ranges = [(a, min(b, size)) for a, b in ranges if a < size]
            else:
                assert isinstance(arg, bytes)
                ranges.append((size, size + len(arg)))
                size += len(arg)
        return ranges

    def rewritten(self, start: int, end: int) -> None:
        """[start, end) written again: no longer lost."""
        kept: list[tuple[int, int]] = []
        for a, b in self.lost:
            if b <= start or a >= end:
                kept.append((a, b))
                continue
            if a < start:
                kept.append((a, start))
            if b > end:
                kept.append((end, b))
        self.lost = kept


@dataclass
class DiskFaults:
    """What the disk does wrong now (see the module docstring)."""

    capacity: int | None = None  # bytes of file data the disk holds (ENOSPC past it)
    write_errno: int | None = None  # every append fails with this errno
    sync_errno: int | None = None  # every sync fails with this errno
    read_errno: int | None = None  # every positional read fails with this errno
    sync_delay_s: float = 0.0  # every fsync pass takes this long (simulated time): a slow disk
    short: bool = True  # a failing append first writes half its bytes
    paths: str = ""  # only paths containing this
    failed_writes: int = 0
    failed_syncs: int = 0

    def applies(self, key: str) -> bool:
        return not self.paths or self.paths in key


def _key(path: Path | str) -> str:
    return str(path)  # Path objects are already normal


def _parent(key: str) -> str:
    head, sep, _name = key.rpartition("/")
    return head if head else ("/" if sep else ".")


class MemoryFile:
    def __init__(self, store: MemoryFileStore, inode: _Inode, key: str = "") -> None:
        self._store = store
        self._key = key
        self._inode: _Inode | None = inode
        self._generation = store.generation

    def _live(self) -> _Inode:
        if self._inode is None:
            raise OSError(errno.EBADF, "file is closed")
        if self._generation != self._store.generation:
            raise OSError(errno.EIO, "the process that opened this file crashed")
        return self._inode

    def append(self, parts: Sequence[Buffer]) -> int:
        inode = self._live()
        data = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
        room = self._store.room(self._key, len(data))
        if room is not None:
            fits, code = room
            if fits:
                inode.rewritten(len(inode.data), len(inode.data) + fits)
                inode.data += data[:fits]
                inode.pending.append(("append", data[:fits]))
            self._store.faults.failed_writes += 1
            raise OSError(code, os.strerror(code))
        if inode.lost:
            inode.rewritten(len(inode.data), len(inode.data) + len(data))
        inode.data += data
        inode.pending.append(("append", data))
        inode.mtime_ms = self._store.now_ms
        return len(data)

    def pread(self, size: int, position: int) -> bytes:
        inode = self._live()
        faults = self._store.faults
        if faults.read_errno is not None and faults.applies(self._key):
            raise OSError(faults.read_errno, os.strerror(faults.read_errno))
        return bytes(inode.data[position : position + size])

    def size(self) -> int:
        return len(self._live().data)

    def truncate(self, size: int) -> None:
        inode = self._live()
        del inode.data[size:]
        inode.pending.append(("truncate", size))
        inode.lost = [(a, min(b, size)) for a, b in inode.lost if a < size]

    def sync(self) -> None:
        if self._inode is None or self._generation != self._store.generation:
            return
        inode = self._inode
        try:
            self._store.check_sync(self._key)
        except OSError:
            # write-back failed: the pending writes' pages are dropped, reported clean
            inode.lost += inode.unsynced_ranges()
            inode.durable = inode.on_disk()
            inode.pending.clear()
            raise
        inode.durable = inode.on_disk()
        inode.pending.clear()

    def mtime_ms(self) -> int:
        return self._live().mtime_ms

    def close(self) -> None:
        self._inode = None


class MemoryFileStore:
    blocking = False

    def sync_delay_s(self) -> float:
        """How long an fsync pass takes now (``Flusher``'s inline passes wait
        for it in simulated time)."""
        return self.faults.sync_delay_s

    def __init__(self, *roots: Path | str) -> None:
        self.files: dict[str, _Inode] = {}
        self.dirs: set[str] = {"/", "."}
        self.durable_files: dict[str, _Inode] = {}
        self.durable_dirs: set[str] = {"/", "."}
        self.generation = 0
        self.now_ms = 0
        self.crashes = 0
        self.faults = DiskFaults()
        for root in roots:  # directories that exist, durably, from the start
            self.make_dirs(Path(root))
            self.durable_dirs |= self.dirs

    # -- faults -----------------------------------------------------------------

    def crash(self, rng: Random, garble: float = 0.0) -> None:
        """Lose what a power cut may lose (see the module docstring)."""
        self.generation += 1
        self.crashes += 1
        self.files = dict(self.durable_files)
        self.dirs = set(self.durable_dirs)
        for inode in {id(i): i for i in self.files.values()}.values():
            data = bytearray(inode.durable)
            kept = rng.randint(0, len(inode.pending))
            for i, (kind, arg) in enumerate(inode.pending[:kept]):
                if kind == "truncate":
                    assert isinstance(arg, int)
                    del data[arg:]
                    continue
                assert isinstance(arg, bytes)
                if i == kept - 1 and arg and rng.random() < 0.5:  # torn
                    cut = rng.randint(0, len(arg) - 1)
                    tail = bytes(rng.randrange(256) for _ in range(len(arg) - cut))
                    arg = arg[:cut] + (tail if rng.random() < garble else b"")
                data += arg
            inode.data = data
            inode.durable = bytes(data)
            inode.pending.clear()
            inode.lost.clear()  # the zeros are the data now

    def used_bytes(self) -> int:
        """Bytes of file data held (each inode once)."""
        return sum(len(i.data) for i in {id(i): i for i in self.files.values()}.values())

    def room(self, key: str, size: int) -> tuple[int, int] | None:
        """None: an append of ``size`` bytes to ``key`` succeeds; else how many
        of its bytes reach the file before it fails, and its errno."""
        faults = self.faults
        if not faults.applies(key):
            return None
        if faults.write_errno is not None:
            return (size // 2 if faults.short else 0), faults.write_errno
        if faults.capacity is not None:
            free = max(0, faults.capacity - self.used_bytes())
            if size > free:
                return (free if faults.short else 0), errno.ENOSPC
        return None

    def check_sync(self, key: str) -> None:
        faults = self.faults
        if faults.sync_errno is not None and faults.applies(key):
            faults.failed_syncs += 1
            raise OSError(faults.sync_errno, os.strerror(faults.sync_errno))

    # -- FileStore ----------------------------------------------------------------

    def open(self, path: Path, truncate: bool = False) -> MemoryFile:
        key = _key(path)
        if _parent(key) not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
        if key in self.dirs:
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        inode = self.files.get(key)
        if inode is None:
            inode = self.files[key] = _Inode(mtime_ms=self.now_ms)
        elif truncate and inode.data:
            del inode.data[:]
            inode.pending.append(("truncate", 0))
            inode.lost.clear()
        return MemoryFile(self, inode, key)

    def read(self, path: Path) -> bytes:
        key = _key(path)
        inode = self.files.get(key)
        if inode is None:
            if key in self.dirs:
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        return bytes(inode.data)

    def exists(self, path: Path) -> bool:
        key = _key(path)
        return key in self.files or key in self.dirs

    def names(self, directory: Path) -> list[str]:
        key = _key(directory)
        if key not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(directory))
        found = [k for k in self.files if _parent(k) == key]
        found += [k for k in self.dirs if k not in ("/", ".") and _parent(k) == key]
        return sorted(k.rpartition("/")[2] for k in found)

    def make_dirs(self, directory: Path) -> bool:
        key = _key(directory)
        if key in self.dirs:
            return False
        path = PurePosixPath(key)
        for d in [*reversed(path.parents), path]:
            self.dirs.add(str(d))
        return True

    def remove(self, path: Path) -> None:
        self.files.pop(_key(path), None)

    def remove_tree(self, directory: Path) -> None:
        key = _key(directory)
        inside = key + "/"
        for k in [k for k in self.files if k.startswith(inside)]:
            del self.files[k]
        self.dirs = {d for d in self.dirs if d != key and not d.startswith(inside)}

    def rename(self, src: Path, dst: Path) -> None:
        s, d = _key(src), _key(dst)
        if s in self.files:
            self.files[d] = self.files.pop(s)
            return
        if s not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(src))
        # a directory: moved at once in both namespaces (see the module docstring)
        for names in (self.files, self.durable_files):
            for k in [k for k in names if k.startswith(s + "/")]:
                names[d + k[len(s):]] = names.pop(k)
        for dirs in (self.dirs, self.durable_dirs):
            moved = {x for x in dirs if x == s or x.startswith(s + "/")}
            dirs -= moved
            dirs |= {d + x[len(s):] for x in moved}

    def sync_dir(self, directory: Path) -> None:
        key = _key(directory)
        if key not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(directory))
        self.check_sync(key)
        for k in [k for k in self.durable_files if _parent(k) == key]:
            if k not in self.files:
                del self.durable_files[k]
        for k, inode in self.files.items():
            if _parent(k) == key:
                self.durable_files[k] = inode
        self.durable_dirs -= {x for x in self.durable_dirs
                              if _parent(x) == key and x not in self.dirs}
        self.durable_dirs |= {x for x in self.dirs if _parent(x) == key}
