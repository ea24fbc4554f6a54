"""The records of a delivery are read a stored batch at a time: neighbours with one read.

Records due in the order they were scheduled (one delay for all: a backlog
after a pause, a burst) lie side by side in the schedule log; reading each
alone costs a read per record delivered, reading them by stored batch a read
per run of neighbours. Either way a delivery is framed from what
``delivered_form`` of the decoded record gives.
"""

from __future__ import annotations

from kcompat.ext.schedule_log import ScheduleLog, StoredRecords, add_record
from kcompat.ext.schedule_stored import delivered_form, tail_of
from kcompat.wire.records import Record
from tests.unit.ext.test_schedule_delivery_work import StoredLog

T = ("orders", 0)


def _scheduled(values: list[bytes], per_batch: int, due_of: list[int]
               ) -> tuple[StoredLog, ScheduleLog]:
    log, machine = StoredLog(), ScheduleLog()
    for first in range(0, len(values), per_batch):
        machine.apply_stored(log.append([
            add_record(Record(o, 7 + o, b"k%d" % o, values[o], (("h", b"%d" % o),)), T,
                       due_of[o], None, (-1, -1, -1), (("h", b"%d" % o),))
            for o in range(first, min(first + per_batch, len(values)))]))
    return log, machine


def test_neighbours_due_together_are_read_together() -> None:
    n, per_batch = 20_000, 2_000
    log, machine = _scheduled([b"v" * 100] * n, per_batch, [1_000 + o for o in range(n)])
    stored = StoredRecords(log.batch_slice)
    read = 0
    while entries := machine.schedule.due(10 ** 9, 500, T):
        tails = stored.tails(entries)
        assert [t[1][:1] for t in tails]  # read
        for p in entries:
            machine.schedule.delivered(p.entry)
        read += len(tails)
    assert read == n
    # a read per delivery of 500 (one stored batch or two) and a header per stored
    # batch — one read per record delivered without the grouping
    assert stored.reads <= 2 * n // 500 + n // per_batch


def test_a_long_record_in_a_run_is_read_whole() -> None:
    """Records longer than what a run reads past its last start: each is read
    again alone, and every tail equals the decoded record's."""
    values = [b"v" * (30_000 if o % 7 == 3 else 50) for o in range(300)]
    log, machine = _scheduled(values, 100, [5 for _ in values])
    entries = machine.schedule.due(10, 1_000, T)
    stored = StoredRecords(log.batch_slice)
    tails = stored.tails(entries)
    expected = [tail_of(delivered_form(StoredRecords(log.batch_slice).record(p)))
                for p in entries]
    assert tails == expected
    assert [t[1] for t in tails].count(b"") == 0
