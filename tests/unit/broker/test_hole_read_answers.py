"""Fetch answers over record-less batches (``hole_reads``): an answer never
starts with batches that hold no record when a batch with records follows
below the read's limit; a record-less tail is held back, then answered."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kcompat.broker.storage import hole_reads
from kcompat.log import PartitionLog
from kcompat.log.partition_log import FileSlice
from kcompat.wire.batch import BatchHeader, iter_headers, validate
from kcompat.wire.records import rebuild_batch

sys.path.insert(0, str(Path(__file__).parents[1] / "log"))
from log_helpers import make_batch, open_log  # noqa: E402


def add(log: PartitionLog, count: int, empty: bool = False, value_size: int = 10) -> BatchHeader:
    """A batch of ``count`` offsets; ``empty``: all its records taken out (a hole batch)."""
    view, header = make_batch(count, value_size=value_size)
    if empty:
        data = rebuild_batch(header, [])
        view, header = memoryview(data), validate(data)
    return log.append(view, header, 0, 0)


def answer(log: PartitionLog, reads: hole_reads.HoleReads, offset: int, max_bytes: int,
           now_s: float = 0.0, upper: int | None = None) -> list[tuple[int, int]] | None:
    """(base offset, records) of each whole batch answered; None: an empty answer."""
    upper = log.log_end_offset if upper is None else upper
    where = log.locate(offset, max_bytes, upper)
    assert where is not None
    got = reads.lead(log, where, max_bytes, upper, lambda: now_s)
    if got is None:
        return None
    return [(h.base_offset, h.records_count) for _p, h in iter_headers(got.read())]


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    return open_log(tmp_path / "t-0")


def test_an_answer_starting_with_records_is_left_as_located(log: PartitionLog) -> None:
    add(log, 3)
    add(log, 2, empty=True)
    where = log.locate(0, 1 << 20, log.log_end_offset)
    assert where is not None
    assert hole_reads.HoleReads().lead(log, where, 1 << 20, log.log_end_offset, float) is where


class _Unread:
    """A file that must not be read (the answer's common path reads nothing)."""

    def pread(self, size: int, position: int) -> bytes:
        raise AssertionError(f"read {size} bytes at {position}")


def test_the_common_path_reads_nothing_more_than_locate(log: PartitionLog) -> None:
    """Every Fetch of every partition goes through ``lead``: the header of the
    first batch is the one ``locate`` read to find it (``FileSlice.first``)."""
    add(log, 3)
    add(log, 2)
    where = log.locate(3, 1 << 20, log.log_end_offset)
    assert where is not None and where.first is not None and where.first.base_offset == 3
    blind = FileSlice(_Unread(), where.position, where.length, where.first)  # type: ignore[arg-type]
    assert hole_reads.HoleReads().lead(log, blind, 1 << 20, log.log_end_offset, float) is blind


def test_record_less_batches_cut_by_the_size_limit_start_the_answer_at_the_records(
        log: PartitionLog) -> None:
    for _ in range(40):
        add(log, 5, empty=True)  # 40 hole batches of 61 bytes: offsets 0..199
    big = add(log, 50, value_size=100)
    add(log, 1)
    reads = hole_reads.HoleReads()
    # as located: holes only, the record batch cut at 1 KB — librdkafka's "too large"
    where = log.locate(0, 1024, log.log_end_offset)
    assert where is not None
    assert all(h.records_count == 0 for _p, h in iter_headers(where.read()))
    got = answer(log, reads, 0, 1024)
    assert got == [(200, 50)]  # starts at the records, whole, though larger than 1 KB
    assert big.size > 1024
    assert answer(log, reads, 120, 1 << 20) == [(200, 50), (250, 1)]
    assert reads.skipped_batches == 40 + 16


def test_the_walk_crosses_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=61 * 10)
    for _ in range(25):
        add(log, 2, empty=True)
    add(log, 3)
    assert len(log._segments) > 2
    assert answer(log, hole_reads.HoleReads(), 0, 100) == [(50, 3)]


def test_a_record_less_tail_is_held_then_answered(log: PartitionLog) -> None:
    add(log, 2)
    for _ in range(5):
        add(log, 3, empty=True)  # offsets 2..16
    reads = hole_reads.HoleReads()
    assert answer(log, reads, 2, 1 << 20, now_s=100.0) is None
    add(log, 3, empty=True)  # the run grows: still held, from when it was first read
    assert answer(log, reads, 5, 1 << 20, now_s=101.0) is None  # another position: its own
    assert answer(log, reads, 2, 1 << 20, now_s=100.0 + hole_reads.TAIL_HOLD_S - 0.1) is None
    passed = answer(log, reads, 2, 1 << 20, now_s=100.0 + hole_reads.TAIL_HOLD_S)
    assert passed == [(2 + 3 * i, 0) for i in range(6)]  # as stored: the client passes
    assert reads.held == 3
    # another reader of the same run (another group) is not held again
    assert answer(log, reads, 2, 1 << 20, now_s=100.0 + hole_reads.TAIL_HOLD_S + 1) == passed
    assert reads.held == 3


def test_a_record_less_tail_is_below_the_read_limit_only(log: PartitionLog) -> None:
    add(log, 2, empty=True)
    add(log, 2)
    reads = hole_reads.HoleReads()
    # the records lie past the high watermark: the holes are the readable tail
    assert answer(log, reads, 0, 1 << 20, upper=2) is None
    assert answer(log, reads, 0, 1 << 20) == [(2, 2)]


def test_a_delivery_after_the_tail_is_answered_at_once(log: PartitionLog) -> None:
    for _ in range(3):
        add(log, 1, empty=True)
    reads = hole_reads.HoleReads()
    assert answer(log, reads, 0, 1 << 20) is None
    add(log, 1)
    assert answer(log, reads, 0, 1 << 20) == [(3, 1)]


def test_the_walk_is_bounded_and_resumes(log: PartitionLog,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A run longer than one walk is walked a bound at a time across reads,
    each resuming where the last stopped: the work per read is the bound, not
    the run, and tail reads that wake on every append do not walk it again."""
    monkeypatch.setattr(hole_reads, "WALK_HEADERS", 50)
    for _ in range(120):
        add(log, 1, empty=True)
    walked: list[int] = []
    real = hole_reads._walk

    def counting(span: FileSlice, offset: int, done: int) -> tuple[object, int, int]:
        out = real(span, offset, done)
        walked.append(out[2] - done)
        return out

    monkeypatch.setattr(hole_reads, "_walk", counting)
    reads = hole_reads.HoleReads()
    assert answer(log, reads, 0, 1 << 20) is None  # 50 walked: not found yet, held
    assert answer(log, reads, 0, 1 << 20) is None  # 50 more
    assert answer(log, reads, 0, 1 << 20) is None  # the last 20: the tail, held
    assert sum(walked) == 120 and max(walked) <= 50
    add(log, 1, empty=True)
    add(log, 1)
    walked.clear()
    assert answer(log, reads, 0, 1 << 20) == [(121, 1)]  # from the records
    assert sum(walked) == 1  # only what was appended since
    # a run still not passed after the hold is answered as stored
    for _ in range(200):
        add(log, 1, empty=True)
    add(log, 1)
    assert answer(log, reads, 122, 1 << 20, now_s=50.0) is None
    got = answer(log, reads, 122, 1 << 20, now_s=50.0 + hole_reads.TAIL_HOLD_S)
    assert got is not None and got[0] == (122, 0)
