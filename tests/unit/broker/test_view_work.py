"""A view's filtering on the event loop stays bounded whatever the batch size:
large batches are filtered in a worker thread (``ViewReader.warm``), and an
answer cut short before any record is empty, not a set of empty batches."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.broker import views
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
    assert views._rebuild(flt, whole) == (expected, len(kept), len(scanned) - len(kept))
