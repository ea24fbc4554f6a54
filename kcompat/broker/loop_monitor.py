"""How long the event loop keeps its tasks waiting: lag and the longest steps.

Theory of operation
-------------------
A broker node runs every task on one trio loop: connections, the Raft driver,
the controller's heartbeats and fencing, the services (DESIGN §1.8). trio
switches tasks only at checkpoints, so the control plane keeps its deadlines
only while no task holds the loop for long. That is a rule for every piece of
work (replays and deliveries are cut into turns: ``Group.feed``, the delay
service's batches) and this module makes it visible:

* ``kcompat_event_loop_lag_seconds`` (histogram): a probe task asks to sleep
  ``PROBE_INTERVAL_S`` and measures how much later than asked it woke — the
  time a timer of the control plane (a heartbeat, a Raft tick) waits for the
  loop at that moment;
* ``kcompat_event_loop_longest_step_seconds{task}`` (gauge): per kind of task
  (its coroutine function, or what it is labelled as doing: a connection's
  task is ``"<API> request"`` while it serves one), the longest single step it
  ran between two checkpoints since the broker started; ``kcompat_event_loop_long_steps_total
  {task}`` counts steps over ``LONG_STEP_S`` (50 ms, the budget of issue 31),
  and a step over ``WARN_STEP_S`` is logged with its task kind (once per kind
  and minute), so the culprit of a stall is named, not guessed.

The step timing is a trio ``Instrument``: two clock reads per task step, and
the kind of a task looked up only for a step of 1 ms or more
(``SHORT_STEP_S``; the gauge lists the kinds that ever took that long). Pure
observation: nothing here changes the order in which tasks run.
"""

from __future__ import annotations

import logging
import time
from types import CodeType
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import trio
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Iterable

log = logging.getLogger("kcompat.loop")

PROBE_INTERVAL_S = 0.1
SHORT_STEP_S = 0.001  # steps shorter than this are not looked at (kind, longest)
LONG_STEP_S = 0.05
WARN_STEP_S = 0.5
WARN_EVERY_S = 60.0
LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# a task's kind while it does one thing that says more than its coroutine
# (a connection's task serving one request: ``labelled``)
_LABELS: WeakKeyDictionary[trio.lowlevel.Task, str] = WeakKeyDictionary()


class labelled:
    """``with labelled("Fetch request"):`` — the current task's steps count
    under that kind until the block ends (outside trio: nothing)."""

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


def task_kind(task: trio.lowlevel.Task, names: dict[CodeType, str]) -> str:
    """What a task is doing (``labelled``), or the coroutine function it runs
    (``DelayService._serve_target``...)."""
    label = _LABELS.get(task)
    if label is not None:
        return label
    code = getattr(task.coro, "cr_code", None)
    if code is None:
        return task.name
    found = names.get(code)
    if found is None:
        found = names[code] = code.co_qualname.replace(".<locals>", "")
    return found


class StepTimer(trio.abc.Instrument):
    """The longest step of each kind of task (see the module)."""

    def __init__(self, long_steps: Counter | None = None) -> None:
        self.longest: dict[str, float] = {}
        self._names: dict[CodeType, str] = {}
        self._started = 0.0
        self._warned: dict[str, float] = {}
        self._long_steps = long_steps

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if not self._started:
            return  # the step that added this instrument: its start was not seen
        took = time.perf_counter() - self._started
        if took < SHORT_STEP_S:  # most steps: no lookup at all
            return
        if took < LONG_STEP_S:
            kind = task_kind(task, self._names)
            if took > self.longest.get(kind, 0.0):
                self.longest[kind] = took
            return
        self._long(task_kind(task, self._names), took)

    def _long(self, kind: str, took: float) -> None:
        if took > self.longest.get(kind, 0.0):
            self.longest[kind] = took
        if self._long_steps is not None:
            self._long_steps.labels(kind).inc()
        now = time.monotonic()
        if took >= WARN_STEP_S and now - self._warned.get(kind, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[kind] = now
            log.warning("the event loop was held %.0f ms by one step of %s", took * 1000, kind)


class LoopMonitor:
    """The lag probe and the step timer of one broker (its registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.lag = Histogram("kcompat_event_loop_lag_seconds",
                             "How much later than asked a timer of the event loop fires "
                             "(probed every 100 ms)", buckets=LAG_BUCKETS_S, registry=registry)
        long_steps = Counter("kcompat_event_loop_long_steps",
                             "Task steps that held the event loop over 50 ms, per task kind",
                             ["task"], registry=registry)
        self.steps = StepTimer(long_steps)
        self.lag_max_s = 0.0
        if registry is not None:
            registry.register(_LongestSteps(self.steps))

    async def run(self) -> None:
        """Probe the lag; time the steps of every task while it runs."""
        trio.lowlevel.add_instrument(self.steps)
        try:
            while True:
                asked = trio.current_time() + PROBE_INTERVAL_S
                await trio.sleep_until(asked)
                lag = max(trio.current_time() - asked, 0.0)
                self.lag.observe(lag)
                self.lag_max_s = max(self.lag_max_s, lag)
        finally:
            trio.lowlevel.remove_instrument(self.steps)


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
