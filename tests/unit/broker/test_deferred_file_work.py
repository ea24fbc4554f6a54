"""Rolls and deletions of a partition log on the event loop: every fsync and
directory sync they need runs in the flusher's worker threads (issue 31)."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest
import trio

from kcompat.broker.storage.flusher import Flusher
from kcompat.log import LogConfig, PartitionLog
from kcompat.log.files import DELETED_SUFFIX, LOG_START_OFFSET_FILE, read_int_file
from kcompat.log.store import OsFile, OsFileStore
from kcompat.wire.batch import parse_header
from kcompat.wire.records import encode_batch


class RecordedFile(OsFile):
    __slots__ = ("path", "calls")

    def __init__(self, fd: int, path: Path, calls: list[tuple[str, int]]) -> None:
        super().__init__(fd)
        self.path, self.calls = path, calls

    def sync(self) -> None:
        self.calls.append((str(self.path), threading.get_ident()))
        super().sync()


class RecordingOsStore(OsFileStore):
    """The real disk, noting the thread of every file sync and directory sync."""

    def __init__(self) -> None:
        self.sync_threads: list[tuple[str, int]] = []

    def open(self, path: Path, truncate: bool = False) -> OsFile:
        return RecordedFile(super().open(path, truncate).fd, path, self.sync_threads)

    def sync_dir(self, directory: Path) -> None:
        self.sync_threads.append((str(directory), threading.get_ident()))
        super().sync_dir(directory)


def test_rolls_and_deletions_sync_only_in_worker_threads(tmp_path: Path) -> None:
    store = RecordingOsStore()
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(segment_bytes=250), 0, store)
    view = memoryview(encode_batch([(None, b"v" * 40, (), 1_000)])).toreadonly()
    flusher = Flusher(threaded=True)
    log.defer_io = flusher.defer
    loop_thread = threading.get_ident()
    store.sync_threads.clear()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flusher.run)
            for _ in range(3):
                for _ in range(5):
                    log.append(view, parse_header(view), 0, 0)  # rolls on the loop
                await flusher.sync(log)  # an acks=all produce's wait
            bases = log.segment_base_offsets
            log.delete_records_before(bases[3])
            log.enforce_retention(0)
            await flusher.settle(log)  # DeleteRecords' wait
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert len(log.segment_base_offsets) > 1
    assert store.sync_threads, "nothing was synced"
    on_loop = [path for path, thread in store.sync_threads if thread == loop_thread]
    assert on_loop == [], f"synced on the event loop: {on_loop}"
    assert read_int_file(directory / LOG_START_OFFSET_FILE, store) == log.log_start_offset > 0
    assert not [n for n in store.names(directory) if n.endswith(DELETED_SUFFIX)]


def test_settle_raises_only_its_own_failure() -> None:
    class Failing:
        def sync(self) -> None:
            raise OSError(errno.EIO, "bad disk")

    class Target:
        def __init__(self, work: object | None) -> None:
            self.work = work

        def take_deferred_io(self) -> object | None:
            work, self.work = self.work, None
            return work

    bad, good = Target(Failing()), Target(None)

    async def main() -> None:
        flusher = Flusher(threaded=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flusher.run)
            flusher.defer(bad)  # type: ignore[arg-type]
            await flusher.settle(good)  # type: ignore[arg-type]
            with pytest.raises(OSError):
                flusher.defer(bad)  # (its work was taken: nothing left)
                bad.work = Failing()
                await flusher.settle(bad)  # type: ignore[arg-type]
            nursery.cancel_scope.cancel()

    trio.run(main)
