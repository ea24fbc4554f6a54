"""OffsetIndex / TimeIndex: lookup, persistence, sanity checks."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kcompat.log.index import OffsetIndex, TimeIndex


def test_offset_index_lookup_and_persistence(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex.create(path, 100)
    assert index.lookup(150) == (100, 0)
    for offset, position in [(110, 500), (120, 1000), (135, 2000)]:
        index.append(offset, position)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 500)
    assert index.lookup(134) == (120, 1000)
    assert index.lookup(10_000) == (135, 2000)
    index.close()
    assert path.read_bytes()[:8] == (10).to_bytes(4, "big") + (500).to_bytes(4, "big")
    loaded = OffsetIndex.load(path, 100, log_size=3000, offset_limit=200)
    assert loaded is not None and loaded.lookup(125) == (120, 1000) and len(loaded) == 3
    loaded.truncate_to_position(1000)
    assert loaded.last_entry() == (110, 500)
    loaded.append(115, 900)
    loaded.close()
    assert len(path.read_bytes()) == 16


def test_offset_index_sanity_checks(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex.create(path, 0)
    index.append(5, 100)
    index.append(9, 300)
    index.close()
    assert OffsetIndex.load(path, 0, log_size=300, offset_limit=None) is None  # past the log
    assert OffsetIndex.load(path, 0, log_size=301, offset_limit=9) is None  # past next base
    assert OffsetIndex.load(tmp_path / "missing.index", 0, 10, None) is None
    path.write_bytes(path.read_bytes() + b"\x00")
    assert OffsetIndex.load(path, 0, log_size=1000, offset_limit=None) is None
    bad = (9).to_bytes(4, "big") + (100).to_bytes(4, "big") + (5).to_bytes(4, "big") * 2
    path.write_bytes(bad)
    assert OffsetIndex.load(path, 0, log_size=1000, offset_limit=None) is None


def test_time_index(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000010.timeindex"
    index = TimeIndex.create(path, 10)
    index.maybe_append(1000, 10)
    index.maybe_append(1000, 12)  # not above the last: ignored
    index.maybe_append(2000, 15)
    index.maybe_append(3000, 20)
    assert len(index) == 3
    assert index.lookup(1000) is None
    assert index.lookup(1001) == (1000, 10)
    assert index.lookup(2500) == (2000, 15)
    assert index.last_entry() == (3000, 20)
    index.close()
    loaded = TimeIndex.load(path, 10, offset_limit=21)
    assert loaded is not None and loaded.last_entry() == (3000, 20)
    loaded.truncate_to_offset(15)
    assert loaded.last_entry() == (1000, 10)
    loaded.close()
    assert len(path.read_bytes()) == 12
    assert TimeIndex.load(path, 10, offset_limit=10) is None


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 500)), max_size=60), st.data())
def test_offset_index_lookup_is_floor(steps: list[tuple[int, int]], data: st.DataObject) -> None:
    entries: list[tuple[int, int]] = []
    offset, position = 0, 0
    for d_offset, d_position in steps:
        offset += d_offset
        position += d_position
        entries.append((offset, position))
    with tempfile.TemporaryDirectory() as tmp:
        index = OffsetIndex.create(Path(tmp) / "x.index", 0)
        for o, p in entries:
            index.append(o, p)
        target = data.draw(st.integers(0, offset + 10))
        floor = max((e for e in entries if e[0] <= target), default=(0, 0))
        assert index.lookup(target) == floor
        index.close()
