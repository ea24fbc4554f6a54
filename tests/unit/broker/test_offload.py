"""CPU-bound trips off the loop share one limiter: at most ``CPU_WORKERS``
worker threads run Python beside the event loop however many ask at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import trio

from kcompat.broker.loop import offload
from kcompat.broker.loop.offload import CPU_WORKERS, run_cpu, run_stoppable


def test_cpu_bound_trips_run_at_most_cpu_workers_at_once() -> None:
    lock = threading.Lock()
    running = [0]
    most = [0]

    def work(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)  # long enough for the others to have started, were they let
        with lock:
            running[0] -= 1
        return i * i

    results: dict[int, int] = {}

    async def one(i: int) -> None:
        results[i] = await run_cpu(work, i)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(one, i)

    trio.run(main)
    assert results == {i: i * i for i in range(6)}
    assert most[0] == CPU_WORKERS == 1  # trio's default would let all six run


def test_each_trio_run_has_its_own_limiter() -> None:
    """A limiter belongs to one trio run (a broker embedded twice, the tests)."""
    for _ in range(2):
        assert trio.run(run_cpu, sum, [1, 2, 3]) == 6


def test_a_stoppable_trip_returns_its_result() -> None:
    assert trio.run(run_stoppable, lambda stop: stop.is_set()) is False


def test_a_cancelled_stoppable_trip_is_stopped_and_awaited_not_abandoned() -> None:
    """Cancelled, its function is told to stop and has returned before the
    cancellation goes on: no worker thread runs Python past the broker's end
    (at interpreter exit one is ended by pthread_exit, which aborted a broker)."""
    steps: list[int] = []
    ended = threading.Event()

    def work(stop: threading.Event) -> str:
        try:
            while not stop.wait(0.01):
                steps.append(len(steps))
            time.sleep(0.1)  # a last step after the stop was seen: still awaited
            return "stopped"
        finally:
            ended.set()

    async def main() -> None:
        with trio.move_on_after(0.1):
            await run_stoppable(work)
        assert ended.is_set()  # not left running when the cancellation came through

    trio.run(main)
    assert 3 <= len(steps) < 100  # it ran, then stopped at the cancellation


def test_trips_to_threads_start_no_thread_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``keep_threads_ready`` running, a burst of trips that need as many
    threads at once as the reserve holds takes idle workers: the loop thread
    starts none (``Thread.start`` blocks its caller until the thread runs)."""
    from trio._core import _thread_cache as cache_module

    made_on: list[int] = []
    original = cache_module.WorkerThread

    class Recorded(original):  # type: ignore[valid-type,misc]
        __slots__ = ()

        def __init__(self, cache: object) -> None:
            made_on.append(threading.get_ident())
            super().__init__(cache)

    monkeypatch.setattr(cache_module, "WorkerThread", Recorded)
    idle = cache_module.THREAD_CACHE._idle_workers
    burst = len(idle) + 4  # more than the workers idle before: some must be started

    async def main() -> None:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(offload.keep_threads_ready, burst)
            with trio.fail_after(10):
                while len(idle) < burst:
                    await trio.sleep(0.01)
            together = threading.Barrier(burst, timeout=10)  # every trip in a thread of its own
            async with trio.open_nursery() as trips:
                for _ in range(burst):
                    trips.start_soon(trio.to_thread.run_sync, together.wait)
            nursery.cancel_scope.cancel()
        assert made_on, "the keeper started the reserve's workers"
        assert loop_thread not in made_on, "a trip started a thread on the loop"

    trio.run(main)


class _Stop:
    """``_keep``'s stop event: records each wait, stops after ``waits`` of them,
    and runs ``between`` (a trip taking workers) after each."""

    def __init__(self, waits: int, between: Callable[[int], None]) -> None:
        self.waited: list[float] = []
        self.waits, self.between = waits, between

    def wait(self, timeout: float) -> bool:
        self.waited.append(timeout)
        self.between(len(self.waited))
        return len(self.waited) > self.waits

    def is_set(self) -> bool:
        return False


def test_the_keeper_looks_less_often_through_a_calm_spell() -> None:
    """While no trip takes a worker the keeper's wait doubles up to
    RESERVE_CHECK_MAX_S; a worker taken brings it back to RESERVE_CHECK_S
    (it woke every 50 ms before, 20 times a second on an idle broker)."""
    idle: dict[object, None] = {}
    started: list[object] = []

    def worker(_cache: object) -> object:
        started.append(object())
        return started[-1]

    def trips(n: int) -> None:
        if n == 12:  # a trip takes two workers after a calm spell
            for w in list(idle)[:2]:
                del idle[w]

    stop = _Stop(16, trips)
    offload._keep(SimpleNamespace(WorkerThread=worker), None, idle, 4, stop)  # type: ignore[arg-type]
    check, top = offload.RESERVE_CHECK_S, offload.RESERVE_CHECK_MAX_S
    calm = [check, check, *(min(check * 2 ** k, top) for k in range(1, 10))]
    assert stop.waited[:11] == calm, stop.waited
    assert stop.waited[11] == top and stop.waited[12] == check  # taken: back to the short wait
    assert len(started) == 4 + 2 and len(idle) == 4  # the reserve, then the two replaced


def test_the_reserves_workers_wait_a_minute_for_a_job() -> None:
    """trio ends a worker after 10 s without a job and the keeper started the
    reserve anew each time; while it runs, a worker waits WORKER_IDLE_S."""
    from trio._core import _thread_cache as cache_module

    before = cache_module.IDLE_TIMEOUT
    seen: list[float] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(offload.keep_threads_ready, 1)
            await trio.sleep(0.01)
            seen.append(cache_module.IDLE_TIMEOUT)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert seen == [offload.WORKER_IDLE_S] and cache_module.IDLE_TIMEOUT == before
