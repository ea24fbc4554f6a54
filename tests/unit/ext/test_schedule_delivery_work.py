"""Delivery from a backlog costs per record moved, not per record stored.

A schedule log of 100,000 delayed records in 100 stored batches of 1,000,
their due times shuffled over the batches (records produced together are due
at unrelated times, as with ``kc-delay-ms`` drawn per record): the leader's
whole delivery, batch after batch, decodes each moved record once, reads
its own bytes only and each stored batch's header once — where reading the whole stored batch per record
moved (the collapse of issue 31) decodes about a thousand records per record
moved.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from kcompat.ext.schedule import PROMOTE_CHUNK
from kcompat.ext.schedule_log import (
    ScheduleLog,
    StoredRecords,
    add_record,
    done_record,
    out_record,
    take_within,
)
from kcompat.wire.records import Record, RecordInput, decode_batch, encode_batch

T = ("orders", 0)
RECORDS = 100_000
PER_BATCH = 1_000
DELIVERY_BATCH = 500


class _File:
    def __init__(self) -> None:
        self.data = bytearray()

    def pread(self, size: int, position: int) -> bytes:
        return bytes(self.data[position:position + size])


@dataclass(frozen=True)
class _Slice:
    file: _File
    position: int
    length: int


class StoredLog:
    """Stored schedule-log batches in one file, found as a partition log finds them."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.positions: list[int] = []
        self.file = _File()
        self.end = 0

    def append(self, records: list[RecordInput]) -> bytes:
        batch = encode_batch(records, base_offset=self.end)
        self.bases.append(self.end)
        self.positions.append(len(self.file.data))
        self.file.data += batch
        self.end += len(records)
        return batch

    def batch_slice(self, offset: int) -> _Slice:
        i = bisect.bisect_right(self.bases, offset) - 1
        end = self.positions[i + 1] if i + 1 < len(self.positions) else len(self.file.data)
        return _Slice(self.file, self.positions[i], end - self.positions[i])


def test_a_backlog_is_delivered_with_bounded_decoding_per_record() -> None:
    rng = random.Random(31)
    log, machine = StoredLog(), ScheduleLog()
    due = list(range(RECORDS))
    rng.shuffle(due)
    for first in range(0, RECORDS, PER_BATCH):
        records = [add_record(Record(o, 7, b"k%d" % o, b"v" * 100, ()), T, 1_000 + due[o],
                              None, (-1, -1, -1), ())
                   for o in range(first, first + PER_BATCH)]
        machine.apply_stored(log.append(records))
    assert len(machine) == RECORDS
    stored = StoredRecords(log.batch_slice)
    delivered: list[bytes | None] = []
    now = 1_000 + RECORDS
    while machine.due_targets(now):
        entries = machine.schedule.due(now, DELIVERY_BATCH, T)
        planned = stored.delivered(entries)  # as DelayService plans a delivery
        planned = planned[:take_within(planned, 1 << 20)]
        machine.apply_stored(log.append([out_record(T, (p.entry for p in entries[:len(planned)]),
                                                    now)]))
        delivery = machine.inflight[T]
        assert len(delivery.entries) == len(planned)
        batch = encode_batch(planned)  # what goes to the target
        delivered += [r.key for r in decode_batch(batch)]
        machine.apply_stored(log.append([done_record(T, delivery.seq, now)]))
    # every record once (all are overdue at once here: within a slot being
    # promoted in turns the order follows promotion, not strictly due times)
    assert sorted(delivered) == sorted(b"k%d" % o for o in range(RECORDS))
    assert stored.decoded == RECORDS
    # a record's own bytes, not its batch's (~150 KiB): a read per record, and
    # the headers of the 100 stored batches
    assert stored.reads <= RECORDS + 100
    assert stored.bytes_read <= RECORDS * StoredRecords.READ_AHEAD + 100 * 61
    assert len(machine) == 0


def test_records_read_back_as_they_were_scheduled() -> None:
    log, machine = StoredLog(), ScheduleLog()
    headers = (("h", b"1"), ("kc-scheduled-offset", b"4"))
    machine.apply_stored(log.append([
        add_record(Record(4, 1234, b"key", b"value", headers), T, 50, "id-1", (3, 0, 0),
                   headers),
        add_record(Record(5, 1235, None, None, ()), T, 40, None, (3, 0, 0), ())]))
    entries = machine.schedule.due(100, 10, T)
    stored = StoredRecords(log.batch_slice)
    assert stored.delivered(entries) == [(None, None, (), 1235),
                                         (b"key", b"value", headers, 1234)]
    assert take_within(stored.delivered(entries), 1) == 1  # at least one


def test_a_huge_slot_is_promoted_in_turns_and_replicas_agree() -> None:
    """60,000 records due in the same second: no call promotes more than
    ``PROMOTE_CHUNK`` of them, and a follower that never promotes applies the
    leader's deliveries to the same state."""
    log, leader, follower = StoredLog(), ScheduleLog(), ScheduleLog()
    n = 60_000
    for first in range(0, n, 10_000):
        batch = log.append([add_record(Record(o, 7, None, b"v", ()), T, 5_000 + o % 1000,
                                       "id" if o % 7 == 0 else None, (-1, -1, -1), ())
                            for o in range(first, first + 10_000)])
        leader.apply_stored(batch)
        follower.apply_stored(batch)
    now, moved, calls = 6_000, 0, 0
    while leader.due_targets(now) or leader.schedule.promoting(now):
        calls += 1
        promoted_before = len(leader.schedule._pending)
        entries = leader.schedule.due(now, DELIVERY_BATCH, T)
        assert len(leader.schedule._pending) - promoted_before <= PROMOTE_CHUNK
        if not entries:
            continue
        batch = log.append([out_record(T, entries, now)])
        leader.apply_stored(batch)
        follower.apply_stored(batch)
        delivery = leader.inflight[T]
        assert follower.inflight[T] == delivery
        moved += len(delivery.entries)
        done = log.append([done_record(T, delivery.seq, now)])
        leader.apply_stored(done)
        follower.apply_stored(done)
        assert len(leader) == len(follower) == n - moved
    assert moved == n and calls >= n // PROMOTE_CHUNK
    assert not follower.schedule._pending  # the follower promoted nothing
    assert follower.schedule.cancel("id", T) is None  # ids went with their records
