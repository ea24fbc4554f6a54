"""LeaderEpochCache: assignment, truncation, OffsetForLeaderEpoch answers."""

from __future__ import annotations

import pytest

from kcompat.log.epoch_cache import LeaderEpochCache


def test_assign_only_grows() -> None:
    cache = LeaderEpochCache()
    assert cache.assign(2, 0)
    assert not cache.assign(2, 5)
    assert not cache.assign(1, 6)
    assert cache.assign(4, 10)
    assert cache.entries == [(2, 0), (4, 10)]


def test_end_offset_for() -> None:
    cache = LeaderEpochCache([(2, 5), (4, 10), (7, 20)])
    assert cache.end_offset_for(7, 33) == (7, 33)
    assert cache.end_offset_for(6, 33) == (4, 20)
    assert cache.end_offset_for(4, 33) == (4, 20)
    assert cache.end_offset_for(3, 33) == (2, 10)
    assert cache.end_offset_for(1, 33) == (1, 5)
    assert cache.end_offset_for(8, 33) == (-1, -1)
    assert cache.end_offset_for(-1, 33) == (-1, -1)
    assert LeaderEpochCache().end_offset_for(0, 0) == (-1, -1)


def test_truncation() -> None:
    cache = LeaderEpochCache([(2, 5), (4, 10), (7, 20)])
    assert cache.truncate_from_end(20)
    assert cache.entries == [(2, 5), (4, 10)]
    assert not cache.truncate_from_end(11)
    assert cache.truncate_from_start(12)
    assert cache.entries == [(4, 12)]
    cache = LeaderEpochCache([(2, 5), (4, 10)])
    assert cache.truncate_from_start(10)
    assert cache.entries == [(4, 10)]


def test_text_round_trip_and_errors() -> None:
    cache = LeaderEpochCache([(2, 5), (4, 10)])
    assert cache.to_text() == "0\n2\n2 5\n4 10\n"
    assert LeaderEpochCache.from_text(cache.to_text()).entries == cache.entries
    for bad in ["", "1\n0\n", "0\n2\n1 0\n", "0\n2\n3 0\n2 5\n", "0\n1\nx y\n"]:
        with pytest.raises(ValueError):
            LeaderEpochCache.from_text(bad)
