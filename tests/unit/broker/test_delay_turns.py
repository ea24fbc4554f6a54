"""One turn of the delivery loop promotes ``PROMOTE_TURN`` entries at most,
however many schedule partitions this broker leads: a leader of ten
partitions, each with a slot of overdue records to promote, promoted a tenth
of it in each of them per turn. A slot that begins in more than
``PROMOTE_URGENT_MS`` is promoted ``PROMOTE_TURN_CALM`` a turn at most (a
step of a few milliseconds, not fifteen), at full pace once it is about to
begin."""

from __future__ import annotations

from typing import Any

from kcompat.broker.ext.delays import PROMOTE_TURN, PROMOTE_TURN_CALM, DelayService
from kcompat.ext.schedule import PROMOTE_AHEAD_MS, PROMOTE_URGENT_MS, SLOT_MS
from kcompat.ext.schedule_log import ScheduleLog

T = ("orders", 0)


class _Cluster:
    def serving_machine(self, topic: str, index: int) -> Any:
        return None


def _service(first_due: int) -> tuple[DelayService, list[tuple[int, Any]]]:
    """A leader of ten schedule partitions, each with 5,000 records due from
    ``first_due`` on, nothing promoted yet."""
    service = object.__new__(DelayService)
    service.cluster = _Cluster()  # type: ignore[assignment]
    service.logs = {}
    service.leading = set(range(10))
    spawned: list[tuple[int, Any]] = []
    service._spawn = lambda nursery, index, target: spawned.append((index, target))  # type: ignore[method-assign]
    for index in service.leading:
        slog = service.logs[index] = ScheduleLog()
        n = 5_000
        slog.schedule.add_run(0, [first_due + i for i in range(n)], T, list(range(n)),
                              [i << 32 for i in range(n)], {})
    return service, spawned


def _promoted(service: DelayService) -> int:
    return sum(len(s.schedule._pending) for s in service.logs.values())


def test_a_turn_promotes_a_chunk_in_all_the_partitions_it_leads() -> None:
    service, spawned = _service(50_000)
    wait_s = service._start_due(None, 100_000)  # type: ignore[arg-type]
    assert PROMOTE_TURN_CALM < _promoted(service) <= PROMOTE_TURN  # overdue: full pace
    assert wait_s == 0.0  # more to promote: the next turn at once
    assert {index for index, _t in spawned} <= service.leading


def test_a_slot_with_time_before_it_begins_is_promoted_in_short_turns() -> None:
    begins = 20 * SLOT_MS
    service, spawned = _service(begins)
    now = begins - PROMOTE_AHEAD_MS  # its promotion starts
    assert service._start_due(None, now) == 0.0  # type: ignore[arg-type]
    assert 0 < _promoted(service) <= PROMOTE_TURN_CALM
    assert not spawned  # nothing due yet
    before = _promoted(service)
    service._start_due(None, begins - PROMOTE_URGENT_MS)  # type: ignore[arg-type]
    assert _promoted(service) - before > PROMOTE_TURN_CALM  # about to begin: full pace
