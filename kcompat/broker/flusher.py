"""Group commit: one fsync round serves every request that waited for it.

Theory of operation
-------------------
A produce that must be durable before its acknowledgement calls ``sync(log)``.
The log joins the *next* round and the caller waits for that round to finish.
A single background task runs rounds back to back: it takes every log that
joined, collects their unsynced file descriptors, fsyncs them in a worker thread
(never blocking trio) and releases all waiters at once. While one round's fsync
is in flight, new requests gather for the next, so under load many requests
share one fsync. An fsync failure is delivered to that round's waiters, who
answer KAFKA_STORAGE_ERROR instead of acknowledging.
"""

from __future__ import annotations

import logging
import os
from typing import Protocol

import trio

log = logging.getLogger("kcompat.flush")


class Syncable(Protocol):
    def dirty_fds(self) -> list[int]: ...


class _Round:
    def __init__(self) -> None:
        self.logs: list[Syncable] = []
        self.done = trio.Event()
        self.error: OSError | None = None


class Flusher:
    def __init__(self) -> None:
        self._next = _Round()
        self._wakeup = trio.Event()
        self.rounds = 0

    async def sync(self, *targets: Syncable) -> None:
        """Return once everything the targets wrote so far is on disk."""
        rnd = self._next
        rnd.logs.extend(targets)
        self._wakeup.set()
        await rnd.done.wait()
        if rnd.error is not None:
            raise rnd.error

    async def sync_now(self, *targets: Syncable) -> None:
        """Make the targets durable in one fsync pass of the caller's own (the
        Raft driver's Ready round, which already gathers every group), shielded
        from cancellation so a round is never left half done."""
        fds = [fd for target in dict.fromkeys(targets) for fd in target.dirty_fds()]
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_fsync_all, fds)
        self.rounds += 1

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            rnd, self._next = self._next, _Round()
            fds: list[int] = []
            for target in dict.fromkeys(rnd.logs):  # unique, in order
                fds.extend(target.dirty_fds())
            try:
                await trio.to_thread.run_sync(_fsync_all, fds)
            except OSError as e:
                log.error("fsync failed: %s", e)
                rnd.error = e
            self.rounds += 1
            rnd.done.set()


def _fsync_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno == 9:  # EBADF: the file was closed (topic deleted) meanwhile
                continue
            raise
