"""Deduplication windows: record ids, the window, eviction, and a rebuild from the log."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.ext.dedup import (
    DEDUP_ID,
    DEDUP_ID_MAX_BYTES,
    DedupIndex,
    content_id,
    header_id,
    record_id,
)
from kcompat.ext.delay import HeaderError

StoredBatch = tuple[int, int, list[bytes | None]]  # base offset, append time, ids kept

T0 = 1_700_000_000_000
W = 300_000  # SQS's five minutes


class Leader:
    """A partition leader: check, append (duplicates become holes), add."""

    def __init__(self, window_ms: int = W, max_entries: int = 1000) -> None:
        self.index = DedupIndex(window_ms, max_entries)
        self.log: list[StoredBatch] = []
        self.next_offset = 0

    def produce(self, ids: list[bytes | None], now_ms: int) -> list[bool]:
        dups = self.index.check(ids, now_ms)
        kept = [i for i, d in zip(ids, dups, strict=True) if not d]
        base = self.next_offset
        self.next_offset += len(ids)  # holes keep their offsets
        self.log.append((base, now_ms, kept))
        self.index.add(kept, now_ms, base)
        return dups


def test_within_the_window_a_duplicate_after_it_stored_again() -> None:
    leader = Leader()
    assert leader.produce([b"order-1"], T0) == [False]
    assert leader.produce([b"order-1"], T0 + 1000) == [True]
    assert leader.produce([b"order-1"], T0 + W - 1) == [True]
    # the window runs from the first stored copy: the duplicates did not extend it
    assert leader.produce([b"order-1"], T0 + W) == [False]
    assert leader.index.stored_ms(b"order-1") == T0 + W
    assert leader.produce([b"order-1"], T0 + W + 5) == [True]
    assert leader.produce([None, None], T0 + W + 6) == [False, False]  # no id: never
    # a new leader whose clock is behind decides at the log's time, not earlier
    assert leader.index.check([b"order-1"], T0) == [True]
    index = DedupIndex(100)
    index.add([b"a"], 0)
    index.add([b"b"], 100)  # a expired
    assert index.check([b"a", b"b"], 50) == [False, True]


def test_duplicates_inside_one_batch() -> None:
    leader = Leader()
    assert leader.produce([b"a", b"b", b"a", None, b"a", b"b"], T0) == [
        False, False, True, False, True, True]
    assert leader.log[-1][2] == [b"a", b"b", None]
    assert leader.produce([b"c", b"a", b"c"], T0 + 1) == [False, True, True]


def test_ids_expire_by_the_append_clock_oldest_first() -> None:
    index = DedupIndex(100, 10)
    index.add([b"a"], 0)
    index.add([b"b"], 50)
    assert len(index) == 2
    index.add([b"c"], 120)  # a expired (0 + 100 <= 120), b not
    assert [i for i, _ in index.entries()] == [b"b", b"c"]
    assert index.check([b"b", b"a"], 149) == [True, False]
    assert index.check([b"b"], 150) == [False]  # read-only: b is still held
    assert len(index) == 2 and index.evictions == 0


def test_max_entries_evicts_the_oldest_and_counts_it() -> None:
    leader = Leader(max_entries=3)
    leader.produce([b"1", b"2", b"3"], T0)
    leader.produce([b"4"], T0 + 1)
    assert leader.index.evictions == 1
    assert [i for i, _ in leader.index.entries()] == [b"2", b"3", b"4"]
    # the evicted id comes through inside its window: what the counter warns about
    assert leader.produce([b"1"], T0 + 2) == [False]
    assert leader.index.evictions == 2
    # an id pushed out after it expired is not an eviction
    leader.produce([b"5", b"6", b"7"], T0 + W + 10)
    assert leader.index.evictions == 2


def test_header_ids() -> None:
    assert header_id([("trace", b"x")]) is None
    assert header_id([("trace", b"x"), (DEDUP_ID, b"order-7")]) == b"order-7"
    assert header_id([(DEDUP_ID, b"\x00\xff")]) == b"\x00\xff"  # any bytes
    cases: list[tuple[list[tuple[str, bytes | None]], str]] = [
                     ([(DEDUP_ID, b"")], "must not be empty"),
                     ([(DEDUP_ID, None)], "has no value"),
                     ([(DEDUP_ID, b"x" * (DEDUP_ID_MAX_BYTES + 1))], "longer than 256"),
                     ([(DEDUP_ID, b"a"), (DEDUP_ID, b"b")], "more than once")]
    for bad, why in cases:
        with pytest.raises(HeaderError, match=why) as err:
            header_id(bad)
        assert err.value.header == DEDUP_ID and DEDUP_ID in str(err.value)
    assert header_id([(DEDUP_ID, b"x" * DEDUP_ID_MAX_BYTES)]) is not None


def test_content_ids() -> None:
    assert len(content_id(b"k", b"v")) == 16
    assert content_id(b"k", b"v") == record_id("content", b"k", b"v", [(DEDUP_ID, b"x")])
    distinct = {content_id(k, v) for k, v in [
        (b"ab", b"c"), (b"a", b"bc"), (b"", b"abc"), (b"abc", b""), (None, b"abc"),
        (b"abc", None), (None, None), (b"", b""), (None, b""), (b"", None)]}
    assert len(distinct) == 10  # no concatenation collisions, null is not empty
    assert record_id("header", b"k", b"v", [(DEDUP_ID, b"x")]) == b"x"
    assert record_id("header", b"k", b"v", []) is None
    with pytest.raises(ValueError, match="kc.dedup.by"):
        record_id("key", b"k", b"v", [])


def _rebuild(log: list[StoredBatch], max_entries: int, window_ms: int = W) -> DedupIndex:
    """What a new leader does with its log: add every stored batch, in order."""
    index = DedupIndex(window_ms, max_entries)
    for base, at, kept in log:
        index.add(kept, at, base)
    return index


def _state(index: DedupIndex) -> tuple[object, ...]:
    return index.entries(), index.clock_ms, index.last_offset, index.evictions


batches = st.lists(st.tuples(
    st.lists(st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"])),
             min_size=1, max_size=6),
    st.integers(-50, 400)),  # time step; negative: a new leader whose clock is behind
    max_size=40)


@settings(max_examples=150, deadline=None)
@given(batches, st.integers(1, 8), st.data())
def test_a_rebuild_from_the_log_equals_the_live_index(
        steps: list[tuple[list[bytes | None], int]], max_entries: int, data: st.DataObject
) -> None:
    leader, now = Leader(window_ms=500, max_entries=max_entries), T0
    for ids, step in steps:
        now += step
        leader.produce(ids, now)
    resumed = _rebuild(leader.log, max_entries, 500)
    assert _state(resumed) == _state(leader.index)
    # a batch added again (at or below the last offset) changes nothing
    back = data.draw(st.integers(0, min(3, len(leader.log))))
    for base, at, kept in leader.log[len(leader.log) - back:]:
        assert not resumed.add(kept, at, base)
    assert _state(resumed) == _state(leader.index)
    # the rebuilt index decides as the leader would
    probe = [b"a", b"b", b"c", b"d", b"e", b"f", b"z"]
    assert resumed.check(probe, now) == leader.index.check(probe, now)
    # stored twice only after the window passed or after an eviction
    last: dict[bytes, int] = {}
    clock = T0  # the partition's time: the latest append time so far
    for _, at, kept in leader.log:
        clock = max(clock, at)
        for id_ in kept:
            if id_ is not None and id_ in last and leader.index.evictions == 0:
                assert clock - last[id_] >= 500
            if id_ is not None:
                last[id_] = max(at, last.get(id_, at))
    # never forgotten inside its window unless the counter says so
    if leader.index.evictions == 0:
        inside = [i for i, at in last.items() if max(now, clock) - at < 500]
        for id_ in inside:
            assert leader.index.check([id_], now) == resumed.check([id_], now) == [True]


def test_memory_per_id_is_bounded() -> None:
    """~140 B per 16-byte content id at 1M (see the module); measured here on 20k."""
    n = 20_000
    index = DedupIndex(W, n)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(0, n, 100):
            index.add([content_id(b"%d" % j, b"v") for j in range(i, i + 100)], T0 + i)
        per_id = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert len(index) == n and index.evictions == 0
    assert 80 < per_id < 200, per_id
