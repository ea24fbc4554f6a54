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

The Raft driver runs its own pass (``sync_each``): every target of its round
synced, a failure (``OSError``: EIO, ENOSPC on a filesystem that allocates
late) reported per target, so one partition's bad write does not fail the
others' round (``kcompat.broker.replication.disk_faults``). A pass of several
targets (or files) runs in up to ``SYNC_THREADS`` worker threads at once, not
one after another: concurrent fsyncs share the filesystem's journal commits,
so a round of many partitions costs about one commit, not one per file, and
a small partition's produce does not wait for each of the others' syncs in
turn.

Deferred file work. A partition log changes its state in memory at once when
segments are deleted (DeleteRecords, retention, a trimmed internal log) and
leaves the file work — the new ``log-start-offset``, the unlinks, a directory
sync — to ``defer`` (its ``defer_io``): a second background task runs it in
rounds as the syncs are, in a worker thread, apart from the sync rounds (an
unlink of a large file is slow, and no produce waits for it). A failure is
logged: the log start is written again with the log's next work, and
``.deleted`` files left behind go at the next recovery. ``settle`` waits for a log's work so far (DeleteRecords
answers after its new start is on disk), raising that log's failure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Protocol, TypeVar

import trio
from prometheus_client import CollectorRegistry, Gauge, Histogram

from kcompat.log.store import Durable

log = logging.getLogger("kcompat.flush")

SYNC_THREADS = 8  # worker threads one fsync pass uses at most (``_in_threads``)
PASS_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
T = TypeVar("T")
R = TypeVar("R")


class Syncable(Protocol):
    def dirty_files(self) -> Sequence[Durable]: ...


class Deferring(Protocol):
    def take_deferred_io(self) -> Durable | None: ...


class _Round:
    def __init__(self) -> None:
        self.logs: list[Syncable] = []
        self.done = trio.Event()
        self.error: OSError | None = None


class _DeferredRound:
    def __init__(self) -> None:
        self.logs: list[Deferring] = []
        self.done = trio.Event()
        self.errors: dict[int, OSError] = {}  # by id of the log


class Flusher:
    def __init__(self, threaded: bool = True,
                 delay_s: Callable[[], float] | None = None) -> None:
        self.threaded = threaded
        self._delay_s = delay_s  # an inline pass's duration (a simulated slow disk)
        self._next = _Round()
        self._wakeup = trio.Event()
        self.rounds = 0
        self._next_deferred = _DeferredRound()
        self._deferred_wakeup = trio.Event()
        self.deferred_rounds = 0
        self.longest_pass_s = 0.0  # the longest fsync pass so far
        self._passes: Histogram | None = None

    def export(self, registry: CollectorRegistry) -> None:
        """``kcompat_fsync_pass_seconds`` (each pass, as Kafka's
        LogFlushRateAndTimeMs) and ``kcompat_fsync_pass_longest_seconds``."""
        self._passes = Histogram(
            "kcompat_fsync_pass_seconds", "How long each fsync pass took (a Raft round's, "
            "or a group commit's): what an acks=all produce waits for beyond its write",
            buckets=PASS_BUCKETS_S, registry=registry)
        Gauge("kcompat_fsync_pass_longest_seconds", "The longest fsync pass since the "
              "broker started", registry=registry).set_function(lambda: self.longest_pass_s)

    def _observe(self, started: float) -> None:
        took = time.monotonic() - started
        self.longest_pass_s = max(self.longest_pass_s, took)
        if self._passes is not None:
            self._passes.observe(took)

    def defer(self, target: Deferring) -> None:
        """``target`` has file work to do (``take_deferred_io``): the next
        deferred round does it. Never blocks (a log's ``defer_io``)."""
        self._next_deferred.logs.append(target)
        self._deferred_wakeup.set()

    async def settle(self, *targets: Deferring) -> None:
        """Return once the file work the targets left so far is done; raise
        the first failure of it."""
        rnd = self._next_deferred
        rnd.logs.extend(targets)
        self._deferred_wakeup.set()
        await rnd.done.wait()
        for target in targets:
            error = rnd.errors.get(id(target))
            if error is not None:
                raise error

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
        started = time.monotonic()
        with trio.CancelScope(shield=True):
            if self.threaded:
                for found in await _in_threads(_sync_each, work):
                    failed.update(found)
            else:
                failed.update(_sync_each(work))
                await self._inline_pass_done()
        self._observe(started)
        self.rounds += 1
        return failed

    async def _sync(self, files: list[Durable]) -> None:
        if self.threaded:
            await _in_threads(_sync_all, files)
        else:
            _sync_all(files)
            await self._inline_pass_done()

    async def _inline_pass_done(self) -> None:
        delay = self._delay_s() if self._delay_s is not None else 0.0
        if delay > 0:
            await trio.sleep(delay)
        else:
            await trio.lowlevel.checkpoint()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._run_deferred)
            await self._run_syncs()

    async def _run_deferred(self) -> None:
        while True:
            await self._deferred_wakeup.wait()
            self._deferred_wakeup = trio.Event()
            rnd, self._next_deferred = self._next_deferred, _DeferredRound()
            work: list[tuple[int, list[Durable]]] = []
            for target in dict.fromkeys(rnd.logs):
                item = target.take_deferred_io()
                if item is not None:
                    work.append((id(target), [item]))
            if work:
                with trio.CancelScope(shield=True):  # never left half done
                    if self.threaded:
                        rnd.errors = await trio.to_thread.run_sync(_sync_each, work)
                    else:
                        rnd.errors = _sync_each(work)
            for error in rnd.errors.values():
                log.error("deferred file work of a log failed: %s", error)
            self.deferred_rounds += 1
            rnd.done.set()
            await trio.lowlevel.checkpoint()

    async def _run_syncs(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            rnd, self._next = self._next, _Round()
            files: list[Durable] = []
            for target in dict.fromkeys(rnd.logs):  # unique, in order
                files.extend(target.dirty_files())
            started = time.monotonic()
            try:
                await self._sync(files)
            except OSError as e:
                log.error("fsync failed: %s", e)
                rnd.error = e
            self._observe(started)
            self.rounds += 1
            rnd.done.set()


async def _in_threads(fn: Callable[[list[T]], R], items: list[T]) -> list[R]:
    """``fn`` over ``items`` cut into up to ``SYNC_THREADS`` slices, all at
    once: concurrent fsyncs of several files share the filesystem's journal
    commits (on ext4, 20 small files take about 3 ms at once against 20-40 ms
    one after another). One trio worker thread runs the first slice and
    waits for the others in the pass's pool (``_fan_out``), so the caller
    comes back one wake-up after the last fsync, not after one per slice and
    the nursery's own: under load each wake-up is a turn of every busy task,
    and the Raft driver's round (an acks=all produce's wait) is on this path.
    The slices' results; the first ``OSError`` raised once every slice is done."""
    if len(items) <= 1:
        return [await trio.to_thread.run_sync(fn, items)]
    slices = [items[i::SYNC_THREADS] for i in range(min(SYNC_THREADS, len(items)))]
    return await trio.to_thread.run_sync(_fan_out, fn, slices)


# the other slices' threads, shared by every pass (the driver's and the group
# commit's may overlap); a thread starts when first needed
_POOL = ThreadPoolExecutor(2 * SYNC_THREADS, thread_name_prefix="kcompat-fsync")


def _fan_out(fn: Callable[[list[T]], R], slices: list[list[T]]) -> list[R]:
    """In a worker thread: the first slice here, the others in the pool at once."""
    futures = [_POOL.submit(fn, part) for part in slices[1:]]
    results: list[R] = []
    errors: list[OSError] = []
    runs: list[Callable[[], R]] = [partial(fn, slices[0]), *(f.result for f in futures)]
    for run in runs:
        try:
            results.append(run())
        except OSError as e:
            errors.append(e)
    if errors:
        raise errors[0]
    return results


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
