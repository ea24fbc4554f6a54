"""Promoted entries cost the garbage collector nothing.

The near future of a large schedule (every record due in the next ten seconds
or so) is promoted on the leader; were each entry an object the collector
tracks, a full collection would walk them all, in one step of the event loop.
They are kept as rows of packed ints in a dict of ints to bytes instead,
which it never tracks.
"""

from __future__ import annotations

import gc
import heapq
import random
from typing import Any

import pytest

from kcompat.ext import schedule as schedule_module
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


def test_the_promoted_form_stays_out_of_full_collections_as_records_come_and_go() -> None:
    """Rows the collector stops tracking once it examines them are not
    enough: a dict holding them is tracked again by every fresh row put in
    it, and a full collection then walks all of its entries (a million
    promoted entries: 60-130 ms, ``bench/gc_pause.py``). The promoted rows
    and the dict holding them are never tracked, a collection or not."""
    n = 20_000
    schedule = Schedule()
    schedule.add_run(0, [50_000 + i % 5_000 for i in range(n)], T, list(range(n)),
                     [i << 32 for i in range(n)], {i: f"id-{i}" for i in range(0, n, 100)})
    gc.collect()
    assert schedule.promote(60_000, limit=None)
    schedule.add(n, 55_000, "late", T, n, -1)  # into a slot already promoted: a row at once
    assert not gc.is_tracked(schedule._pending)
    assert not any(map(gc.is_tracked, schedule._pending.values()))
    taken = schedule.due(60_000, 5, T)
    assert [p.entry for p in taken] == [0, 5_000, 10_000, 15_000, 1]
    assert [p.schedule_id for p in taken] == ["id-0", "id-5000", "id-10000", "id-15000", None]
    assert schedule.relocate(1, 50_001, 9 << 32)
    assert not gc.is_tracked(schedule._pending)
    assert schedule.cancel("late", T) == Pending(n, 55_000, "late", T, n, -1)


def test_schedule_ids_naming_one_record_each_are_not_tracked_by_the_collector() -> None:
    """Most schedule ids name one pending record: their entries are a plain
    dict of ints, which the collector never tracks (an OrderedDict each was
    an object every full collection walked: 50,000 of them at 1M records with
    5 % named). An id reused while pending keeps first come, first cancelled."""
    n = 10_000
    schedule = Schedule()
    schedule.add_run(0, [50_000 + i for i in range(n)], T, list(range(n)), [-1] * n,
                     {i: f"id-{i}" for i in range(0, n, 10)})
    assert not any(map(gc.is_tracked, schedule._by_id.values()))
    schedule.add(n, 40_000, "id-0", T)  # a second pending record named id-0, due earlier
    schedule.add(n + 1, 30_000, "id-0", T)
    assert [schedule.cancel("id-0", T).entry for _ in range(3)] == [0, n, n + 1]
    assert schedule.cancel("id-0", T) is None
    assert schedule.cancel("id-10", T) is not None and schedule.cancel("id-10", T) is None


class _CountingHeapq:
    """``heapq`` as the schedule module uses it, counting pops and pushes."""

    def __init__(self) -> None:
        self.ops = 0

    def heappush(self, heap: list[Any], item: Any) -> None:
        self.ops += 1
        heapq.heappush(heap, item)

    def heappop(self, heap: list[Any]) -> Any:
        self.ops += 1
        return heapq.heappop(heap)

    def __getattr__(self, name: str) -> Any:
        return getattr(heapq, name)


def test_a_backlog_promoted_in_turns_costs_a_few_heap_operations_per_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything overdue, one slot promoted a chunk at a time while deliveries
    of 2,000 take what is promoted: each chunk spans the whole slot's due times,
    so what was delivered lies all through the heap. Walking past it (instead of
    taking due keys off the heap) cost some ten heap operations per record, more
    the larger the backlog."""
    counting = _CountingHeapq()
    monkeypatch.setattr(schedule_module, "heapq", counting)
    n = 40_000
    rng = random.Random(5)
    schedule = Schedule()
    schedule.add_run(0, [50_000 + rng.randrange(10_000) for _ in range(n)], T, list(range(n)),
                     [i << 32 for i in range(n)], {})
    now, moved, seen = 10 ** 9, 0, set()
    while schedule.promoting(now) or schedule.due_targets(now):
        for p in schedule.due(now, 2_000, T):
            assert p.entry not in seen
            seen.add(p.entry)
            schedule.delivered(p.entry)
            moved += 1
    assert moved == n and len(schedule) == 0
    assert counting.ops <= 3 * n


def test_a_follower_takes_a_few_entries_of_a_large_far_slot() -> None:
    """``take_all`` of a few entries of a far slot much larger than them
    finds the same entries, in order, a cancelled one left out."""
    n = 10_000
    schedule = Schedule()
    schedule.add_run(0, [50_000 + i % 5_000 for i in range(n)], T, list(range(n)),
                     [i << 32 for i in range(n)], {7: "id-7"})
    assert schedule.cancel("id-7", T) is not None
    taken = schedule.take_all([9_000, 7, 3, 4_001], [54_000, 50_007, 50_003, 54_001])
    assert taken == [Pending(9_000, 54_000, None, T, 9_000, 9_000 << 32),
                     Pending(3, 50_003, None, T, 3, 3 << 32),
                     Pending(4_001, 54_001, None, T, 4_001, 4_001 << 32)]
    assert len(schedule) == n - 4
    assert schedule.take_all([3], [50_003]) == []


@pytest.mark.parametrize("seed", range(6))
def test_taking_far_entries_in_batches_is_taking_them_one_by_one(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``take_all`` (a follower applying out records: every entry far, found
    a slot at a time) takes what ``take`` of each would, in order: entries
    due in one slot or several, some promoted, cancelled, named by schedule
    ids, taken twice, never added, or listed twice in one record; slots
    indexed at once or a few entries per call."""
    if seed >= 3:
        monkeypatch.setattr(schedule_module, "INDEX_CHUNK", 16)
    rng = random.Random(seed)
    targets = [("a", 0), ("b", 1)]
    batched, single = Schedule(), Schedule()
    dues: dict[int, int] = {}
    entry = 0
    for _ in range(40):  # produce batches: one delay each, or spread
        n = rng.randint(1, 60)
        base = 50_000 + rng.randrange(40_000)
        run = [base if rng.random() < 0.5 else base + rng.randrange(25_000) for _ in range(n)]
        ids = {i: f"id-{entry + i}" for i in range(n) if rng.random() < 0.1}
        target = rng.choice(targets)
        for s in (batched, single):
            s.add_run(entry, run, target, list(range(entry, entry + n)),
                      [i << 32 for i in range(entry, entry + n)], ids)
        dues.update(zip(range(entry, entry + n), run, strict=True))
        entry += n
    for name in rng.sample(sorted({f"id-{e}" for e in range(entry)}), 15):
        for target in targets:
            assert batched.cancel(name, target) == single.cancel(name, target)
    if seed % 2:  # the leader promoted some of it before it stepped down
        for s in (batched, single):
            s.promote(50_000, limit=60)  # a part of the first slot
    promoted = sorted(batched._pending, key=lambda e: (dues[e], e))
    by_due = sorted(dues, key=lambda e: (dues[e], e))
    at = 0
    while at < len(by_due):
        n = rng.choice((1, 2, 7, 50, 400))
        out = by_due[at:at + n]
        at += n
        extra = rng.random()
        if extra < 0.1:
            out = out + out[:1]  # an entry listed twice
        elif extra < 0.2:
            out = out + [entry + 5]  # never added
        elif extra < 0.3 and at > 100:
            out = out + by_due[at - 100:at - 99]  # taken before
        out_dues = [dues.get(e, 60_000) for e in out]
        expected = [p for p in (single.take(e, d) for e, d in zip(out, out_dues, strict=True))
                    if p is not None]
        assert batched.take_all(out, out_dues) == expected
        assert len(batched) == len(single)
    assert len(batched) == 0 and batched.pending() == single.pending() == []
    for s in (batched, single):  # memory follows what is pending: every slot went
        assert not s._far and not s._slots and not s._cancelled and not s._far_at
    # again (a replay): nothing, promoted or far, is taken twice
    for again in (promoted, by_due):
        assert batched.take_all(again, [dues[e] for e in again]) == []
