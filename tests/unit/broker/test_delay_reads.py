"""A delivery reads its records a few at a time, and a turn of the loop
ends once ``READ_TURN_S`` has gone by: each record may cost a pread, and
while worker threads are busy each pread waits for the GIL to come back. In
the 1M delayed soak a turn that read 100 records took up to 46 ms, the
longest steps of the loop (issue 31)."""

from __future__ import annotations

import time

import trio

from kcompat.broker.ext.delays import READ_CHUNK, READ_PIECE, DelayService
from kcompat.ext.schedule_stored import RECORD_OVERHEAD, take_tails_within


class _SlowStore:
    """Records whose read costs 1 ms each (a pread that waits for the GIL);
    a record's tail is (its entry, b"")."""

    def __init__(self) -> None:
        self.reads: list[int] = []  # records read per call

    def tails(self, entries: list[int]) -> list[tuple[int, bytes]]:
        self.reads.append(len(entries))
        time.sleep(0.001 * len(entries))
        return [(e, b"") for e in entries]


class _Steps(trio.abc.Instrument):
    """Records read in each step of the task named ``read``."""

    def __init__(self, store: _SlowStore) -> None:
        self.store, self.at, self.per_step = store, 0, []  # type: list[int]

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.at = sum(self.store.reads)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("read"):
            self.per_step.append(sum(self.store.reads) - self.at)


def test_a_turn_of_reading_ends_when_its_time_is_up() -> None:
    store = _SlowStore()
    service = object.__new__(DelayService)
    service._records = lambda index: store  # type: ignore[method-assign]
    entries = list(range(300))
    steps = _Steps(store)
    got: list[object] = []

    async def read() -> None:
        got.extend(await service._read(0, entries))  # type: ignore[arg-type]

    trio.run(read, instruments=[steps])
    assert got == [(e, b"") for e in entries]  # every record, in order
    assert 300 <= READ_CHUNK  # (the old chunking alone read all 300 in one step)
    # a piece of 25 (25 ms) used a turn up: no step read more
    assert max(steps.per_step) == READ_PIECE
    assert sum(steps.per_step) == 300


def test_reading_stops_at_the_turn_that_passes_the_delivery_size() -> None:
    """A delivery reads only until its records weigh more than
    ``bytes_max``: what later turns would read is not read."""
    store = _SlowStore()
    service = object.__new__(DelayService)
    service._records = lambda index: store  # type: ignore[method-assign]
    entries = list(range(300))

    async def read() -> list[object]:
        return await service._read(0, entries, RECORD_OVERHEAD * 30)  # type: ignore[arg-type]

    got = trio.run(read)
    assert len(got) == 2 * READ_PIECE  # the second turn's piece passed 30 records
    assert got == [(e, b"") for e in entries[:len(got)]]
    assert take_tails_within(got, RECORD_OVERHEAD * 30) == 30  # what the delivery then takes
