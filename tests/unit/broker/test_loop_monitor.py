"""The event-loop monitor names a task that holds the loop and measures the
lag it causes (lower bounds only: a blocking step of 250 ms took at least
that long, and a timer due during it fired at least 150 ms late)."""

from __future__ import annotations

import gc
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest

from kcompat.broker.loop.backpressure import Backpressure, LagSource
from kcompat.broker.loop.loop_monitor import LoopMonitor, labelled, sleep_on_grid


async def _holds_the_loop() -> None:
    await trio.sleep(0.05)
    time.sleep(0.25)  # a step that never checkpoints


async def _serving() -> None:
    await trio.sleep(0.01)  # once the monitor runs
    with labelled("Fetch request"):  # as a connection's task serving one request
        time.sleep(0.06)
        await trio.sleep(0)
    time.sleep(0.001)  # after the request: the task's own kind again
    await trio.sleep(0)


async def _polite() -> None:
    for _ in range(20):
        await trio.sleep(0.01)


def test_a_long_step_is_named_and_its_lag_measured() -> None:
    registry = CollectorRegistry()
    monitor = LoopMonitor(registry)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            nursery.start_soon(_polite)
            nursery.start_soon(_serving)
            await trio.sleep(0.02)
            await _holds_the_loop()
            await trio.sleep(0.25)
            nursery.cancel_scope.cancel()

    trio.run(main)
    longest = monitor.steps.longest
    assert longest["test_a_long_step_is_named_and_its_lag_measured.main"] >= 0.25
    assert longest.get("_polite", 0.0) < 0.25
    assert longest["Fetch request"] >= 0.06 and longest.get("_serving", 0.0) < 0.06
    assert longest.get("LoopMonitor.run", 0.0) < 0.25  # its own first step is not counted from 0
    assert monitor.lag_max_s >= 0.15
    text = generate_latest(registry).decode()
    assert ('kcompat_event_loop_long_steps_total{task="test_a_long_step_is_named_and_its_lag_'
            'measured.main"} 1.0') in text
    assert "kcompat_event_loop_lag_seconds_bucket" in text
    assert 'kcompat_event_loop_longest_step_seconds{task="Fetch request"}' in text


def test_a_long_step_is_reported_with_where_it_was(caplog) -> None:  # type: ignore[no-untyped-def]
    """The watch thread samples the loop thread's stack during a step over
    budget; the step's report names the function it was in."""
    monitor = LoopMonitor(CollectorRegistry())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            await trio.sleep(0.02)
            await _holds_the_loop()
            await _serving()  # a step of 60 ms
            nursery.cancel_scope.cancel()

    with caplog.at_level(logging.INFO, logger="kcompat.loop"):
        trio.run(main)
    held = [record.getMessage() for record in caplog.records if "was held" in record.getMessage()]
    assert any("of test_a_long_step_is_reported_with_where_it_was.main at " in line
               and "_holds_the_loop" in line for line in held), held
    # and how much of it the loop thread ran on a CPU: a step that sleeps waited
    shares = [re.search(r"on a CPU (\d+)% of its last ([\d.]+) s", line) for line in held
              if "_holds_the_loop" in line]
    assert shares and all(m is not None and int(m[1]) <= 20 and float(m[2]) > 0.05
                          for m in shares), held


async def _steps_of(*steps: tuple[str, float]) -> None:
    for how, length in steps:
        if how == "sleep":  # one step of that length, off the CPU
            time.sleep(length)
        else:  # one step that runs that long on the CPU
            until = time.thread_time() + length
            while time.thread_time() < until:
                pass
        await trio.sleep(0)


@pytest.mark.parametrize("trace_ms", [0, 3])
def test_the_step_trace_logs_every_step_over_its_threshold(caplog, trace_ms: int) -> None:  # type: ignore[no-untyped-def]
    """``kcompat.loop.trace.ms``: each step of at least that long is one line
    with its kind, its length, when it began and its CPU time; a shorter one
    is not; off by default."""
    monitor = LoopMonitor(CollectorRegistry(), trace_ms=trace_ms)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            await trio.sleep(0.02)
            began = time.time()
            await _steps_of(("sleep", 0.001), ("sleep", 0.006), ("run", 0.012), ("sleep", 0.2))
            nursery.cancel_scope.cancel()
        seen.append(began)

    seen: list[float] = []
    with caplog.at_level(logging.INFO, logger="kcompat.loop.trace"):
        trio.run(main)
    lines = [r.getMessage() for r in caplog.records if r.name == "kcompat.loop.trace"]
    if not trace_ms:
        assert lines == []
        return
    mine = [line for line in lines
            if line.startswith("step of test_the_step_trace_logs_every_step_over_its_threshold.main:")]
    found = [re.search(r": ([\d.]+) ms from ([\d.]+), ([\d.]+) ms on a CPU", line)
             for line in mine]
    assert all(found), mine
    took, starts, cpu = zip(*((float(m[1]), float(m[2]), float(m[3])) for m in found if m),
                            strict=True)
    # no line for a step under the threshold: the 1 ms one has a line only if a busy
    # host kept it from the loop past 3 ms (it slept 1 ms and waited 4.7 for a core
    # once, under four test workers), and then it says so
    assert all(t >= trace_ms for t in took), mine
    if len(mine) == 4:
        took, starts, cpu, mine = took[1:], starts[1:], cpu[1:], mine[1:]
    assert len(mine) == 3, lines  # 6, 12 and 200 ms
    assert took[0] >= 6 and took[1] >= 12 and took[2] >= 200, mine
    assert seen[0] - 0.01 <= starts[0] <= starts[1] <= starts[2] <= time.time(), (seen, mine)
    assert cpu[1] >= 12 and cpu[0] < 3 and cpu[2] < 30, mine  # the step that ran, not the sleeps
    # a long step: where it was. The watch thread looks every 50 ms and samples a
    # step 50 ms old, so it has looked at least twice by the end of the 200 ms one;
    # the 6 ms step is too short for a look unless a busy host made it 50 ms long
    assert " at " in mine[2], mine
    assert " at " not in mine[0] or took[0] >= 50, mine
    if os.path.exists("/proc/thread-self/schedstat"):  # and its wait for a core (Linux)
        waits = [re.search(r" on a CPU, ([\d.]+) ms waiting for a core", line) for line in mine]
        assert all(m is not None and 0 <= float(m[1]) <= t + 1 for m, t in zip(waits, took,
                                                                                   strict=True)), mine


def test_the_cpu_time_of_a_long_step_is_bounded_apart_from_its_wall_time() -> None:
    """A step that waits 600 ms off the CPU (a blocking sleep: as descheduled by
    a busy host) counts as CPU time only what passed before the watch thread
    first saw it (within 50 ms, later on a loaded host); a step that computes
    for 300 ms of CPU time counts all of it."""
    registry = CollectorRegistry()
    monitor = LoopMonitor(registry)

    def spin(cpu_seconds: float) -> None:
        end = time.thread_time() + cpu_seconds
        while time.thread_time() < end:
            pass

    async def waits() -> None:
        with labelled("Waiting request"):
            time.sleep(0.6)
            await trio.sleep(0)

    async def computes() -> None:
        with labelled("Computing request"):
            spin(0.3)
            await trio.sleep(0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            await trio.sleep(0.02)
            await waits()
            await computes()
            nursery.cancel_scope.cancel()

    trio.run(main)
    wall, on_cpu = monitor.steps.longest, monitor.steps.longest_on_cpu
    assert wall["Waiting request"] >= 0.6 and wall["Computing request"] >= 0.3
    assert on_cpu["Waiting request"] <= 0.4, on_cpu
    assert on_cpu["Computing request"] >= 0.3, on_cpu
    text = generate_latest(registry).decode()
    assert 'kcompat_event_loop_longest_step_on_cpu_seconds{task="Waiting request"}' in text


def test_a_step_that_served_a_request_counts_as_that_request() -> None:
    """A connection's step that leaves the request's block and goes on (to
    send the answer) without a checkpoint is the request's, not the
    connection task's."""
    monitor = LoopMonitor(CollectorRegistry())

    async def connection() -> None:
        await trio.sleep(0.01)
        with labelled("Produce request"):
            time.sleep(0.03)
        time.sleep(0.03)  # the answer sent in the same step
        await trio.sleep(0)
        time.sleep(0.002)  # a later step of its own
        await trio.sleep(0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            await connection()
            nursery.cancel_scope.cancel()

    trio.run(main)
    longest = monitor.steps.longest
    assert longest["Produce request"] >= 0.06
    own = longest["test_a_step_that_served_a_request_counts_as_that_request.main"]
    assert 0.002 <= own < 0.06


def test_garbage_collections_are_timed_per_generation() -> None:
    """A collection holds the GIL, whichever thread runs it: each is observed."""
    registry = CollectorRegistry()
    monitor = LoopMonitor(registry)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            await trio.sleep(0.01)
            gc.collect()  # a full one, from a task
            await trio.to_thread.run_sync(gc.collect, 0)  # a young one, from a worker
            nursery.cancel_scope.cancel()

    trio.run(main)
    text = generate_latest(registry).decode()
    counts = dict(re.findall(r'kcompat_gc_pause_seconds_count\{generation="(\d)"\} ([\d.]+)', text))
    assert float(counts.get("2", 0)) >= 1 and float(counts.get("0", 0)) >= 1, counts
    assert monitor._gc_pause not in gc.callbacks  # removed with the monitor


def test_the_watch_thread_has_ended_when_the_monitor_has() -> None:
    """No thread of the monitor runs on past the broker (see ``offload``)."""
    def watching() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "kcompat-loop-watch"]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(LoopMonitor().run)
            await trio.sleep(0.02)
            assert watching()
            nursery.cancel_scope.cancel()
        assert not watching()

    trio.run(main)


class _Starting:
    """What ``_warm_codec`` looks at of a broker: it serves at once, replays
    its logs while ``cluster.replaying``, elects and loads its groups while
    ``cluster.settling``, and its delayed delivery is ``overdue`` seconds
    behind (a real ``Backpressure``; late beyond 0.5 s); ``warm``: its
    ``kcompat.codec.warm``."""

    def __init__(self, replaying: bool, overdue: float = 0.0, warm: bool = True) -> None:
        async def wait_serving(timeout_s: float) -> None:
            return None

        self.controller = SimpleNamespace(lifecycle=SimpleNamespace(wait_serving=wait_serving))
        self.cluster = SimpleNamespace(replaying=replaying, settling=False)
        self.state = SimpleNamespace(config={"kcompat.codec.warm": warm})
        self.overdue = overdue
        self.backpressure = Backpressure()
        self.backpressure.register(LagSource(
            "delayed", lambda _key: self.overdue, lambda: [("__kc_schedule-0", self.overdue)]))


def _warms_only_after(monkeypatch: pytest.MonkeyPatch, broker: _Starting,
                      release: Callable[[], object], what: str) -> None:
    """``_warm_codec`` on ``broker`` warms nothing for 0.4 s, then once after
    ``release()``."""
    from kcompat.broker.node import server
    warmed: list[float] = []
    monkeypatch.setattr(server.codec, "warm", lambda *_a: warmed.append(time.monotonic()))
    monkeypatch.setattr(server.gc, "freeze", lambda: None)
    monkeypatch.setattr(server, "WARM_POLL_S", 0.01)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._warm_codec, broker)
            await trio.sleep(0.4)
            assert not warmed, f"warmed while {what}"
            release()
        assert len(warmed) == 1

    trio.run(main)


def test_the_codec_warm_up_says_when_it_is_over(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """One line once every version is loaded (a benchmark waits for it before it
    measures: the warm-up's imports take a quarter of the GIL meanwhile)."""
    from kcompat.broker.node import server
    monkeypatch.setattr(server.codec, "warm", lambda *_a: 7)
    monkeypatch.setattr(server.gc, "freeze", lambda: None)
    with caplog.at_level(logging.INFO, logger="kcompat.broker"):
        trio.run(server._warm_codec, _Starting(replaying=False))
    said = [r.getMessage() for r in caplog.records if "codec warm-up" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("codec warm-up: 7 API versions loaded in "), said


def test_the_codec_warm_up_waits_for_the_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up's imports would take the GIL from a restart's replays,
    which its leaders wait for before they serve: it starts once they end."""
    broker = _Starting(replaying=True)
    _warms_only_after(monkeypatch, broker, partial(setattr, broker.cluster, "replaying", False),
                      "replaying")


def test_the_codec_warm_up_waits_for_a_restarts_catch_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a restart with a delayed backlog, delivery catches up on what came
    due while the broker was down; the warm-up's imports would take a fifth
    of the GIL from it: it starts once no service is behind (0.6 s late is
    behind, beyond the 0.5 s bound)."""
    broker = _Starting(replaying=False, overdue=0.6)
    _warms_only_after(monkeypatch, broker, partial(setattr, broker, "overdue", 0.1),
                      "delivery was behind")


def test_the_codec_warm_up_waits_until_the_groups_have_leaders_and_are_loaded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule partition reports its lateness once its leader has loaded it:
    before, a delivery about to catch up looks on time."""
    broker = _Starting(replaying=False)
    broker.cluster.settling = True
    _warms_only_after(monkeypatch, broker, partial(setattr, broker.cluster, "settling", False),
                      "the groups were settling")


def test_the_warm_up_pauses_three_times_as_long_as_each_version_took() -> None:
    """A version that took 40 ms (of work, or of waiting for the GIL a busy loop
    holds) is followed by a pause of 120 ms: the warm-up holds the GIL a
    quarter of the time at most; a stop ends the pause at once."""
    from kcompat.broker.node import server
    stop = threading.Event()
    go_on = server.paced(stop)
    time.sleep(0.04)  # the first version
    began = time.perf_counter()
    assert go_on()
    paused = time.perf_counter() - began
    assert 0.12 <= paused < 1.0
    began = time.perf_counter()
    assert go_on()  # the next version took nothing: the least pause
    assert time.perf_counter() - began < 0.3  # not 3 x the 120 ms before
    stop.set()
    began = time.perf_counter()
    assert not go_on()
    assert time.perf_counter() - began < 0.05


def test_a_stop_during_the_warm_up_ends_it_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker stopped while it warms the codec waits for the warm-up's
    thread, which stops after the version it is on (a pause each)."""
    from kcompat.broker.node import server
    loaded: list[int] = []

    def warm(ranges: object, go_on: Callable[[], bool]) -> int:
        while go_on():
            loaded.append(1)
        return len(loaded)

    monkeypatch.setattr(server.codec, "warm", warm)
    monkeypatch.setattr(server, "WARM_PAUSE_S", 0.01)

    async def main() -> None:
        with trio.move_on_after(0.2):
            await server._warm_codec(_Starting(replaying=False))
        stopped_at = len(loaded)
        await trio.sleep(0.1)
        assert len(loaded) == stopped_at > 3  # it ran, and no longer does

    trio.run(main)


def test_the_broker_freezes_what_it_starts_with_once_the_codec_is_warm() -> None:
    """After the warm-up the objects of the start (modules, schemas) sit in the
    collector's permanent generation, which full collections do not walk."""
    from kcompat.broker.node import server
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        trio.run(server._warm_codec, _Starting(replaying=False))
        frozen = gc.get_freeze_count()
        assert frozen > 10_000
        registry = CollectorRegistry()
        LoopMonitor(registry)
        # counted when frozen; a frozen object freed since leaves the generation
        assert 0 <= _frozen_gauge(generate_latest(registry).decode()) - frozen < frozen // 100
    finally:
        gc.unfreeze()


def test_a_threads_stack_is_read_in_one_walk_of_faulthandler() -> None:
    """``stack_of`` reads another thread's frames as faulthandler writes them
    (one C walk holding the GIL), outermost first, with file, line and
    function; an unknown thread has none."""
    import threading

    from kcompat.broker.loop.loop_monitor import stack_of, where_of

    started, release = threading.Event(), threading.Event()
    idents: list[int] = []

    def parked_here() -> None:
        idents.append(threading.get_ident())
        started.set()
        release.wait(10)

    t = threading.Thread(target=parked_here)
    t.start()
    try:
        assert started.wait(10)
        frames = stack_of(idents[0])
        names = [func for _file, _line, func in frames]
        assert "parked_here" in names and names.index("run") < names.index("parked_here")
        file, line, _ = frames[names.index("parked_here")]
        assert file == __file__ and line > 0
        # none of kcompat's own: where it waits is its innermost frame
        where = where_of(frames)
        assert "/threading.py:" in where and where.endswith(" wait"), where
        assert stack_of(1) == []
    finally:
        release.set()
        t.join()


def test_a_scrape_does_not_walk_the_frozen_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gc.get_freeze_count`` walks the whole permanent generation (16 ms per
    million objects): read per scrape it was most of a ``/metrics`` step on the
    loop. The count is taken once, where the broker freezes."""
    from kcompat.broker.loop import loop_monitor
    gc.unfreeze()
    try:
        loop_monitor.freeze()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        walks: list[int] = []
        monkeypatch.setattr(loop_monitor.gc, "get_freeze_count", lambda: walks.append(1) or 0)
        registry = CollectorRegistry()
        LoopMonitor(registry)
        for _ in range(3):
            text = generate_latest(registry).decode()
        assert walks == []
        assert 0 <= _frozen_gauge(text) - frozen < max(frozen // 100, 100)
    finally:
        gc.unfreeze()


def _frozen_gauge(text: str) -> int:
    (value,) = re.findall(r"^kcompat_gc_frozen_objects (\S+)$", text, re.M)
    return int(float(value))


@pytest.mark.parametrize("start", [0.0, 2.15, 4.05, 1234.567, 99_999.95])
def test_grid_sleeps_wake_together_and_always_move_on(start: float) -> None:
    """A 50 ms and a 100 ms sleeper on the grid share every 100 ms wake-up, and
    each wakes strictly later than it slept (2.15 / 0.05 rounds below 43: a
    deadline of ``now`` made a ticker spin without trio's clock moving)."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    woke: dict[float, list[float]] = {0.05: [], 0.1: []}

    async def sleeper(period: float) -> None:
        for _ in range(20 if period == 0.05 else 10):
            before = trio.current_time()
            asked = await sleep_on_grid(period)
            assert asked > before and trio.current_time() == asked
            woke[period].append(asked)

    async def main() -> None:
        clock.jump(start)
        with trio.fail_after(5):  # of the mock clock: a spin never gets there
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sleeper, 0.05)
                nursery.start_soon(sleeper, 0.1)

    trio.run(main, clock=clock)
    assert set(woke[0.1]) <= set(woke[0.05])
    assert all(0.04 < b - a < 0.06 for a, b in zip(woke[0.05], woke[0.05][1:], strict=False))


def test_the_watch_thread_takes_no_stack_while_the_loop_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Between steps the loop waits in its I/O wait, which is no step: an idle
    broker's loop, waking every 100 ms for a short step, has no stack walked
    (each wait over LONG_STEP_S after a step was taken for a step running on,
    and walked every thread's stack: most of an idle broker's watch thread)."""
    from kcompat.broker.loop import loop_monitor

    walks: list[int] = []
    real = loop_monitor.stack_of

    def counted(thread: int) -> list[loop_monitor.Frame]:
        walks.append(thread)
        return real(thread)

    monkeypatch.setattr(loop_monitor, "stack_of", counted)
    monitor = LoopMonitor(CollectorRegistry())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            for _ in range(8):
                await trio.sleep(0.15)  # short steps, long waits between them
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert walks == []


def test_a_broker_told_not_to_warm_its_codec_still_freezes_what_it_starts_with(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``kcompat.codec.warm=false`` (a short-lived broker): no version is loaded
    ahead, and the start's objects are frozen all the same."""
    from kcompat.broker.node import server
    warmed: list[object] = []
    frozen: list[bool] = []
    monkeypatch.setattr(server.codec, "warm", lambda *a: warmed.append(a))
    monkeypatch.setattr(server.loop_monitor, "freeze", lambda: frozen.append(True))
    trio.run(server._warm_codec, _Starting(replaying=False, warm=False))
    assert not warmed and frozen == [True]
    trio.run(server._warm_codec, _Starting(replaying=False))
    assert len(warmed) == 1 and frozen == [True, True]
