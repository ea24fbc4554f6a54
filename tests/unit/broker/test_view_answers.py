"""A view's Fetch answer (``ViewReader.answer``) never consists of empty
rebuilt batches only short of a held record-less tail: leading empty batches
are left out, an all-empty located range is read past (bounded, resuming
across reads), and a run without a match up to the read's limit is held,
then answered as its last batches."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from kcompat.broker.storage import hole_reads, views
from kcompat.broker.storage.hole_reads import HoleReads
from kcompat.log import header_walk
from kcompat.log.config import LogConfig
from kcompat.log.partition_log import PartitionLog
from kcompat.testing.memory_store import MemoryFileStore
from kcompat.wire.batch import HEADER_SIZE, iter_headers, parse_header
from kcompat.wire.records import decode_batch, encode_batch

EU = "region = 'eu'"


@pytest.fixture
def log() -> PartitionLog:
    return PartitionLog.open(Path("/d/src-0"), LogConfig(segment_bytes=64 << 20), 0,
                             MemoryFileStore("/d"))


def add(log: PartitionLog, count: int, eu: tuple[int, ...] = (), control: bool = False) -> None:
    """A batch of ``count`` records at the log end; those at the offsets
    ``eu`` match the view's filter. ``control``: a transaction's commit marker."""
    base = log.log_end_offset
    if control:
        raw = encode_batch([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), [], 1)],
                           base_offset=base, producer_id=7, producer_epoch=0,
                           transactional=True, control=True)
    else:
        raw = encode_batch([(b"k", b"%d" % (base + i),
                             [("region", b"eu" if base + i in eu else b"us")], 1)
                            for i in range(count)], base_offset=base)
    log.append(memoryview(raw), parse_header(memoryview(raw)), 0, 1)


class Reads:
    """One view's reader of ``log``, its cache and its run notes kept across reads."""

    def __init__(self, log: PartitionLog) -> None:
        self.log, self.views, self.holes = log, views.ViewReader(), HoleReads()
        self.cold: list[views.Cold] = []

    def answer(self, offset: int, limit: int = 1 << 20, now_s: float = 0.0,
               budget: list[int] | None = None) -> list[tuple[int, int, list[int]]]:
        """(base offset, last offset, record offsets) of each batch answered."""
        upper = self.log.log_end_offset
        where = self.log.locate(offset, limit, upper)
        assert where is not None
        self.cold = []
        got = self.views.answer(views.Asked("v", EU, "src", 0, offset, limit, upper), self.log,
                                where, budget or [views.WORK_RECORDS, views.WORK_BYTES],
                                self.cold, self.holes, lambda: now_s)
        return [(h.base_offset, h.base_offset + h.last_offset_delta,
                 [r.offset for r in decode_batch(memoryview(got)[p:p + h.size])])
                for p, h in iter_headers(got)]


def test_leading_empty_batches_are_left_out(log: PartitionLog) -> None:
    for _ in range(3):
        add(log, 10)
    add(log, 10, eu=(35,))
    add(log, 10)
    reads = Reads(log)
    # the answer starts at the batch that kept a record: an offset gap before it
    assert reads.answer(0) == [(30, 39, [35]), (40, 49, [])]
    assert reads.answer(4) == [(30, 39, [35]), (40, 49, [])]
    # from past the last match: its batch keeps nothing the client takes (the record
    # below the fetch offset is dropped by the client), so the run is held
    assert reads.answer(36) == []
    assert reads.answer(35) == [(30, 39, [35]), (40, 49, [])]


def test_an_all_empty_located_range_is_read_past(log: PartitionLog) -> None:
    """The partition's byte limit applies to the bytes answered: the source
    is read past the located range (two batches) to the match."""
    for _ in range(30):
        add(log, 10)
    add(log, 10, eu=(305,))
    add(log, 10, eu=(315,))
    two = 2 * log.locate(0, 1, log.log_end_offset).length  # type: ignore[union-attr]
    reads = Reads(log)
    got = reads.answer(0, limit=two)
    assert got[0] == (300, 309, [305])
    assert sum(len(r) for _b, _l, r in got) <= 2
    # at least the first batch with a record, however small the limit
    assert reads.answer(0, limit=1) == [(300, 309, [305])]


def test_a_control_batch_starts_an_answer(log: PartitionLog) -> None:
    for _ in range(4):
        add(log, 10)
    add(log, 1, control=True)
    add(log, 10)
    got = Reads(log).answer(0)
    assert [b for b, _l, _r in got] == [40, 41]


def test_a_record_less_tail_is_held_then_answered_as_its_last_batches(
        log: PartitionLog) -> None:
    add(log, 10, eu=(0,))
    for _ in range(5):
        add(log, 10)  # offsets 10..59: nothing the view keeps
    reads = Reads(log)
    assert reads.answer(1, now_s=100.0) == []  # held: the consumer stays where it is
    add(log, 10)  # the run grows: still held, from when a read first reached its end
    assert reads.answer(1, now_s=101.0) == []
    assert reads.answer(1, now_s=100.0 + hole_reads.TAIL_HOLD_S - 0.1) == []
    assert reads.holes.held == 3
    got = reads.answer(1, now_s=100.0 + hole_reads.TAIL_HOLD_S)
    # as stored from where the run was walked to: the consumer's position goes to its end
    assert got == [(60, 69, [])]
    # another reader at the same place (another group) is not held again
    assert reads.answer(1, now_s=200.0) == [(60, 69, [])]
    assert reads.holes.held == 3
    for _ in range(5):
        add(log, 10)  # a released run that grows: the batches walked, within the limit
    got = reads.answer(1, limit=3 * HEADER_SIZE, now_s=200.0)  # (empty: a header each)
    assert got == [(90, 99, []), (100, 109, []), (110, 119, [])]
    add(log, 10, eu=(125,))  # a match after the run: answered at once
    assert reads.answer(1, now_s=200.0) == [(120, 129, [125])]


def test_the_empty_batches_at_the_end_of_an_answer_stay(log: PartitionLog) -> None:
    add(log, 10, eu=(3,))
    add(log, 10)
    assert Reads(log).answer(0) == [(0, 9, [3]), (10, 19, [])]


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Source batch headers looked at by each read."""
    seen = [0]
    real = header_walk.headers

    def counting(*args: Any, **kw: Any) -> Iterator[Any]:
        for got in real(*args, **kw):
            seen[-1] += 1
            yield got

    monkeypatch.setattr(header_walk, "headers", counting)
    return seen


def test_the_walk_is_bounded_and_resumes(log: PartitionLog, walked: list[int],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A run longer than one walk is walked a bound a read, each read
    resuming where the last stopped (not from the fetch offset again), and
    not held back at the bound: only the end of what may be read is a tail."""
    monkeypatch.setattr(views, "WALK_HEADERS", 50)
    for _ in range(120):
        add(log, 1)
    add(log, 1, eu=(120,))
    reads = Reads(log)
    answers = []
    for _ in range(3):
        walked.append(0)
        answers.append(reads.answer(0))
    assert answers == [[], [], [(120, 120, [120])]]
    assert max(walked) <= 50 and sum(walked) <= 121 + 1
    # not held: the Fetch reads on at once (``paused``), the consumer's fetch size stays
    assert reads.holes.held == 0 and reads.views.paused == 2
    walked.append(0)
    assert reads.answer(0) == [(120, 120, [120])]  # another reader: resumes at the note
    assert walked[-1] == 21  # only past the 100 batches the note holds


def test_batches_past_the_located_range_go_cold_then_are_read_from_the_note(
        log: PartitionLog, walked: list[int]) -> None:
    """A large batch not cached past an all-empty located range is left for
    the worker thread (the answer is empty meanwhile, not empty batches); the
    read after ``warm`` resumes past the empty batches already walked."""
    for _ in range(20):
        add(log, 5)
    add(log, views.INLINE_RECORDS + 1, eu=(100 + views.INLINE_RECORDS,))
    reads = Reads(log)
    located = 2 * log.locate(0, 1, log.log_end_offset).length  # type: ignore[union-attr]
    assert reads.answer(0, limit=located) == []
    assert [c[0][3] for c in reads.cold] == [100]
    trio.run(reads.views.warm, reads.cold)
    walked.append(0)
    got = reads.answer(0, limit=located)
    assert got == [(100, 100 + views.INLINE_RECORDS, [100 + views.INLINE_RECORDS])]
    assert walked[-1] == 1 and reads.cold == []


def test_work_on_the_loop_stays_within_the_budget(log: PartitionLog) -> None:
    """Reading past an all-empty located range spends the same budget: the
    batches past it are left cold once it is gone."""
    for _ in range(40):
        add(log, 50)
    add(log, 1, eu=(2000,))
    reads = Reads(log)
    budget = [100, views.WORK_BYTES]
    assert reads.answer(0, budget=budget) == []
    assert budget[0] <= 0 and len(reads.cold) == 41 - 2  # two batches filtered on the loop
    trio.run(reads.views.warm, reads.cold)
    assert reads.answer(0, budget=[100, views.WORK_BYTES]) == [(2000, 2000, [2000])]



def test_a_fetch_reads_on_past_the_walk_bound_at_once(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A Fetch of a view over a run longer than one walk answers the record
    after it: the handler reads on from the note while its wait lasts (it
    waited out its wait and answered nothing)."""
    import datetime

    from kcompat.broker.config import broker_config
    from kcompat.broker.handlers import HANDLERS
    from kcompat.broker.host.broker import Broker
    from kcompat.broker.host.context import RequestContext
    from kcompat.testing import running
    from kcompat.wire import codec
    from kcompat.wire import versions as v

    monkeypatch.setattr(views, "WALK_HEADERS", 20)
    broker = Broker(broker_config.load(None, {"log.dirs": str(tmp_path)}, {}))
    produce, fetch = codec.request_module(v.PRODUCE, 9), codec.request_module(v.FETCH, 12)

    async def send(api: int, version: int, request: Any) -> Any:
        return await HANDLERS[api](RequestContext(broker, api, version, 1, "c", "/h"), request)

    async def body() -> Any:
        await running.create_topic(broker, "src", 1)
        await running.create_topic(broker, "v", 1, **{"kc.view.of": "src",
                                                      "kc.view.filter": EU})
        await broker.cluster.wait_leaders("src", 5.0)
        for n in range(101):  # 100 batches the view keeps nothing of, then one it keeps
            raw = encode_batch([(b"k", b"%d" % n, [("region", b"eu" if n == 100 else b"us")],
                                 1)])
            await send(v.PRODUCE, 9, produce.ProduceRequest(
                transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                topic_data=(produce.TopicProduceData(name="src", partition_data=(
                    produce.PartitionProduceData(index=0, records=raw),)),)))
        return await send(v.FETCH, 12, fetch.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(seconds=2), min_bytes=1,
            max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(fetch.FetchTopic(topic="v", partitions=(fetch.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=(), rack_id=""))

    try:
        answer = running.run(broker, body, services=False)
    finally:
        broker.close()
    records = bytes(answer.responses[0].partitions[0].records)
    assert [(h.base_offset, h.records_count) for _p, h in iter_headers(records)] == [(100, 1)]
    assert broker.state.views.paused == 100 // 20
    assert broker.state.hole_reads.held == 0


def test_an_answer_with_records_does_not_wait_for_cold_batches_after_them(
        log: PartitionLog) -> None:
    """A batch to filter in the worker thread after records already answered
    ends the answer and is left for the next Fetch (which warms it): the
    answer is not delayed by work it does not carry."""
    add(log, 10, eu=(3,))
    add(log, views.INLINE_RECORDS + 1, eu=(20,))
    reads = Reads(log)
    assert reads.answer(0) == [(0, 9, [3])] and reads.cold == []
    assert reads.answer(10) == [] and [c[0][3] for c in reads.cold] == [10]


def test_a_held_run_from_inside_a_kept_batch_notes_a_header_and_releases_it(
        log: PartitionLog) -> None:
    """From past the last record kept of a batch (the consumer's position
    after it): the batch counts as empty; the run's note keeps that batch
    without its records, which the release answers."""
    add(log, 400, eu=tuple(range(0, 398)))  # a view keeping nearly all of a large batch
    reads = Reads(log)
    assert reads.answer(398, now_s=10.0) == []
    note = reads.holes.note(log, (EU, 398))
    assert note is not None and len(note[2]) == HEADER_SIZE
    assert reads.answer(398, now_s=10.0 + hole_reads.TAIL_HOLD_S) == [(0, 399, [])]
