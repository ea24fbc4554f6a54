"""The garbage collector runs between the loop's turns (``loop.collector``):
a step that makes garbage is not interrupted by a collection, the garbage
is collected once the turn ends, and the generation follows CPython's rules."""

from __future__ import annotations

import gc
import sys

import trio

from kcompat.broker.loop import collector
from kcompat.broker.loop.collector import TurnCollector


class _Cycle:
    def __init__(self) -> None:
        self.me = self  # freed only by a collection


def test_collections_run_between_steps_and_free_what_the_steps_left() -> None:
    in_step = [False]
    where: list[bool] = []  # per collection: did it start inside a task step?

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            in_step[0] = True

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            in_step[0] = False

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            where.append(in_step[0])

    async def main() -> int:
        turns = TurnCollector()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(turns.run)
            await trio.sleep(0)
            for _ in range(10):  # steps of 3,000 cycles each, more than YOUNG_AT
                for _ in range(3_000):
                    _Cycle()
                await trio.sleep(0)
            await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        return sum(1 for o in gc.get_objects() if type(o) is _Cycle)

    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(100_000, thresholds[1], thresholds[2])  # the automatic net out of reach
    gc.callbacks.append(seen)
    try:
        left = trio.run(main, instruments=[Steps()])
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*thresholds)
    assert where, "no collection ran"
    assert not any(where), "a collection ran inside a task step"
    assert left <= collector.YOUNG_AT  # what the last turns made at most


def test_the_generation_follows_cpythons_counts_and_the_heap_growth_for_a_full_one() -> None:
    turns = TurnCollector()
    turns.middle_at, turns.full_at = 10, 100
    assert turns.generation(middle=5, full=500) == 0
    assert turns.generation(middle=11, full=5) == 1
    high = turns.low_blocks = sys.getallocatedblocks() * 10  # the heap far below its last low
    assert turns.generation(middle=11, full=101) == 1
    assert turns.low_blocks < high / 5  # the low follows the heap down
    turns.low_blocks = sys.getallocatedblocks() // 2  # grown by half since
    assert turns.generation(middle=11, full=101) == 2
