"""The schedule index: due order, cancellation by id, delivery, replay."""

from __future__ import annotations

from random import Random

from kcompat.ext.schedule import Pending, Schedule


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
