"""delay_batches.below: which pending records a schedule compaction must copy
forward before it moves the log start (kcompat/broker/ext/delays.py, _compact)."""

from __future__ import annotations

from kcompat.broker.ext.delay_batches import below
from kcompat.ext.schedule import Schedule

TARGET = ("t", 0)


def test_below_finds_every_pending_record_under_the_cut() -> None:
    """Forty records far in the future stored at schedule offsets 4..43, and ten
    more at 100..109: a cut at 50 must name all forty, whatever offsets in their
    target partition the records hold (the cut was once compared with the last
    record's target offset after the first match: one record a compaction, so
    the log start stayed put while long-delayed records were pending)."""
    schedule = Schedule()
    for i in range(40):
        schedule.add(4 + i, 3_600_000 + i, target=TARGET, offset=1_000 + i)
    for i in range(10):
        schedule.add(100 + i, 3_600_000 + i, target=TARGET, offset=2_000 + i)
    found = below(schedule.export(), 50)
    assert sorted(p.entry for p in found) == list(range(4, 44))
    assert {p.offset for p in found} == set(range(1_000, 1_040))
    assert below(schedule.export(), 4) == []


def test_below_places_a_record_of_a_batch_by_its_batch() -> None:
    """A record inside a stored batch (``where`` = position << 32 | ...) lies in
    the batch that starts ``position`` entries before it: a cut between the
    batch's start and the record keeps the whole batch."""
    schedule = Schedule()
    schedule.add(12, 3_600_000, target=TARGET, offset=7, where=(2 << 32))  # batch at 10
    schedule.add(30, 3_600_000, target=TARGET, offset=8)
    assert [p.entry for p in below(schedule.export(), 11)] == [12]
    assert [p.entry for p in below(schedule.export(), 31)] == [12, 30]
    assert below(schedule.export(), 10) == []
