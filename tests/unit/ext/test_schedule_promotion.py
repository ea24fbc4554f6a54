"""Promoted entries cost the garbage collector nothing.

The near future of a large schedule (every record due in the next ten seconds
or so) is promoted on the leader; were each entry an object the collector
tracks, a full collection would walk them all, in one step of the event loop.
They are kept as plain tuples of atoms instead, which it stops tracking.
"""

from __future__ import annotations

import gc

from kcompat.ext.schedule import Pending, Schedule

T = ("orders", 0)


def test_promoted_entries_are_not_tracked_by_the_collector() -> None:
    n = 20_000
    schedule = Schedule()
    schedule.add_run(0, [50_000 + i % 5_000 for i in range(n)], T, list(range(n)),
                     [i << 32 for i in range(n)], {7: "id-7"})
    gc.collect()
    before = len(gc.get_objects())
    assert schedule.promote(60_000, limit=None)
    gc.collect()
    assert len(gc.get_objects()) - before < n // 100
    # handed out as Pending all the same
    due = schedule.due(60_000, 3, T)
    assert due == [Pending(0, 50_000, None, T, 0, 0), Pending(5_000, 50_000, None, T, 5_000,
                                                                5_000 << 32),
                   Pending(10_000, 50_000, None, T, 10_000, 10_000 << 32)]
    assert schedule.cancel("id-7", T) == Pending(7, 50_007, "id-7", T, 7, 7 << 32)
    assert len(schedule) == n - 1
