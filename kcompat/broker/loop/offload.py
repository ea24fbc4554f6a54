"""CPU-bound work taken off the event loop: to worker threads, a few at a time.

Theory of operation
-------------------
Work that would hold the event loop for long — splitting a large produced
batch of delayed records, building the schedule log's batches, encoding a
snapshot, filtering a view's batch, formatting ``/metrics`` — runs in a
worker thread (``run_cpu``), so the loop goes on serving meanwhile. But a
worker thread running Python holds the GIL, and the loop thread gives the
GIL up at each system call it makes (every send, receive, read and write)
and must take it back: with one busy worker that costs it up to a switch
interval (``server.GIL_SWITCH_INTERVAL_S``) per call, and with k busy
workers about k of them, since a released GIL goes to any waiting thread.
trio's default limit is 40 threads, so a burst of produce requests could
put many splits beside the loop and starve it: a Raft round or a fetch
that makes a hundred calls then waits a hundred times as long.

So every CPU-bound trip takes a token of one process-wide limiter of
``CPU_WORKERS``: however many requests ask at once, at most that many
threads compete with the loop for the GIL; the others wait their turn
without holding anything (the total work is the same — the GIL lets only
one thread run Python at a time anyway). I/O-bound trips (fsyncs, log
opens) keep their own limits and take no token: a thread blocked in the
kernel does not hold the GIL.

One token. A second worker thread running Python adds no throughput (the
GIL lets one thread run Python at a time) and gives the loop one more thread
to win the GIL back from at each of its calls. There were two, so that a
produce's split would not wait behind a long snapshot; but a schedule
snapshot is now built in C-speed runs of its cells (``schedule_log.
snapshot_batches``: 55-80 ms for 120,000 pending records, which is what a
split, a ``/metrics`` text or a share fetch's cold look-up may now wait
behind), and the cost of the second thread showed in every delayed produce. The 1M one-node delayed soak (``bench/soak.py``, three
pairs alternating): with one token the plain producer's p99 during the
delayed produce was 47-59 ms against 67-106 ms with two, and delayed records
went in at 0.40-0.55 of the plain rate against 0.26-0.45. Before the limiter,
trio's 40 threads did worse still (``bench/delayed_rate.py``: 24-32k delayed
records/s against 36-41k with two tokens).

Starting a thread blocks its starter until the new thread runs
(``threading.Thread.start`` waits for it), and trio's ``to_thread`` starts
one on the loop whenever its cache has no idle worker: its idle workers end
after 10 s without a job, so a burst after a calm spell (a produce split, a
round of fsyncs, replica logs opening) found none. On a host whose cores are
taken, the new thread waits for a core, then for the GIL: the 1M delayed
soak on 3 brokers logged Produce steps of 327 ms, fsync trips of 126 ms and
a log open of 113 ms spent in ``Thread.start``, at 0-5 % of a CPU.
``keep_threads_ready`` keeps ``THREAD_RESERVE`` idle workers in trio's
cache, started by a thread of its own: a trip takes one of them, and the
keeper starts its replacement off the loop (the cache's internals are
trio's; without them the keeper does nothing and says so). The reserve's
workers wait a minute for a job, not trio's 10 s, and the keeper looks less
often through a calm spell: on an idle broker it started the whole reserve
anew every 10 s and woke 20 times a second (part of the idle cost of a
shard, issue 35).

Long background work in a thread (``run_stoppable``: the codec warm-up at
start) is never abandoned on cancellation: it is asked to stop and awaited.
A thread still running Python when the interpreter exits is ended there by
``pthread_exit`` as it takes the GIL back, and that unwinding aborted the
broker (SIGABRT, "FATAL: exception not rethrown") after an otherwise clean
stop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio
from trio.lowlevel import RunVar

T = TypeVar("T")

CPU_WORKERS = 1  # worker threads running Python beside the loop, at most (see below)
STOP_WAIT_S = 5.0  # a cancelled ``run_stoppable``'s function returns within this
STOP_POLL_S = 0.005
_LIMITER: RunVar[trio.CapacityLimiter] = RunVar("kcompat_cpu_limiter")
#: idle worker threads kept in trio's cache (``keep_threads_ready``): more than
#: the trips a broker makes at once (a CPU token, fsync passes, log opens)
THREAD_RESERVE = 8
RESERVE_CHECK_S = 0.05  # how soon the keeper replaces a worker a trip took
#: how seldom the keeper looks after a calm spell: its wait doubles from
#: RESERVE_CHECK_S up to this while no trip takes a worker (the reserve covers
#: a burst meanwhile), and drops back at once when one did
RESERVE_CHECK_MAX_S = 1.0
#: how long an idle worker of trio's cache waits for a job before it ends
#: (trio's own is 10 s): kept ready anyway, the whole reserve ended and was
#: replaced every 10 s on an idle broker
WORKER_IDLE_S = 60
RESERVE_JOIN_S = 1.0
RESERVE_RETRY_S = 10.0  # after a thread could not be started

log = logging.getLogger("kcompat.loop")


def cpu_limiter() -> trio.CapacityLimiter:
    """The limiter of this trio run's CPU-bound worker threads."""
    try:
        return _LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(CPU_WORKERS)
        _LIMITER.set(limiter)
        return limiter


async def run_cpu(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a worker thread, holding a token of ``cpu_limiter``."""
    return await trio.to_thread.run_sync(fn, *args, limiter=cpu_limiter())


async def run_stoppable(fn: Callable[[threading.Event], T]) -> T | None:
    """``fn(stop)`` in a worker thread; its result, or None if it never ran.
    Cancelled, ``stop`` is set and the loop waits for ``fn`` to return
    (``STOP_WAIT_S`` at most; ``fn`` checks ``stop`` between short steps)
    before the cancellation goes on: no thread of it outlives the broker."""
    stop, started, finished = threading.Event(), threading.Event(), threading.Event()

    def run() -> T | None:
        started.set()
        try:
            return None if stop.is_set() else fn(stop)
        finally:
            finished.set()

    try:
        return await trio.to_thread.run_sync(run, abandon_on_cancel=True)
    finally:
        stop.set()
        if started.is_set():  # else it sees ``stop`` as it starts, and does nothing
            # waited for without blocking the loop (the other tasks stop meanwhile)
            with trio.CancelScope(shield=True), trio.move_on_after(STOP_WAIT_S):
                while not finished.is_set():
                    await trio.sleep(STOP_POLL_S)


async def keep_threads_ready(reserve: int = THREAD_RESERVE) -> None:
    """Keep ``reserve`` idle workers in trio's thread cache, started by a
    thread of this function's, until cancelled: a trip to a thread then never
    starts one on the loop (see the module)."""
    try:
        from trio._core import _thread_cache as cache_module

        cache = cache_module.THREAD_CACHE
        idle: dict[Any, None] = cache._idle_workers
    except (ImportError, AttributeError) as e:
        log.info("no idle threads kept ready (trio's thread cache is not as expected: %s)", e)
        await trio.sleep_forever()
    stop = threading.Event()
    keeper = threading.Thread(target=_keep, args=(cache_module, cache, idle, reserve, stop),
                              name="kcompat-thread-reserve", daemon=True)
    idle_timeout = getattr(cache_module, "IDLE_TIMEOUT", None)
    cache_module.IDLE_TIMEOUT = WORKER_IDLE_S  # read by each worker as it waits for a job
    keeper.start()
    try:
        await trio.sleep_forever()
    finally:
        stop.set()
        keeper.join(RESERVE_JOIN_S)
        if idle_timeout is not None:
            cache_module.IDLE_TIMEOUT = idle_timeout


def _keep(cache_module: Any, cache: Any, idle: dict[Any, None], reserve: int,
          stop: threading.Event) -> None:
    """The keeper's thread: tops the idle workers up to ``reserve``. A worker
    starts with no job and waits for one (trio's idle timeout ends it later,
    and the keeper replaces it); entered in the idle dict, the loop's next
    trip may take it (dict updates are atomic under the GIL, as trio's own
    workers rely on). It looks every ``RESERVE_CHECK_S`` while trips take
    workers and less often while none does (``RESERVE_CHECK_MAX_S``): an idle
    broker's keeper woke 20 times a second for nothing."""
    wait = RESERVE_CHECK_S
    while not stop.wait(wait):
        wait = RESERVE_CHECK_S if len(idle) < reserve else min(wait * 2, RESERVE_CHECK_MAX_S)
        while len(idle) < reserve and not stop.is_set():
            try:
                worker = cache_module.WorkerThread(cache)
            except RuntimeError as e:  # no thread can be started now (a process limit)
                log.warning("no idle thread kept ready: %s", e)
                stop.wait(RESERVE_RETRY_S)
                break
            idle[worker] = None
