"""A trio run that a seed replays exactly, in any process (the broker simulator's).

Theory of operation
-------------------
On a ``MockClock`` a trio run is a function of its scheduling choices, and
those are made replayable by seeding ``trio._core._run._r`` — except where
trio orders by memory address, which depends on everything the process ran
before: a seed replayed alone then takes another path than the same seed
within its test's chunk of 50. Trio says so itself ("the deadlines
tie-breaker and the non-deterministic ordering" of its sets). Three places:

* equal deadlines are ordered by the ``id()`` of their cancel scopes, and on
  the MockClock many timers fall due at the same instant;
* a cancelled scope wakes its tasks, and its nested scopes, by iterating sets
  of ``Task`` and ``CancelStatus``, hashed by ``id()``.

And one place where the order is set by the real clock: work a broker hands
to a thread (``trio.to_thread.run_sync``: fsyncs, schedule-log snapshots)
comes back at a simulated instant that depends on how fast the thread ran,
for the MockClock jumps ahead while the loop waits for it.

Within ``replayable(seed)`` ties between deadlines go by the order they were
set; tasks and cancel statuses hash to the order they were first hashed in
(a number kept while the object lives), so sets of them iterate the same in
every process; and ``trio.to_thread.run_sync`` runs its function in the
calling task, between two checkpoints. Everything is put back on exit. Test
code only: the brokers' own code runs unchanged.
"""

from __future__ import annotations

import heapq
import itertools
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio
from trio._core import _run

_PATCHED = (_run.Task, _run.CancelStatus)


def _first_hashed() -> Callable[[object], int]:
    """A ``__hash__`` numbering objects in the order they are first hashed,
    each number kept while its object lives (then its ``id`` may be reused)."""
    order = itertools.count(1)
    numbers: dict[int, tuple[int, weakref.ref[Any]]] = {}

    def first_hashed(self: object) -> int:
        key = id(self)
        known = numbers.get(key)
        if known is not None:
            return known[0]
        number = next(order)
        numbers[key] = (number, weakref.ref(self, lambda _ref: numbers.pop(key, None)))
        return number

    return first_hashed


def _deadlines_in_order() -> Callable[[Any, float, Any], None]:
    order = itertools.count()

    def add(self: Any, deadline: float, cancel_scope: Any) -> None:
        heapq.heappush(self._heap, (deadline, next(order), cancel_scope))
        self._active += 1

    return add


async def _run_inline(sync_fn: Callable[..., Any], *args: Any, **_options: Any) -> Any:
    """``trio.to_thread.run_sync`` in the calling task (no thread, no real time)."""
    await trio.lowlevel.checkpoint_if_cancelled()
    result = sync_fn(*args)
    await trio.lowlevel.cancel_shielded_checkpoint()
    return result


@contextmanager
def replayable(seed: int) -> Iterator[None]:
    """Trio runs inside are the same for ``seed`` in every process."""
    rng_state = _run._r.getstate()
    add = _run.Deadlines.add
    hashes = [cls.__hash__ for cls in _PATCHED]
    run_sync = trio.to_thread.run_sync
    setattr(trio.to_thread, "run_sync", _run_inline)  # noqa: B010
    _run._r.seed(seed)
    setattr(_run.Deadlines, "add", _deadlines_in_order())  # noqa: B010
    first_hashed = _first_hashed()
    for cls in _PATCHED:
        setattr(cls, "__hash__", first_hashed)  # noqa: B010 (a class's slot, made replayable)
    try:
        yield
    finally:
        _run._r.setstate(rng_state)
        setattr(trio.to_thread, "run_sync", run_sync)  # noqa: B010
        setattr(_run.Deadlines, "add", add)  # noqa: B010
        for patched, original in zip(_PATCHED, hashes, strict=True):
            setattr(patched, "__hash__", original)  # noqa: B010
