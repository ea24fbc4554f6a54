"""The schedule index: due order, cancellation by id, delivery, replay."""

from __future__ import annotations

from random import Random

from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.ext.schedule import SLOT_MS, Pending, Schedule


def test_due_in_time_order_and_stays_until_delivered() -> None:
    s = Schedule()
    s.add(10, due_ms=300)
    s.add(11, due_ms=100, schedule_id="a")
    s.add(12, due_ms=100)
    assert s.next_due_ms() == 100
    assert s.due(99) == []
    assert [p.entry for p in s.due(100)] == [11, 12]  # ties in schedule order
    assert [p.entry for p in s.due(100)] == [11, 12]  # still pending until delivered
    s.delivered(11)
    s.delivered(12)
    assert s.due(299) == [] and s.next_due_ms() == 300
    assert s.due(1000, limit=5) == [Pending(10, 300, None)]
    s.delivered(10)
    assert len(s) == 0 and s.next_due_ms() is None


def test_cancel_takes_the_earliest_pending_record_of_an_id() -> None:
    s = Schedule()
    s.add(1, 500, "job")
    s.add(2, 400, "job")
    s.add(3, 450, "other")
    assert s.cancel("job").entry == 1  # type: ignore[union-attr]
    assert s.cancel("job").entry == 2  # type: ignore[union-attr]
    assert s.cancel("job") is None
    assert s.cancel("missing") is None
    assert [p.entry for p in s.due(1000)] == [3]
    s.delivered(3)
    assert s.cancel("other") is None  # delivered: too late to cancel


def test_replay_is_idempotent() -> None:
    s = Schedule()
    s.add(5, 50, "x")
    s.add(5, 50, "x")  # the same schedule-log entry applied twice
    assert len(s) == 1
    assert s.cancel("x") is not None and s.cancel("x") is None


def test_random_operations_match_a_plain_model() -> None:
    for seed in range(200):
        rng = Random(seed)
        s, model = Schedule(), {}  # model: entry -> (due, id)
        entry = 0
        for _ in range(200):
            roll = rng.random()
            if roll < 0.5:
                entry += 1
                due, sid = rng.randrange(1000), rng.choice([None, "a", "b", "c"])
                s.add(entry, due, sid)
                model[entry] = (due, sid)
            elif roll < 0.65:
                sid = rng.choice(["a", "b", "c"])
                named = sorted(e for e, (_d, i) in model.items() if i == sid)
                got = s.cancel(sid)
                assert (got.entry if got else None) == (named[0] if named else None)
                if named:
                    del model[named[0]]
            else:
                now = rng.randrange(1000)
                due = s.due(now, limit=3)
                expected = sorted((d, e) for e, (d, _i) in model.items() if d <= now)[:3]
                assert [(p.due_ms, p.entry) for p in due] == expected
                for p in due[: rng.randint(0, len(due))]:
                    s.delivered(p.entry)
                    del model[p.entry]
            assert len(s) == len(model)
            assert s.next_due_ms() == (min(d for d, _i in model.values()) if model else None)


def _image(s: Schedule) -> object:
    return ({slot: list(cells) for slot, cells in s._far.items()}, dict(s._far_min),
            sorted(s._slots), dict(s._far_ids), {k: list(v) for k, v in s._by_id.items()},
            dict(s._pending), len(s), s.last_entry, s.pending())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6 * SLOT_MS), st.none() | st.sampled_from("ab")),
                max_size=40),
       st.integers(0, 3 * SLOT_MS), st.booleans())
def test_a_run_of_adds_is_as_many_adds(rows: list[tuple[int, str | None]], now: int,
                                       replayed: bool) -> None:
    """``add_run`` (how a replica applies an ``adds`` op) leaves the schedule
    exactly as one ``add`` per entry does, promoted slots and ids included."""
    one, run = Schedule(), Schedule()
    for s in (one, run):
        s.add(5, 2 * SLOT_MS, "a", ("t", 0), 1, 7)  # something there already, a slot begun
        s.promote(now)
    first = 5 if replayed else 6
    dues = [d for d, _ in rows]
    ids = {i: sid for i, (_, sid) in enumerate(rows) if sid is not None}
    offsets = [100 + i for i in range(len(rows))]
    wheres = [(i + 1) << 32 | 61 * i for i in range(len(rows))]
    added = sum(one.add(first + i, d, ids.get(i), ("t", 0), offsets[i], wheres[i])
                for i, d in enumerate(dues))
    assert run.add_run(first, dues, ("t", 0), offsets, wheres, ids) == added
    assert _image(run) == _image(one)
