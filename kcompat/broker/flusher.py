"""Group commit: one fsync round serves every request that waited for it.

Theory of operation
-------------------
A produce that must be durable before its acknowledgement calls ``sync(log)``.
The log joins the *next* round and the caller waits for that round to finish.
A single background task runs rounds back to back: it takes every log that
joined, collects their unsynced files, syncs them in a worker thread (never
blocking trio; inline for a store whose syncs do not block, the simulator's)
and releases all waiters at once. While one round's fsync
is in flight, new requests gather for the next, so under load many requests
share one fsync. An fsync failure is delivered to that round's waiters, who
answer KAFKA_STORAGE_ERROR instead of acknowledging.

The Raft driver runs its own pass (``sync_each``): one worker-thread trip for
every target of its round, each target's files synced in turn and a failure
(``OSError``: EIO, ENOSPC on a filesystem that allocates late) reported per
target, so one partition's bad write does not fail the others' round
(``kcompat.broker.replication.disk_faults``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import trio

from kcompat.log.store import Durable

log = logging.getLogger("kcompat.flush")


class Syncable(Protocol):
    def dirty_files(self) -> Sequence[Durable]: ...


class _Round:
    def __init__(self) -> None:
        self.logs: list[Syncable] = []
        self.done = trio.Event()
        self.error: OSError | None = None


class Flusher:
    def __init__(self, threaded: bool = True) -> None:
        self.threaded = threaded
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
        files = [f for target in dict.fromkeys(targets) for f in target.dirty_files()]
        with trio.CancelScope(shield=True):
            await self._sync(files)
        self.rounds += 1

    async def sync_each(self, *targets: Syncable) -> dict[int, OSError]:
        """Sync every target's files in one pass (shielded, as ``sync_now``);
        the targets that failed, by ``id``, with their error. A target whose
        ``dirty_files`` fails (a write it makes first) fails alone too."""
        failed: dict[int, OSError] = {}
        work: list[tuple[int, list[Durable]]] = []
        for target in dict.fromkeys(targets):
            try:
                work.append((id(target), list(target.dirty_files())))
            except OSError as e:
                failed[id(target)] = e
        with trio.CancelScope(shield=True):
            if self.threaded:
                failed.update(await trio.to_thread.run_sync(_sync_each, work))
            else:
                failed.update(_sync_each(work))
                await trio.lowlevel.checkpoint()
        self.rounds += 1
        return failed

    async def _sync(self, files: list[Durable]) -> None:
        if self.threaded:
            await trio.to_thread.run_sync(_sync_all, files)
        else:
            _sync_all(files)
            await trio.lowlevel.checkpoint()

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            rnd, self._next = self._next, _Round()
            files: list[Durable] = []
            for target in dict.fromkeys(rnd.logs):  # unique, in order
                files.extend(target.dirty_files())
            try:
                await self._sync(files)
            except OSError as e:
                log.error("fsync failed: %s", e)
                rnd.error = e
            self.rounds += 1
            rnd.done.set()


def _sync_all(files: list[Durable]) -> None:
    for f in files:
        f.sync()  # a file closed meanwhile (topic deleted) is a no-op


def _sync_each(work: list[tuple[int, list[Durable]]]) -> dict[int, OSError]:
    failed: dict[int, OSError] = {}
    for key, files in work:
        try:
            _sync_all(files)
        except OSError as e:
            failed[key] = e
    return failed
