"""Group commit: concurrent syncs share fsync rounds; failures reach the waiters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from kcompat.broker.flusher import Flusher
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
