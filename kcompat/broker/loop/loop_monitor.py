"""How long the event loop keeps its tasks waiting: lag and the longest steps.

Theory of operation
-------------------
A broker node runs every task on one trio loop: connections, the Raft driver,
the controller's heartbeats and fencing, the services (docs/architecture.md, principle 8). trio
switches tasks only at checkpoints, so the control plane keeps its deadlines
only while no task holds the loop for long. That is a rule for every piece of
work (replays and deliveries are cut into turns: ``Group.feed``, the delay
service's batches) and this module makes it visible:

* ``kcompat_event_loop_lag_seconds`` (histogram): a probe task asks to sleep
  until the next multiple of ``PROBE_INTERVAL_S`` and measures how much later
  than asked it woke — the time a timer of the control plane (a heartbeat, a
  Raft tick) waits for the loop at that moment. The Raft ticker sleeps on the
  same grid (``sleep_on_grid``), so the probe's timer is one of the ticker's
  and costs an idle broker no wake-up of its own;
* ``kcompat_event_loop_longest_step_seconds{task}`` (gauge): per kind of task
  (its coroutine function, or what it is labelled as doing: a connection's
  task is ``"<API> request"`` in a step that served one), the longest single step it
  ran between two checkpoints since the broker started; ``kcompat_event_loop_long_steps_total
  {task}`` counts steps over ``LONG_STEP_S`` (50 ms, the budget of issue 31),
  and a step over ``WARN_STEP_S`` is logged with its task kind (once per kind
  and minute), so the culprit of a stall is named, not guessed;
* where a long step was: a watch thread wakes every ``WATCH_EVERY_S`` and, when
  the step under way has run ``LONG_STEP_S`` or more, takes the loop thread's
  stack (``stack_of``: ``faulthandler`` writes every thread's frames in one C
  walk that keeps the GIL — a walk in Python, ``f_back`` after ``f_back``,
  lets the loop thread run between two steps and pop the frames being
  walked, and CPython 3.11 then reads a freed code object: a broker of a CI
  run died of that, a segfault in ``PyCode_Addr2Line``) — a sample, as a sampling profiler takes one,
  of where the step spends its time. When that step ends over ``LONG_STEP_S``
  it is logged with its sampled frames (the innermost of kcompat and what they
  called), at INFO, or WARNING over ``WARN_STEP_S`` (once per kind and minute
  each). The thread reads two attributes twenty times a second and walks a
  stack only during a step already over budget: steps within it cost nothing.
  At its first look at each step it reads the loop thread's CPU clock, and
  the report of a long step says how much of it from then on the loop
  thread spent on a CPU (all of it but the first ``WATCH_EVERY_S`` at most): a step
  that held the loop 150 ms on 20 % of a CPU waited — for the GIL, held by a
  worker thread, or for a core taken by other processes — and is not what its
  code costs (the step trace below tells a wait for a core from a wait for
  the GIL). ``kcompat_event_loop_longest_step_on_cpu_seconds{task}`` is the
  most CPU time one step of a kind may have taken: the wall time before the
  first look counted whole, the CPU clock after it (a step the watch thread
  never saw counts whole). On a host whose cores other processes take, the
  wall-clock gauge measures the host; this one measures the code.

* ``kcompat_gc_pause_seconds{generation}`` (histogram): each collection of
  the garbage collector, whichever thread it ran in — it holds the GIL, so
  the loop waits it out. A long step found at an allocation, not at its own
  work, is most often one of these (``server``: why the broker freezes what
  it starts with).

* a trace of the steps (``kcompat.loop.trace.ms``, off by default): every
  step of at least that many milliseconds, one line each on the logger
  ``kcompat.loop.trace`` — its kind, its length, when it began, how much of
  it ran on a CPU and how much it waited for a core (``TracingStepTimer``
  reads the loop thread's CPU clock and run-queue time at every step, about
  5 µs the plain timer does not pay), and for a step over ``LONG_STEP_S``
  where it was. The time off a CPU not spent waiting for a core was spent
  waiting for the GIL. The gauges keep only the worst of
  each kind, and a p99 moves by less than its own noise from run to run;
  the trace, set against a client's slow answers, names the steps that made
  them (the delivery's reads of issue 31 were found that way).

The step timing is a trio ``Instrument``: two clock reads per task step, and
the kind of a task looked up only for a step of 1 ms or more
(``SHORT_STEP_S``; the gauge lists the kinds that ever took that long). Pure
observation: nothing here changes the order in which tasks run.
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import logging
import math
import os
import re
import tempfile
import threading
import time
from types import CodeType
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import trio
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Iterable

log = logging.getLogger("kcompat.loop")
trace_log = logging.getLogger("kcompat.loop.trace")

PROBE_INTERVAL_S = 0.1
SHORT_STEP_S = 0.001  # steps shorter than this are not looked at (kind, longest)
LONG_STEP_S = 0.05
WARN_STEP_S = 0.5
# once per kind and this many seconds (KCOMPAT_LOOP_REPORT_EVERY_S=0: every long step, to debug)
WARN_EVERY_S = float(os.environ.get("KCOMPAT_LOOP_REPORT_EVERY_S", "60"))
WATCH_EVERY_S = 0.05  # the watch thread's period: a step over ~100 ms is always sampled
WATCH_JOIN_S = 1.0  # at stop, the watch thread ends within one sample
WHERE_FRAMES = 6  # frames of kcompat named in a long step's report, innermost last
LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# a task's kind while it does one thing that says more than its coroutine
# (a connection's task serving one request: ``labelled``)
_LABELS: WeakKeyDictionary[trio.lowlevel.Task, str] = WeakKeyDictionary()
# the label a task left last and when (a step that served a request and went
# on to send its answer counts as that request, not as the connection's task)
_LEFT: WeakKeyDictionary[trio.lowlevel.Task, tuple[str, float]] = WeakKeyDictionary()


class labelled:
    """``with labelled("Fetch request"):`` — the current task's steps that run
    any of the block count under that kind (outside trio: nothing)."""

    __slots__ = ("kind", "task")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.task: trio.lowlevel.Task | None = None

    def __enter__(self) -> None:
        try:
            self.task = trio.lowlevel.current_task()
        except RuntimeError:
            return
        _LABELS[self.task] = self.kind

    def __exit__(self, *exc: object) -> None:
        if self.task is not None:
            _LABELS.pop(self.task, None)
            _LEFT[self.task] = (self.kind, time.perf_counter())


def task_kind(task: trio.lowlevel.Task, names: dict[CodeType, str],
              step_started: float = 0.0) -> str:
    """What a task is doing (``labelled``) or did during the step that began at
    ``step_started``, else the coroutine function it runs
    (``DelayService._serve_target``...)."""
    label = _LABELS.get(task)
    if label is not None:
        return label
    left = _LEFT.get(task)
    if left is not None and left[1] >= step_started:
        return left[0]
    code = getattr(task.coro, "cr_code", None)
    if code is None:
        return task.name
    found = names.get(code)
    if found is None:
        found = names[code] = code.co_qualname.replace(".<locals>", "")
    return found


class StepTimer(trio.abc.Instrument):
    """The longest step of each kind of task (see the module)."""

    #: steps at least this long go to ``_trace`` (a ``TracingStepTimer``'s; never here)
    trace_s = math.inf

    def __init__(self, long_steps: Counter | None = None) -> None:
        self.longest: dict[str, float] = {}
        # per kind, the most CPU time one step may have taken (``after_task_step``)
        self.longest_on_cpu: dict[str, float] = {}
        self._names: dict[CodeType, str] = {}
        self._started = 0.0
        self._warned: dict[str, float] = {}
        self._told: dict[str, float] = {}
        self._long_steps = long_steps
        # the step a sample was taken of (its start) and where the loop thread was
        self._where: tuple[float, str] = (0.0, "")
        # the step the watch thread first saw under way (its start), and then the wall
        # clock and the loop thread's CPU clock (``sample``)
        self._seen: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self._cpu_clock: int | None = None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        # no step under way now: the watch thread must not take the time the
        # loop then waits for a step that runs on (``sample``)
        step_started, self._started = self._started, 0.0
        if not step_started:
            return  # the step that added this instrument: its start was not seen
        took = time.perf_counter() - step_started
        if took < SHORT_STEP_S:  # most steps: no lookup at all
            return
        if took < LONG_STEP_S:
            kind = task_kind(task, self._names, step_started)
            if took > self.longest.get(kind, 0.0):
                self.longest[kind] = took
            if took > self.longest_on_cpu.get(kind, 0.0):
                self.longest_on_cpu[kind] = took
            if took >= self.trace_s:
                self._trace(kind, step_started, took, "")
            return
        started, where = self._where
        if started != step_started:
            where = ""
        seen, wall, cpu = self._seen
        on_cpu = took
        if seen == started and wall:  # the loop thread's CPU time since seen
            since = time.thread_time() - cpu
            on_cpu = min(took, (wall - started) + since)
            if where:
                share = since / max(time.perf_counter() - wall, 1e-6)
                where += (f" (on a CPU {min(share, 1.0):.0%} of its last "
                          f"{took - (wall - started):.3f} s)")
        kind = task_kind(task, self._names, step_started)
        self._long(kind, took, where, on_cpu)
        if took >= self.trace_s:
            self._trace(kind, step_started, took, where)

    def _trace(self, kind: str, started: float, took: float, where: str) -> None:
        """Nothing: a ``TracingStepTimer`` writes the step trace."""

    def close(self) -> None:
        """Nothing to release (a ``TracingStepTimer`` has a file open)."""

    def _long(self, kind: str, took: float, where: str = "", on_cpu: float | None = None
              ) -> None:
        if took > self.longest.get(kind, 0.0):
            self.longest[kind] = took
        bound = took if on_cpu is None else on_cpu
        if bound > self.longest_on_cpu.get(kind, 0.0):
            self.longest_on_cpu[kind] = bound
        if self._long_steps is not None:
            self._long_steps.labels(kind).inc()
        now = time.monotonic()
        at = f" at {where}" if where else ""
        if took >= WARN_STEP_S:
            if now - self._warned.get(kind, -WARN_EVERY_S) >= WARN_EVERY_S:
                self._warned[kind] = now
                log.warning("the event loop was held %.0f ms by one step of %s%s",
                            took * 1000, kind, at)
        elif where and now - self._told.get(kind, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._told[kind] = now
            log.info("the event loop was held %.0f ms by one step of %s%s", took * 1000, kind, at)

    def sample(self, loop_thread: int) -> None:
        """From the watch thread: if the step under way has run ``LONG_STEP_S``
        or more, note where the loop thread is (once per step)."""
        started = self._started
        if started and self._seen[0] != started:  # the first look at this step
            cpu = self._cpu_time(loop_thread)
            if cpu is not None:
                self._seen = (started, time.perf_counter(), cpu)
        if not started or time.perf_counter() - started < LONG_STEP_S or self._where[0] == started:
            return
        frames = stack_of(loop_thread)
        if not frames or self._started != started:
            return  # the step ended meanwhile
        self._where = (started, where_of(frames))

    def _cpu_time(self, loop_thread: int) -> float | None:
        """The loop thread's CPU time so far (None where the platform has no
        per-thread CPU clock): a step that ran long on little CPU waited — for
        the GIL (a busy worker thread) or for a core (other processes) — and
        is not the cost of its own code."""
        try:
            if self._cpu_clock is None:
                self._cpu_clock = time.pthread_getcpuclockid(loop_thread)
            return time.clock_gettime(self._cpu_clock)
        except (AttributeError, OSError):
            return None


class TracingStepTimer(StepTimer):
    """A ``StepTimer`` that also writes the step trace (``kcompat.loop.trace.ms``):
    it reads the loop thread's CPU clock before each step (a system call per
    step, which the plain timer does not pay), so each traced step says how
    much of it ran on a CPU — on a host whose cores other processes take, a
    100 ms step may have run 10 ms and waited the rest. Where Linux keeps the
    thread's scheduler statistics it also reads its run-queue time
    (``RunQueueClock``), so the line says how much of that wait was for a core;
    the rest of the time off a CPU the loop thread waited for the GIL."""

    def __init__(self, long_steps: Counter | None, trace_s: float) -> None:
        super().__init__(long_steps)
        # never below ``SHORT_STEP_S``: shorter steps are not looked at
        self.trace_s = max(trace_s, SHORT_STEP_S)
        self._cpu_started = 0.0
        self._queued_started = 0
        self._queue: RunQueueClock | None = None
        self._queue_opened = False

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._cpu_started = time.thread_time()
        queue = self._queue
        if queue is not None:
            self._queued_started = queue.read()
        elif not self._queue_opened:  # in the loop thread: its own statistics
            self._queue_opened = True
            self._queue = RunQueueClock.of_this_thread()
        self._started = time.perf_counter()

    def _trace(self, kind: str, started: float, took: float, where: str) -> None:
        """One line of the trace: the step's kind, its length, the wall clock
        of its start (to set against a client's timings), its CPU time and
        its wait for a core."""
        cpu = time.thread_time() - self._cpu_started
        queued = ""
        if self._queue is not None and self._queued_started >= 0:
            now = self._queue.read()
            if now >= 0:
                queued = f", {(now - self._queued_started) / 1e6:.1f} ms waiting for a core"
        began = time.time() - (time.perf_counter() - started)
        at = f" at {where}" if where else ""
        trace_log.info("step of %s: %.1f ms from %.4f, %.1f ms on a CPU%s%s", kind,
                       took * 1000, began, cpu * 1000, queued, at)

    def close(self) -> None:
        if self._queue is not None:
            self._queue.close()
            self._queue = None


class RunQueueClock:
    """A thread's time waiting for a core so far (nanoseconds, -1 when it
    could not be read): the second field of Linux's
    ``/proc/thread-self/schedstat``. Read with libc's ``pread`` called through
    ``ctypes.PyDLL``, which keeps the GIL: ``os.pread`` gives it up, and the
    loop thread would then wait to get it back before every step it traces."""

    def __init__(self, fd: int, pread: Any) -> None:
        self._fd = fd
        self._pread = pread
        self._buf = ctypes.create_string_buffer(128)

    @classmethod
    def of_this_thread(cls) -> RunQueueClock | None:
        try:
            fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None  # not Linux, or no scheduler statistics
        try:
            pread = ctypes.PyDLL(None).pread
            pread.restype = ctypes.c_ssize_t
            pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)
        except (OSError, AttributeError):
            os.close(fd)
            return None
        clock = cls(fd, pread)
        if clock.read() < 0:
            os.close(fd)
            return None
        return clock

    def close(self) -> None:
        os.close(self._fd)

    def read(self) -> int:
        n = self._pread(self._fd, self._buf, 127, 0)
        if n <= 0:
            return -1
        fields = self._buf.raw[:n].split()
        try:
            return int(fields[1])
        except (IndexError, ValueError):
            return -1


Frame = tuple[str, int, str]  # file name, line, function
_FRAME_LINE = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')
_DUMP = threading.local()  # each thread's file for faulthandler to write to


def stack_of(thread: int) -> list[Frame]:
    """The frames of the thread whose ident is ``thread``, outermost first
    (the innermost 100 at most), as ``faulthandler`` writes them — one C walk
    of every thread's frames that never lets the GIL go (see the module);
    empty if the thread is not found."""
    dump = getattr(_DUMP, "file", None)
    if dump is None:
        dump = _DUMP.file = tempfile.TemporaryFile()
    dump.seek(0)
    dump.truncate()
    faulthandler.dump_traceback(dump, all_threads=True)
    dump.seek(0)
    text = dump.read().decode("utf-8", "replace")
    frames: list[Frame] = []
    mine = False
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            mine = int(line.split("0x", 1)[1].split()[0], 16) == thread
        elif mine and (found := _FRAME_LINE.match(line)):
            frames.append((found[1], int(found[2]), found[3]))
    frames.reverse()
    return frames


def where_of(frames: list[Frame]) -> str:
    """The innermost ``WHERE_FRAMES`` frames of kcompat of ``frames``
    (outermost first), and the frame they called into if it is not kcompat's
    own (``json/decoder.py:353 raw_decode``)."""
    ours = [at for at in frames if "/kcompat/" in at[0]]
    named = [f"{_short(name)}:{line} {func}" for name, line, func in ours[-WHERE_FRAMES:]]
    if frames and "/kcompat/" not in frames[-1][0]:
        name, line, func = frames[-1]
        named.append(f"{_short(name)}:{line} {func}")
    return " > ".join(named)


def _short(filename: str) -> str:
    cut = filename.rfind("/kcompat/")
    if cut >= 0:
        return filename[cut + 1:]
    parts = filename.rsplit("/", 2)
    return "/".join(parts[-2:])


class LoopMonitor:
    """The lag probe and the step timer of one broker (its registry)."""

    def __init__(self, registry: CollectorRegistry | None = None, trace_ms: int = 0) -> None:
        self.lag = Histogram("kcompat_event_loop_lag_seconds",
                             "How much later than asked a timer of the event loop fires "
                             "(probed every 100 ms)", buckets=LAG_BUCKETS_S, registry=registry)
        long_steps = Counter("kcompat_event_loop_long_steps",
                             "Task steps that held the event loop over 50 ms, per task kind",
                             ["task"], registry=registry)
        self.steps = (TracingStepTimer(long_steps, trace_ms / 1000) if trace_ms
                      else StepTimer(long_steps))
        self.lag_max_s = 0.0
        self.gc_pauses = Histogram("kcompat_gc_pause", "How long each collection of the garbage "
                                   "collector held the GIL, per generation",
                                   ["generation"], unit="seconds", buckets=LAG_BUCKETS_S,
                                   registry=registry)
        self._gc_started = 0.0
        if registry is not None:
            registry.register(_LongestSteps(self.steps))

    async def run(self) -> None:
        """Probe the lag; time the steps of every task while it runs."""
        trio.lowlevel.add_instrument(self.steps)
        gc.callbacks.append(self._gc_pause)
        stop = threading.Event()
        watch = threading.Thread(target=_watch, args=(self.steps, threading.get_ident(), stop),
                                 name="kcompat-loop-watch", daemon=True)
        watch.start()
        try:
            while True:
                asked = await sleep_on_grid(PROBE_INTERVAL_S)
                lag = max(trio.current_time() - asked, 0.0)
                self.lag.observe(lag)
                self.lag_max_s = max(self.lag_max_s, lag)
        finally:
            stop.set()
            watch.join(WATCH_JOIN_S)  # no thread left running at exit (see ``offload``)
            gc.callbacks.remove(self._gc_pause)
            trio.lowlevel.remove_instrument(self.steps)
            self.steps.close()

    def _gc_pause(self, phase: str, info: dict[str, int]) -> None:
        """A ``gc.callbacks`` hook: the time from a collection's start to its stop."""
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            self.gc_pauses.labels(str(info["generation"])).observe(
                time.perf_counter() - self._gc_started)
            self._gc_started = 0.0


async def sleep_on_grid(period: float) -> float:
    """Sleep until the next multiple of ``period`` on trio's clock; returns
    that time. Periodic tasks whose periods divide one another then wake in
    the same turn of the loop: an idle broker's timers are most of its cost,
    and a turn of the loop costs more than the steps it runs. A task woken
    late skips the multiples it missed."""
    now = trio.current_time()
    # in whole microseconds, so that 44 x 100 ms and 88 x 50 ms are one float
    step = max(1, round(period * 1_000_000))
    k = math.floor(now * 1_000_000 / step) + 1
    deadline = k * step / 1_000_000
    if deadline <= now:  # a multiple a rounding put at or below now
        deadline = (k + 1) * step / 1_000_000
    await trio.sleep_until(deadline)
    return deadline


def _watch(steps: StepTimer, loop_thread: int, stop: threading.Event) -> None:
    while not stop.wait(WATCH_EVERY_S):
        steps.sample(loop_thread)


#: objects ``freeze`` moved to the collector's permanent generation, counted
#: there once: ``gc.get_freeze_count`` walks that generation's whole list
#: (16 ms per million objects), and read per scrape it was most of a
#: ``/metrics`` scrape's step on the loop
_frozen_objects = 0


def freeze() -> None:
    """``gc.freeze()``: what exists now is never walked by a full collection
    again (``server``); the count it froze kept for ``/metrics``."""
    global _frozen_objects
    gc.freeze()
    _frozen_objects = gc.get_freeze_count()


class _LongestSteps(Collector):
    def __init__(self, steps: StepTimer) -> None:
        self.steps = steps

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily("kcompat_event_loop_longest_step_seconds",
                                  "The longest single step of each kind of task since start",
                                  labels=["task"])
        for kind, took in sorted(self.steps.longest.items()):
            gauge.add_metric((kind,), took)
        yield gauge
        gauge = GaugeMetricFamily("kcompat_event_loop_longest_step_on_cpu_seconds",
                                  "The most CPU time one step of each kind of task may have "
                                  "taken since start (an upper bound: a long step's time before "
                                  "the watch thread first saw it counts as all on a CPU)",
                                  labels=["task"])
        for kind, took in sorted(self.steps.longest_on_cpu.items()):
            gauge.add_metric((kind,), took)
        yield gauge
        yield GaugeMetricFamily("kcompat_gc_frozen_objects", "Objects moved to the garbage "
                                "collector's permanent generation at start (never walked)",
                                value=_frozen_objects)
