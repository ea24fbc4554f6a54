"""A view's filtering on the event loop stays bounded whatever the batch size:
large batches are filtered in a worker thread (``ViewReader.warm``), and an
answer cut short before any record is empty, not a set of empty batches."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.broker.storage import views
from kcompat.ext import view_filter
from kcompat.wire import record_scan
from kcompat.wire.batch import CODEC_LZ4, CODEC_NONE, iter_headers
from kcompat.wire.records import decode_batch, encode_batch

EU = "region = 'eu'"


def batch(base: int, count: int, eu_every: int = 2) -> bytes:
    return encode_batch([(b"k", b"%d" % (base + i),
                          [("region", b"eu" if (base + i) % eu_every == 0 else b"us")], 1)
                         for i in range(count)], base_offset=base)


@pytest.fixture
def rebuilt_on_loop(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records filtered by ``_rebuild`` called from the test's own thread."""
    import threading

    seen: list[int] = []
    main = threading.get_ident()
    real = views._rebuild

    def counting(flt: Any, whole: memoryview) -> Any:
        done = real(flt, whole)
        if threading.get_ident() == main:
            seen.append(done[1] + done[2])
        return done

    monkeypatch.setattr(views, "_rebuild", counting)
    return seen


def test_a_large_batch_is_filtered_off_the_loop_then_answered_from_the_cache(
        rebuilt_on_loop: list[int]) -> None:
    small, large, after = batch(0, 10), batch(10, 10_000), batch(10_010, 10)
    data = small + large + after
    reader = views.ViewReader()
    cold: list[views.Cold] = []
    first = reader.filter_records("v", EU, "src", 0, data, [views.WORK_RECORDS], cold)
    assert [h.base_offset for _p, h in iter_headers(first)] == [0]  # ends before it
    # it and what follows it are left for the thread
    assert [c[0][3] for c in cold] == [10, 10_010] and rebuilt_on_loop == [10]
    trio.run(reader.warm, cold)
    assert rebuilt_on_loop == [10]  # the 10,000 records were filtered in the thread
    again: list[views.Cold] = []
    second = reader.filter_records("v", EU, "src", 0, data, [views.WORK_RECORDS], again)
    assert again == [] and rebuilt_on_loop == [10]
    offsets = [r.offset for _p, h in iter_headers(second)
               for r in decode_batch(memoryview(second)[_p:_p + h.size])]
    assert offsets == list(range(0, 10_020, 2))
    # without a cold list (share groups' reads) it is filtered in line, as before
    assert views.ViewReader().filter_records("v", EU, "src", 0, data) == second


def test_work_on_the_loop_per_fetch_is_bounded(rebuilt_on_loop: list[int]) -> None:
    """Batches of up to INLINE_RECORDS records, many of them: at most the
    budget plus one batch are filtered on the loop per Fetch."""
    size = views.INLINE_RECORDS
    data = b"".join(batch(n * size, size) for n in range(40))
    reader = views.ViewReader()
    for _fetch in range(3):
        rebuilt_on_loop.clear()
        reader.filter_records("v", EU, "src", 0, data, [views.WORK_RECORDS], [])
        assert sum(rebuilt_on_loop) <= views.WORK_RECORDS + size


def test_an_answer_cut_before_any_record_is_empty_not_empty_batches() -> None:
    nothing = [batch(n * 5, 5, eu_every=1000 + n) for n in range(1, 4)]  # no eu record
    data = b"".join(nothing)
    reader = views.ViewReader()
    assert reader.filter_records("v", EU, "src", 0, data, [1], []) == b""  # cut: cached
    assert reader.filter_records("v", EU, "src", 0, data, [0], []) == b""  # still cut
    whole = reader.filter_records("v", EU, "src", 0, data, [views.WORK_RECORDS], [])
    # read to its end, not cut: the empty batches go out, so the position moves on
    assert [h.records_count for _p, h in iter_headers(whole)] == [0, 0, 0]


_HEADER = st.tuples(st.sampled_from(["n", "region", "x"]),
                    st.one_of(st.none(), st.sampled_from([b"0", b"1", b"12", b"eu", b"\xff"])))
_RECORD = st.tuples(st.one_of(st.none(), st.binary(max_size=4)),
                    st.one_of(st.none(), st.binary(max_size=30)),
                    st.lists(_HEADER, max_size=3))


@settings(max_examples=150, deadline=None)
@given(st.lists(_RECORD, min_size=1, max_size=40), st.sampled_from([CODEC_NONE, CODEC_LZ4]),
       st.sampled_from(["n < 1", "region = 'eu' OR n IS NULL", "x IS NOT NULL AND n >= 1"]))
def test_a_rebuilt_batch_is_the_scanned_records_it_keeps(records: list[Any], codec: int,
                                                         text: str) -> None:
    """The batch ``_rebuild`` makes from record layouts equals the splice of
    the records a full scan keeps (the form it replaced)."""
    whole = memoryview(encode_batch([(k, v, h, 5) for k, v, h in records], codec=codec,
                                    base_offset=7))
    flt = view_filter.parse(text)
    header, payload, scanned = record_scan.scan(whole, flt.header_names)
    kept = [r for r in scanned if flt.matches(r.headers)]
    expected = bytes(whole) if len(kept) == len(scanned) else record_scan.splice(
        whole, header, payload, kept)
    done = views._rebuild(flt, whole)
    assert done[:3] == (expected, len(kept), len(scanned) - len(kept))
    deltas = list(done[3]) if done[3] is not None else list(range(len(scanned)))
    assert deltas == [r.offset_delta for r in kept]  # what share groups learn of a view


# -- bytes read and records looked at on the loop, through Fetch and ShareFetch ---------


def _source(batches: list[bytes]) -> Any:
    """A source partition ``src``-0 in memory holding ``batches``."""
    from pathlib import Path

    from kcompat.broker.storage.partition import Partition
    from kcompat.log.config import LogConfig
    from kcompat.log.partition_log import PartitionLog
    from kcompat.testing.memory_store import MemoryFileStore
    from kcompat.wire.batch import parse_header

    fs = MemoryFileStore("/d")
    log = PartitionLog.open(Path("/d/src-0"), LogConfig(segment_bytes=64 << 20), 0, fs)
    for raw in batches:
        view = memoryview(raw)
        log.append(view, parse_header(view), 0, 1)
    return Partition("src", 0, log)


@pytest.fixture
def loop_work(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Bytes read from log files and records scanned (their layouts read) on
    the test's own thread, the stand-in for the event loop."""
    import threading

    from kcompat.testing.memory_store import MemoryFile

    main = threading.get_ident()
    seen = {"bytes": 0, "records": 0}
    pread, layouts, scan = MemoryFile.pread, record_scan.layouts, record_scan.scan

    def counting_pread(self: Any, size: int, position: int) -> bytes:
        got = pread(self, size, position)
        if threading.get_ident() == main:
            seen["bytes"] += len(got)
        return got

    def counting_layouts(buf: bytes, count: int) -> Any:
        if threading.get_ident() == main:
            seen["records"] += count
        return layouts(buf, count)

    def counting_scan(batch: Any, *args: Any, **kw: Any) -> Any:
        got = scan(batch, *args, **kw)
        if threading.get_ident() == main:
            seen["records"] += len(got[2])
        return got

    monkeypatch.setattr(MemoryFile, "pread", counting_pread)
    monkeypatch.setattr(record_scan, "layouts", counting_layouts)
    monkeypatch.setattr(record_scan, "scan", counting_scan)
    return seen


def test_a_view_fetch_reads_only_batch_headers_on_the_loop(loop_work: dict[str, int]) -> None:
    """A view's Fetch over large source batches reads their headers on the
    loop, the batches themselves in the worker thread, and answers from the
    cache reading the headers only (it read each partition's whole range)."""
    from types import SimpleNamespace

    from kcompat.broker.handlers import fetch
    from kcompat.broker.storage.hole_reads import HoleReads

    part = _source([batch(n * 10_000, 10_000) for n in range(3)])
    source_bytes = part.log.size_bytes
    meta = SimpleNamespace(view_of="src", configs={"kc.view.filter": EU})
    reader = views.ViewReader()
    replicas = SimpleNamespace(partition=lambda _name, _index, _version: (part, 0, True))
    ctx = SimpleNamespace(broker=SimpleNamespace(read_replicas=replicas), version=12,
                          state=SimpleNamespace(topics={"v": meta}, views=reader,
                                                hole_reads=HoleReads()))
    asked = SimpleNamespace(partition=0, fetch_offset=0, partition_max_bytes=1 << 20,
                            current_leader_epoch=-1)
    named: list[Any] = [("v", SimpleNamespace(partitions=[asked]))]
    request = SimpleNamespace(isolation_level=0, rack_id="")

    def read() -> tuple[bytes, list[views.Cold]]:
        cold: list[views.Cold] = []
        reads, _total, _now, _parts = fetch._read_all(ctx, request, named, None, {"v"},
                                                      1 << 20, cold)
        return reads[0][0].records, cold

    first, cold = read()
    assert first == b"" and len(cold) == 3  # all left for the thread
    assert loop_work["bytes"] <= 3 * header_walk_window() < source_bytes // 10
    assert loop_work["records"] == 0
    trio.run(reader.warm, cold)
    assert loop_work["records"] == 0  # filtered in the thread
    loop_work["bytes"] = 0
    second, cold = read()
    assert cold == [] and loop_work["records"] == 0
    assert loop_work["bytes"] <= 3 * header_walk_window() < source_bytes // 10
    offsets = [r.offset for p, h in iter_headers(second)
               for r in decode_batch(memoryview(second)[p:p + h.size])]
    assert offsets == list(range(0, 30_000, 2))


def header_walk_window() -> int:
    from kcompat.log import LogConfig, header_walk
    from kcompat.wire.batch import HEADER_SIZE

    # a window, and locate's read of the headers after its index entry and a size read
    return header_walk.WINDOW_BYTES + LogConfig().index_interval_bytes + HEADER_SIZE + 64


def test_a_cold_batch_changed_before_the_thread_reads_it_is_not_cached() -> None:
    """The log truncated (or cleaned) between the Fetch's walk and the
    thread's read: what the thread reads is not the batch seen, and nothing
    is cached for it."""
    from kcompat.broker.storage.hole_reads import HoleReads

    part = _source([batch(0, 10), batch(10, 1_000)])
    reader = views.ViewReader()
    where = part.log.locate(10, 1 << 20, part.log.log_end_offset)
    assert where is not None
    cold: list[views.Cold] = []
    reader.answer(views.Asked("v", EU, "src", 0, 10, 1 << 20, part.log.log_end_offset),
                  part.log, where, [views.WORK_RECORDS, views.WORK_BYTES], cold, HoleReads(),
                  float)
    assert len(cold) == 1 and cold[0][0][3] == 10
    part.log.truncate_to(10)
    part.log.append(memoryview(other := batch(10, 1_000, eu_every=3)),
                    __import__("kcompat.wire.batch", fromlist=["x"]).parse_header(other), 0, 1)
    trio.run(reader.warm, cold)
    assert reader.cached(cold[0][0]) is None


def test_a_share_group_on_a_view_leaves_large_batches_to_the_thread(
        loop_work: dict[str, int]) -> None:
    """A share-partition of a view acquires up to a large batch not
    filtered yet; ``warm`` filters it in the worker thread, and the next
    acquisition learns its records and serves its rebuilt bytes from the
    view's cache: no record of it looked at on the loop (each acquisition
    scanned and filtered the 10,000 records there)."""
    from types import SimpleNamespace

    from kcompat.broker.groups.share_reads import ShareReads
    from kcompat.broker.groups.share_writes import Held
    from kcompat.broker.groups.shares import ShareService
    from kcompat.group.share_partition import SharePartition

    part = _source([batch(0, 10), batch(10, 10_000), batch(10_010, 10)])
    reader = views.ViewReader()
    svc = object.__new__(ShareService)
    meta = SimpleNamespace(name="v", view_of="src", configs={"kc.view.filter": EU})
    svc.state = SimpleNamespace(topics={"v": meta}, views=reader)  # type: ignore[assignment]
    svc.reads = ShareReads(reader)
    svc._timer = trio.Event()
    held = Held(("g", "v", 0), SharePartition(0), generation=1, term=1, state_index=0)
    ranges, data = svc.acquire(held, part, "m", 500, False)
    assert loop_work["records"] <= 10  # the large batch was not looked at on the loop
    assert [(r.first_offset, r.last_offset) for r in ranges] == [(0, 0), (2, 2), (4, 4),
                                                                  (6, 6), (8, 8)]
    assert held.machine.read_offset == 10  # and no record of it taken for a gap
    trio.run(svc.warm, held, part, False)
    assert loop_work["records"] <= 10
    loop_work["bytes"] = 0
    ranges, data = svc.acquire(held, part, "m", 500, False)
    assert loop_work["records"] <= 10
    assert loop_work["bytes"] <= 3 * header_walk_window() < part.log.size_bytes // 3
    assert sum(r.last_offset - r.first_offset + 1 for r in ranges) == 500
    assert all(r.first_offset % 2 == 0 and r.first_offset >= 10 for r in ranges)
    assert [h.base_offset for _p, h in iter_headers(data)] == [10]
    assert [r.offset for r in decode_batch(memoryview(data))] == list(range(10, 10_010, 2))


def test_a_keyed_share_read_scans_large_batches_in_the_thread(loop_work: dict[str, int]) -> None:
    """Message groups (kc.share.ordering=message-group) on a plain topic: a
    large batch's records are scanned for their group in the worker thread
    (``ShareService.warm``), not by the acquisition on the loop."""
    from types import SimpleNamespace

    from kcompat.broker.groups.share_reads import ShareReads
    from kcompat.broker.groups.share_writes import Held
    from kcompat.broker.groups.shares import ShareService
    from kcompat.group.share_partition import ShareConfig, SharePartition

    part = _source([batch(0, 10), batch(10, 10_000)])
    reader = views.ViewReader()
    svc = object.__new__(ShareService)
    meta = SimpleNamespace(name="src", view_of=None, configs={})
    svc.state = SimpleNamespace(topics={"src": meta}, views=reader)  # type: ignore[assignment]
    svc.reads = ShareReads(reader)
    svc._timer = trio.Event()
    machine = SharePartition(0, ShareConfig(ordering_message_group=True))
    held = Held(("g", "src", 0), machine, generation=1, term=1, state_index=0)
    ranges, _data = svc.acquire(held, part, "m", 500, False)
    assert loop_work["records"] <= 10 and machine.read_offset <= 10
    trio.run(svc.warm, held, part, False)
    loop_work["records"] = 0
    ranges, _data = svc.acquire(held, part, "m", 500, False)
    assert loop_work["records"] == 0 and machine.read_offset > 10
