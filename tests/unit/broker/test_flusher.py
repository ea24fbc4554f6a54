"""Group commit: concurrent syncs share fsync rounds; failures reach the waiters."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio

from kcompat.broker.storage.flusher import Flusher
from kcompat.log.store import OS_STORE, OsFile, StoredFile


class FileTarget:
    def __init__(self, path: Path) -> None:
        self.file = OS_STORE.open(path)
        self.synced_requests = 0

    def dirty_files(self) -> list[StoredFile]:
        self.synced_requests += 1
        return [self.file]


def test_concurrent_syncs_share_rounds(tmp_path: Path) -> None:
    targets = [FileTarget(tmp_path / f"f{i}") for i in range(4)]

    async def main() -> int:
        flusher = Flusher()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flusher.run)
            async with trio.open_nursery() as clients:
                for i in range(200):
                    clients.start_soon(flusher.sync, targets[i % 4])
            nursery.cancel_scope.cancel()
        return flusher.rounds

    rounds = trio.run(main)
    assert 1 <= rounds < 20, f"200 syncs took {rounds} fsync rounds"


def test_fsync_failure_is_raised_to_waiters(tmp_path: Path) -> None:
    class Broken:
        def dirty_files(self) -> list[StoredFile]:
            r, w = os.pipe()  # fsync on a pipe fails with EINVAL
            return [OsFile(r)]

    async def main() -> None:
        flusher = Flusher()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flusher.run)
            try:
                with pytest.raises(OSError):
                    await flusher.sync(Broken())
            finally:
                nursery.cancel_scope.cancel()

    trio.run(main)


class Meeting:
    """A file whose fsync returns only once ``parties`` of them are syncing at
    the same time (a pass that syncs one after another never gets there), or
    fails like a bad disk (``broken``)."""

    def __init__(self, barrier: threading.Barrier, broken: bool = False) -> None:
        self.barrier, self.broken = barrier, broken

    def sync(self) -> None:
        self.barrier.wait()
        if self.broken:
            raise OSError(5, "Input/output error")

    def dirty_files(self) -> list[Meeting]:
        return [self]


def test_a_pass_syncs_its_targets_at_once_and_fails_each_alone() -> None:
    # concurrent fsyncs share the journal's commits: a round of many partitions
    # costs about one, and a small partition's produce does not wait for every
    # other partition's sync in turn
    barrier = threading.Barrier(3, timeout=10)
    targets = [Meeting(barrier), Meeting(barrier, broken=True), Meeting(barrier)]

    async def main() -> dict[int, OSError]:
        return await Flusher().sync_each(*targets)

    failed = trio.run(main)
    assert list(failed) == [id(targets[1])] and failed[id(targets[1])].errno == 5


def test_a_group_commit_syncs_its_files_at_once(tmp_path: Path) -> None:
    barrier = threading.Barrier(2, timeout=10)

    async def main() -> None:
        flusher = Flusher()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flusher.run)
            try:
                await flusher.sync(Meeting(barrier), Meeting(barrier))
            finally:
                nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_pass_of_several_targets_comes_back_in_one_wake_up(tmp_path: Path) -> None:
    """Every wake-up is a turn of each busy task under load: the pass's
    slices run in threads without a task of their own (one per slice, in a
    nursery, cost the caller two more wake-ups after the last fsync)."""
    spawned: list[str] = []

    class Spawns(trio.abc.Instrument):
        def task_spawned(self, task: trio.lowlevel.Task) -> None:
            spawned.append(task.name)

    targets = [FileTarget(tmp_path / f"f{i}") for i in range(5)]
    for t in targets:
        t.file.append([b"x" * 100])

    async def main() -> dict[int, OSError]:
        flusher = Flusher()
        await flusher.sync_each(targets[0])  # (trio's worker thread cache warmed)
        spawned.clear()
        trio.lowlevel.add_instrument(Spawns())
        return await flusher.sync_each(*targets)

    assert trio.run(main) == {}
    assert spawned == [], spawned
