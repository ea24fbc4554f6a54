"""Delivering a backlog costs Python calls per delivery batch, not per record.

A schedule log of 20,000 delayed records in stored batches of 2,000 led by
their ``adds`` op, due at shuffled times (records produced together are due
at unrelated times), all overdue: the leader's delivery, batch after batch of
1,000 — what is due (``Schedule.due``), the records' stored bytes
(``StoredRecords.tails``), the ``out`` record applied, the delivery framed,
``done`` applied. The due keys leave sorted runs a slice at a time
(``schedule_near``), the ``out`` record's entries are taken at C speed
(``Schedule.take_all``) and the records' tails are scanned in one loop
(``record_scan.tails_at``): the Python functions called per batch do not grow
with the records it moves — where a heap pop, a ``take`` and a ``tail_at``
per record made them thousands. Every record is delivered once, with the
bytes decoding it gives.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from itertools import accumulate
from pathlib import Path
from types import FrameType
from typing import Any

from kcompat.ext.schedule_adds import adds_batch
from kcompat.ext.schedule_log import ScheduleLog, done_record, out_record
from kcompat.ext.schedule_near import ENTRY_MASK, KEY_SHIFT, NearKeys, key_of
from kcompat.ext.schedule_stored import (
    StoredRecords,
    delivered_form,
    delivery_batch,
    take_tails_within,
)
from kcompat.wire.record_scan import tail_at, tails_at
from kcompat.wire.records import (
    decode_batch,
    encode_batch,
    encode_headers,
    encode_raw_records,
    record_tail,
)
from tests.unit.ext.test_schedule_delivery_work import StoredLog

T = ("orders", 0)
RECORDS = 20_000
PER_BATCH = 2_000
DELIVERY = 1_000
KCOMPAT = str(Path(__file__).resolve().parents[3] / "kcompat")


def _backlog() -> tuple[StoredLog, ScheduleLog, int]:
    rng = random.Random(31)
    log, machine = StoredLog(), ScheduleLog()
    due = list(range(RECORDS))
    rng.shuffle(due)
    for first in range(0, RECORDS, PER_BATCH):
        parts = [(1_000 + i, record_tail(b"\x00" + b"\xc8\x01" + b"v" * 100, 1,
                                         encode_headers((("h", b"%d" % i),))))
                 for i in range(first, first + PER_BATCH)]
        batch = bytearray(adds_batch(T, (7, 0, first), parts,
                                     list(range(first, first + PER_BATCH)),
                                     [50_000 + due[i] for i in range(first, first + PER_BATCH)]))
        batch[0:8] = log.end.to_bytes(8, "big")  # its base offset in the log
        log.bases.append(log.end)
        log.positions.append(len(log.file.data))
        log.file.data += batch
        log.end += PER_BATCH + 1
        machine.apply_stored(bytes(batch))
    return log, machine, log.end


def test_a_backlog_is_delivered_with_python_calls_per_batch_not_per_record() -> None:
    log, machine, offset = _backlog()
    now = 10 ** 9
    machine.schedule.promote(now, limit=None)
    stored = StoredRecords(log.batch_slice)
    calls: Counter[str] = Counter()

    def count(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(KCOMPAT):
            calls[frame.f_code.co_name] += 1

    delivered: list[int] = []
    batches = 0
    expected = {}
    while entries := machine.schedule.due(now, DELIVERY, T):
        expected.update((p.entry, delivered_form(stored.record(p))) for p in entries)
        sys.setprofile(count)
        try:
            tails = stored.tails(entries)
            k = take_tails_within(tails, 1 << 20)
            machine.apply_stored(encode_batch([out_record(T, entries[:k], now)],
                                              base_offset=offset))
            delivery = machine.inflight[T]
            batch = delivery_batch(tails[:k], 1 << 62, delivery.seq)
            machine.apply_stored(encode_batch([done_record(T, delivery.seq, now)],
                                              base_offset=offset + 1))
        finally:
            sys.setprofile(None)
        offset += 2
        batches += 1
        assert [p.entry for p in delivery.entries] == [p.entry for p in entries[:k]]
        assert [(r.key, r.value, tuple(r.headers), r.timestamp)
                for r in decode_batch(batch)] == [expected[p.entry] for p in delivery.entries]
        delivered += [p.entry for p in delivery.entries]
    assert len(delivered) == RECORDS and len(set(delivered)) == RECORDS
    assert len(machine) == 0
    assert batches == RECORDS // DELIVERY
    # a few dozen calls per batch (encoding the out and done records, applying them),
    # however many records it moves — a heap pop, a take and a tail_at per record
    # made it several thousand
    per_batch = sum(calls.values()) / batches
    assert per_batch < DELIVERY / 5, calls.most_common(8)


def test_tails_at_reads_what_tail_at_reads() -> None:
    rng = random.Random(7)
    for _ in range(30):
        records = [(rng.randrange(-200_000, 200_000),
                    rng.randbytes(rng.randrange(1, 300) if rng.random() < 0.9
                                  else rng.randrange(8_000, 20_000)))
                   for _ in range(80)]
        raw = encode_raw_records(records, rng.randrange(100_000))
        buf, starts = b"".join(raw), list(accumulate(map(len, raw[:-1]), initial=0))
        stamps, tails = tails_at(buf, starts, [len(buf)] * len(starts))
        assert list(zip(stamps, tails, strict=True)) == [tail_at(buf, s) for s in starts]
        # a record running past what was read of it: None
        cut = starts[40] + 5
        assert tails_at(buf, starts[40:41], [cut])[1] == [None]


def test_sorted_runs_hand_out_what_a_sorted_model_does() -> None:
    """``NearKeys``: runs added in any order and sizes (merged or not), some
    entries taken meanwhile; each ``pop_due`` gives the earliest live keys
    due, as sorting everything would, and a few sorts per call at most."""
    rng = random.Random(3)
    near, live, model = NearKeys(), set(), []
    entry, calls = 0, 0
    for _ in range(400):
        if rng.random() < 0.5:
            keys = []
            for _ in range(rng.choice([1, 3, 50, 700])):
                keys.append(key_of(rng.randrange(1_000), entry))
                live.add(entry)
                entry += 1
            keys.sort()
            near.add(T, keys)
            model += keys
        else:
            for e in rng.sample(sorted(live), min(len(live), rng.randrange(20))):
                live.discard(e)  # taken or cancelled meanwhile
            now, limit = rng.randrange(1_000), rng.choice([1, 10, 500])
            got, entries = near.pop_due(T, now, limit, live)
            assert entries == [k & ENTRY_MASK for k in got]
            model = sorted(k for k in model if k & ENTRY_MASK in live)
            want = [k for k in model if k >> KEY_SHIFT <= now][:limit]
            assert got == want
            model = [k for k in model if k not in set(got)]
            live.difference_update(k & ENTRY_MASK for k in got)
            calls += 1
        assert near.runs(T) <= 12
    assert near.sorts <= 4 * 400
