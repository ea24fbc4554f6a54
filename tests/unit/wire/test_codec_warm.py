"""``codec.warm`` makes every class, reader and writer a request of the warmed
versions needs, so the first request of each after a broker starts imports
nothing on the event loop."""

from __future__ import annotations

import sys

from kcompat.wire import codec
from kcompat.wire.versions import API_RANGES, FETCH, PRODUCE


def test_warmed_versions_need_no_import_nor_new_reader() -> None:
    ranges = {key: (API_RANGES[key].parse_min, API_RANGES[key].max_version)
              for key in (PRODUCE, FETCH)}
    for cached in (codec.request_module, codec.response_module, codec.request_class,
                   codec.response_class):
        cached.cache_clear()
    codec._READERS.clear()
    codec._WRITERS.clear()
    warmed = codec.warm(ranges)
    assert warmed == sum(high - low + 1 for low, high in ranges.values())
    modules, misses = len(sys.modules), codec.request_class.cache_info().misses
    readers, writers = len(codec._READERS), len(codec._WRITERS)
    for key, (low, high) in ranges.items():
        for version in range(low, high + 1):
            codec._reader(codec.request_class(key, version))
            codec._writer(codec.response_class(key, version))
    assert codec.request_class.cache_info().misses == misses
    assert (len(sys.modules), len(codec._READERS), len(codec._WRITERS)) == (
        modules, readers, writers)


def test_warming_stops_when_told_to() -> None:
    asked: list[int] = []

    def go_on() -> bool:
        asked.append(1)
        return len(asked) < 3

    assert codec.warm({3: (0, 12)}, go_on) == 3  # three versions loaded, then it stopped
    assert len(asked) == 3
