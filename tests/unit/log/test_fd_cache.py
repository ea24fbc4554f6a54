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


def test_a_sync_does_not_hold_the_lock_the_loop_appends_under(tmp_path: Path,
                                                               monkeypatch) -> None:
    """A sync pass's worker thread fsyncs an index file while the event loop
    appends to another: the append must not wait for that fsync (both go
    through the cache's one lock). The fsync here waits until released; the
    append must finish meanwhile, and the sync afterwards."""
    import threading

    cache = FdCache(limit=2)
    synced, appended = (CachedFile(tmp_path / f"{n}.index", OS_STORE, truncate=True, cache=cache)
                        for n in ("synced", "appended"))
    in_fsync, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        in_fsync.set()
        assert release.wait(10), "never released"
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    synced.append([b"x"])
    syncer = threading.Thread(target=synced.sync)
    syncer.start()
    assert in_fsync.wait(10)
    writer = threading.Thread(target=appended.append, args=([b"y"],))
    writer.start()
    writer.join(2)
    held = writer.is_alive()
    release.set()
    syncer.join(10)
    writer.join(10)
    assert not held, "an append waited for another file's fsync"
    assert appended.pread(1, 0) == b"y" and not syncer.is_alive()
    for f in (synced, appended):
        f.close()
