"""Index files share a bounded set of descriptors (``store.FdCache``)."""

from __future__ import annotations

import os
from pathlib import Path

from kcompat.log.store import OS_STORE, CachedFile, FdCache


def _open_fds_under(directory: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory)):
                count += 1
        except OSError:
            pass
    return count


def test_at_most_limit_descriptors_and_contents_survive_eviction(tmp_path: Path) -> None:
    cache = FdCache(limit=2)
    files = [CachedFile(tmp_path / f"{i}.index", OS_STORE, truncate=True, cache=cache)
             for i in range(5)]
    for round_ in range(3):
        for i, f in enumerate(files):
            f.append([bytes([i, round_])])
            assert _open_fds_under(tmp_path) <= 2
    for f in files:
        f.sync()  # an evicted file syncs through a new descriptor
    assert _open_fds_under(tmp_path) <= 2
    for i, f in enumerate(files):
        assert f.size() == 6
        assert f.pread(6, 0) == bytes([i, 0, i, 1, i, 2])
    files[0].truncate(2)
    assert (tmp_path / "0.index").read_bytes() == bytes([0, 0])
    for f in files:
        f.close()
    assert _open_fds_under(tmp_path) == 0
    files[1].sync()  # no-op once closed, as a plain file
    assert _open_fds_under(tmp_path) == 0
