"""A restart installs a snapshot and replays what came after it: both at C
speed per slot, not a Python step per entry.

``Schedule.load`` (a snapshot's cells, ordered by slot then entry) takes a
slot's run of cells at a time; ``Schedule.add_run`` appends a batch of
records sharing a slot (one delay) as array slices; ``_Staging.chunk`` counts
a chunk's records per target at C speed. Each is checked twice: it leaves the
state the old per-entry path left (on random data), and the Python-level
work it does (calls traced by ``sys.setprofile``: Python functions and
builtins alike) is bounded by the slots it touches, not by the entries.
"""

from __future__ import annotations

import random
import sys
from array import array
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest

from kcompat.ext.schedule import BLOCK, CELLS, SLOT_MS, Schedule, Target, located
from kcompat.ext.schedule_adds import adds_batch
from kcompat.ext.schedule_image import image_cells
from kcompat.ext.schedule_log import Capture, ScheduleLog, _Staging, snapshot_batches
from kcompat.wire import record_scan
from kcompat.wire.records import record_tail

TARGETS: list[Target | None] = [("orders", 0), ("orders", 1), None, ("audit", 3)]


def _old_load(schedule: Schedule, cells: array[int], ids: dict[int, str],
              targets: list[Target | None]) -> None:
    """``Schedule.load`` as it was: an entry at a time (the oracle)."""
    local = [schedule._tid(target) for target in targets]
    for i in range(0, len(cells), CELLS):
        due_ms, entry, offset, tid, where = cells[i:i + CELLS]
        schedule._far_slot(due_ms).extend((due_ms, entry, offset, local[tid], where))
        schedule_id = ids.get(entry)
        if schedule_id is not None:
            schedule._far_ids[entry] = schedule_id
            schedule._by_id.setdefault((targets[tid], schedule_id), OrderedDict())[entry] = (
                due_ms // SLOT_MS)
        schedule._count += 1


def _state(schedule: Schedule) -> dict[str, Any]:
    """Everything a schedule holds, comparable (a far entry's target by name:
    ``add_run`` numbers its target even when it all goes near)."""
    targets = schedule._targets
    return {
        "far": {slot: [targets[v] if i % CELLS == 3 else v for i, v in enumerate(cells)]
                for slot, cells in schedule._far.items()},
        "far_min": dict(schedule._far_min),
        "blocks": {slot: list(b) for slot, b in schedule._far_blocks.items()},
        "slots": sorted(schedule._slots),
        "far_ids": dict(schedule._far_ids),
        "by_id": {key: list(entries.items()) for key, entries in schedule._by_id.items()},
        "count": len(schedule),
        "last": schedule.last_entry,
        "pending": dict(schedule._pending),
        "near": schedule._near.listing(),
        "listing": schedule.pending(),
    }


def _snapshot_cells(rng: random.Random, n: int, slots: int, ordered: bool = True
                    ) -> tuple[array[int], dict[int, str]]:
    """``n`` entries over ``slots`` slots, as ``image_cells`` orders them
    (by slot, then entry) unless ``ordered`` is False, with some ids."""
    base = rng.randrange(10 ** 6) * SLOT_MS
    rows = sorted(((base + rng.randrange(slots) * SLOT_MS + rng.randrange(SLOT_MS), entry,
                    rng.randrange(10 ** 6), rng.randrange(len(TARGETS)),
                    rng.randrange(1 << 40)) for entry in rng.sample(range(10 * n), n)),
                  key=lambda r: (r[0] // SLOT_MS, r[1]))
    if not ordered:
        rng.shuffle(rows)
    cells = array("q", [v for row in rows for v in row])
    ids = {row[1]: f"id-{rng.randrange(n // 3 + 1)}" for row in rows if rng.random() < 0.2}
    return cells, ids


@pytest.mark.parametrize("seed", range(12))
def test_load_leaves_what_the_entry_at_a_time_path_left(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 7, 1_500, 5_000])
    cells, ids = _snapshot_cells(rng, n, rng.choice([1, 3, 40]), ordered=seed % 4 != 3)
    old, new = Schedule(), Schedule()
    if seed % 3 == 0:  # targets numbered otherwise here already: ids remapped
        for schedule in (old, new):
            schedule._tid(("audit", 3))
            schedule._tid(("other", 9))
    per = rng.choice([CELLS * 1_000, len(cells) or CELLS])  # chunks: a slot across them
    for start in range(0, len(cells), per):
        chunk = cells[start:start + per]
        _old_load(old, chunk, ids, TARGETS)
        new.load(chunk, ids, TARGETS)
    for schedule in (old, new):
        schedule.loaded(10 ** 7)
    assert _state(new) == _state(old)
    # and it goes on alike: promoted, taken, cancelled
    now = max(cells[0::CELLS]) if len(cells) else 0
    for schedule in (old, new):
        schedule.promote(now - SLOT_MS, limit=None)
    some = sorted(ids)[:3]
    for entry in some:
        assert new.cancel(ids[entry], _target_of(cells, entry)) == \
            old.cancel(ids[entry], _target_of(cells, entry))
    assert _state(new) == _state(old)


def _target_of(cells: array[int], entry: int) -> Target | None:
    at = list(cells[1::CELLS]).index(entry)
    return TARGETS[cells[at * CELLS + 3]]


def _traced(fn: Callable[[], object]) -> int:
    """How many calls (Python functions and builtins) ``fn`` makes."""
    calls = 0

    def count(_frame: object, event: str, _arg: object) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_load_works_per_slot_not_per_entry() -> None:
    """50,000 entries in 5 slots: a few calls per slot and per ``BLOCK`` of
    entries (their least due times); the old path made ~10 per entry."""
    rng = random.Random(1)
    n = 50_000
    cells, _ids = _snapshot_cells(rng, n, 5)
    assert len(set(d // SLOT_MS for d in cells[0::CELLS])) == 5
    bound = 40 * 5 + 10 * (n // BLOCK + 5)
    assert bound < n // 50
    assert _traced(lambda: Schedule().load(cells, {}, TARGETS)) < bound
    # a schedule id costs its own entry's work, no more
    ids = {cells[i * CELLS + 1]: f"id-{i}" for i in range(0, n, 1_000)}
    assert _traced(lambda: Schedule().load(cells, ids, TARGETS)) < bound + 10 * len(ids)
    # target ids numbered otherwise: remapped at C speed too
    other = Schedule()
    other._tid(("elsewhere", 0))
    assert _traced(lambda: other.load(cells, {}, TARGETS)) < bound


def test_a_chunk_counts_its_records_per_target_not_per_record() -> None:
    rng = random.Random(2)
    cells, _ids = _snapshot_cells(rng, 20_000, 2)
    staging = _Staging(2, {})
    key = cells.tobytes() if sys.byteorder == "little" else b""
    if not key:
        pytest.skip("big-endian host: the key is byte-swapped first")
    value = {"ids": [], "targets": [None if t is None else list(t) for t in TARGETS]}
    assert _traced(lambda: staging.chunk(key, value)) < 400
    tids = list(cells[3::CELLS])
    assert staging.pending == {t: tids.count(i) for i, t in enumerate(TARGETS)
                               if t is not None and tids.count(i)}
    assert len(staging.schedule) == 20_000


def _old_add_run(schedule: Schedule, first: int, dues: list[int], target: Target | None,
                 offsets: list[int], wheres: list[int], ids: dict[int, str]) -> None:
    for i, due in enumerate(dues):
        schedule.add(first + i, due, ids.get(i), target, offsets[i], wheres[i])


@pytest.mark.parametrize("seed", range(10))
def test_add_run_leaves_what_adds_one_at_a_time_leave(seed: int) -> None:
    rng = random.Random(seed)
    old, new = Schedule(), Schedule()
    for schedule in (old, new):  # some slots near already
        schedule.add(0, 30_000)
        schedule.promote(40_000, limit=None)
    first = 1
    for _ in range(rng.randrange(1, 6)):
        n = rng.choice([1, 2, 300, 2_000])
        spread = rng.choice([1, SLOT_MS // 2, 60_000, 3_600_000])
        start = rng.randrange(0, 60_000)
        dues = [start + rng.randrange(spread) for _ in range(n)]
        offsets = [rng.randrange(10 ** 6) for _ in range(n)]
        wheres = [rng.randrange(1 << 40) for _ in range(n)]
        ids = {i: f"id-{rng.randrange(20)}" for i in range(n) if rng.random() < 0.1}
        target = rng.choice(TARGETS)
        _old_add_run(old, first, dues, target, offsets, wheres, ids)
        assert new.add_run(first, array("q", dues), target, array("q", offsets), wheres,
                           ids) == n
        first += n + rng.randrange(3)
    assert _state(new) == _state(old)


def test_a_batch_with_one_delay_is_added_without_a_call_per_record() -> None:
    """2,000 records due within one slot (a produce with one ``kc-delay-ms``)."""
    n = 2_000
    dues = array("q", [3_600_000 + i // 100 for i in range(n)])
    offsets = array("q", range(n))
    wheres = [(1 + i) << 32 | 60 * i for i in range(n)]
    schedule = Schedule()
    assert _traced(lambda: schedule.add_run(10, dues, ("orders", 0), offsets, wheres,
                                            {})) < 100
    assert _traced(lambda: schedule.add_run(10 + n, dues, ("orders", 0), offsets, wheres,
                                            {})) < 100
    assert len(schedule) == 2 * n


def test_a_stored_adds_batch_with_one_delay_is_applied_without_a_call_per_record() -> None:
    """What a restart replays after the snapshot: each record's place in its
    batch is computed at C speed too."""
    n = 2_000
    parts = [(1_000 + i, record_tail(b"\x00\x02v", 0, b"")) for i in range(n)]
    batch = adds_batch(("orders", 0), (7, 0, 0), parts, list(range(n)),
                       [3_600_000 + i // 100 for i in range(n)])
    machine = ScheduleLog()
    assert _traced(lambda: machine.apply_stored(batch)) < 400
    assert len(machine) == n
    record = machine.schedule.pending()[1_234]
    assert located(record)[0] == 0  # in the batch at offset 0, found where it starts
    tails = record_scan.scan(batch, frozenset())[2]
    assert located(record)[1] == tails[1 + 1_234].start


def test_a_snapshot_finds_the_lowest_batch_to_keep_without_a_call_per_entry() -> None:
    """``snapshot_batches`` runs in a worker thread, but it holds the GIL the
    loop wants (a restart's replay, most of all): the lowest batch still
    holding a pending record is found at C speed. Records an older broker
    wrote, not located, count by their own entry."""
    n = 20_000
    schedule = Schedule()
    wheres = [(7 + i % 3) << 32 | 50 * i for i in range(n)]  # 7-9 past its batch
    schedule.add_run(100, array("q", [3_600_000 + i for i in range(n)]), ("orders", 0),
                     array("q", range(n)), wheres, {})
    capture = Capture(10 ** 6, schedule.export(), _META, 10 ** 6)
    calls = _traced(lambda: snapshot_batches(capture, 0))
    assert calls < 1_000
    assert snapshot_batches(capture, 0)[1] == 100 - 7
    schedule.add(10 ** 5, 3_600_000, None, ("orders", 0), 5, -1)
    schedule.add(10 ** 5 + 1, 3_600_000, None, ("orders", 0), 6, 3 << 32)
    capture = Capture(10 ** 6, schedule.export(), _META, 10 ** 6)
    assert snapshot_batches(capture, 0)[1] == 100 - 7
    unlocated = Schedule()
    unlocated.add(50, 3_600_000, None, ("orders", 0), 5, -1)
    unlocated.add(60, 3_600_000, None, ("orders", 0), 6, 30 << 32)
    assert snapshot_batches(Capture(99, unlocated.export(), _META, 99), 0)[1] == 30
    assert snapshot_batches(Capture(99, unlocated.export(), _META, 20), 0)[1] == 20


_META: dict[str, Any] = {"last": 0, "next_seq": [], "inflight": [], "held": [], "seen": []}


def test_a_snapshot_passes_over_the_schedule_in_runs_with_the_same_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker thread's C-speed pass never gives the GIL up, so a snapshot
    passes over the schedule ``GIL_RUN`` entries at a time: with runs of 7
    it makes the same cells, ids and lowest batch as in one pass — far slots
    with cancellations on both sides of a run's edge, one whose entries do
    not ascend across an edge (sorted then), records not located."""
    from kcompat.ext import schedule_image, schedule_log
    rng = random.Random(5)
    schedule = Schedule()
    entry, cancelled = 1, []
    for _batch in range(40):
        dues = [3_600_000 + rng.randrange(3 * SLOT_MS) for _ in range(50)]
        ids = {i: f"id-{entry + i}" for i in range(50) if rng.random() < 0.2}
        wheres = [-1 if rng.random() < 0.01 else (1 + i) << 32 | i for i in range(50)]
        schedule.add_run(entry, dues, ("orders", 0), list(range(entry, entry + 50)), wheres, ids)
        cancelled += [sid for sid in ids.values() if rng.random() < 0.5]
        entry += 50
    for sid in cancelled:
        assert schedule.cancel(sid, ("orders", 0)) is not None
    image = schedule.export()
    slot, cells = image.far[0]
    # entries 6 and 7 of the slot change places: the only pair out of order is the
    # one across the first run's edge (the 7th and 8th)
    swapped = array("q", cells)
    swapped[6 * CELLS:7 * CELLS], swapped[7 * CELLS:8 * CELLS] = (cells[7 * CELLS:8 * CELLS],
                                                                 cells[6 * CELLS:7 * CELLS])
    image.far[0] = (slot, swapped)
    capture = Capture(10 ** 6, image, _META, 10 ** 6)
    whole = image_cells(image), snapshot_batches(capture, 0)
    monkeypatch.setattr(schedule_image, "GIL_RUN", 7)
    monkeypatch.setattr(schedule_log, "GIL_RUN", 7)
    assert (image_cells(image), snapshot_batches(capture, 0)) == whole
    cells_out, _ids = whole[0]
    entries = [cells_out[i + 1] for i in range(0, len(cells_out), CELLS)]
    assert len(entries) == len(schedule) and not set(entries) & image.cancelled


@pytest.mark.parametrize("seed", range(3))
def test_a_snapshot_leaves_out_far_cancellations_without_a_call_per_entry(seed: int) -> None:
    """Records cancelled while far are in every slot of a long schedule (a
    few in a hundred carry an id, and some of those are cancelled): a
    snapshot takes each slot's live cells as slices around the cancelled
    ones — the same cells, in entry order, a row at a time would give — with
    Python work per cancelled entry and per slot, not per entry."""
    rng = random.Random(seed)
    schedule = Schedule()
    entry, cancelled = 1, []
    for _batch in range(200):
        dues = [3_600_000 + rng.randrange(6 * SLOT_MS) for _ in range(100)]
        ids = {i: f"id-{entry + i}" for i in range(100) if rng.random() < 0.05}
        schedule.add_run(entry, dues, ("orders", 0), list(range(entry, entry + 100)),
                         [-1] * 100, ids)
        cancelled += [sid for sid in ids.values() if rng.random() < 0.3]
        entry += 100
    for sid in cancelled:
        assert schedule.cancel(sid, ("orders", 0)) is not None
    image = schedule.export()
    assert len(image.far) >= 6 and not image.near
    assert all(not image.cancelled.isdisjoint(cells[1::CELLS]) for _slot, cells in image.far)
    expected = array("q")
    for _slot, cells in sorted(image.far):
        rows = [cells[i:i + CELLS] for i in range(0, len(cells), CELLS)
                if cells[i + 1] not in image.cancelled]
        for row in sorted(rows, key=lambda r: r[1]):
            expected.extend(row)
    cells, ids = image_cells(image)
    assert cells == expected
    assert len(cells) // CELLS == len(schedule) == 20_000 - len(cancelled)
    assert set(ids) == set(image.far_ids) - image.cancelled
    calls = _traced(lambda: image_cells(image))
    assert calls < 20 * len(image.far) + 10 * len(cancelled) + 100
