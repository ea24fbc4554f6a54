"""One turn of the delivery loop promotes ``PROMOTE_TURN`` entries at most,
however many schedule partitions this broker leads: a leader of ten
partitions, each with a slot of overdue records to promote, promoted
``PROMOTE_CHUNK`` in each of them per turn."""

from __future__ import annotations

from typing import Any

from kcompat.broker.ext.delays import PROMOTE_TURN, DelayService
from kcompat.ext.schedule_log import ScheduleLog

T = ("orders", 0)


class _Cluster:
    def serving_machine(self, topic: str, index: int) -> Any:
        return None


def test_a_turn_promotes_a_chunk_in_all_the_partitions_it_leads() -> None:
    service = object.__new__(DelayService)
    service.cluster = _Cluster()  # type: ignore[assignment]
    service.logs = {}
    service.leading = set(range(10))
    spawned: list[tuple[int, Any]] = []
    service._spawn = lambda nursery, index, target: spawned.append((index, target))  # type: ignore[method-assign]
    for index in service.leading:
        slog = service.logs[index] = ScheduleLog()
        n = 5_000
        slog.schedule.add_run(0, [50_000 + i for i in range(n)], T, list(range(n)),
                              [i << 32 for i in range(n)], {})
    wait_s = service._start_due(None, 100_000)  # type: ignore[arg-type]
    promoted = sum(len(s.schedule._pending) for s in service.logs.values())
    assert 0 < promoted <= PROMOTE_TURN
    assert wait_s == 0.0  # more to promote: the next turn at once
    assert {index for index, _t in spawned} <= service.leading
