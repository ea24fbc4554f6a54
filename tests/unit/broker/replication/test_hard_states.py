"""The broker's journal of partition groups' Raft hard states (``hard_states``)."""

from __future__ import annotations

import errno
from pathlib import Path
from random import Random

from kcompat.broker.replication import hard_states
from kcompat.broker.replication.hard_states import FILE_NAME, HardStateJournal
from kcompat.log.store import OS_STORE
from kcompat.raft import HardState
from kcompat.testing.memory_store import DiskFaults, MemoryFileStore


def _sync(journal: HardStateJournal) -> int:
    files = journal.dirty_files()
    for f in files:
        f.sync()
    return len(files)


def test_last_record_of_each_group_survives_reopen(tmp_path: Path) -> None:
    j = HardStateJournal(tmp_path, OS_STORE)
    j.put(7, HardState(1, 2), durable=True)
    j.put(9, HardState(3, -1), durable=True)
    assert j.get(7) == HardState(1, 2)  # taken before written
    assert _sync(j) == 1  # one file, one fsync, for every group of the round
    j.put(7, HardState(2, 3), durable=True)
    _sync(j)
    j.close()
    again = HardStateJournal(tmp_path, OS_STORE)
    assert again.get(7) == HardState(2, 3) and again.get(9) == HardState(3, -1)
    assert again.get(8) is None


def test_not_durable_writes_ask_no_sync(tmp_path: Path) -> None:
    j = HardStateJournal(tmp_path, OS_STORE)
    j.put(1, HardState(4, 1), durable=False)  # a lone replica's
    assert j.dirty_files() == [] and not j.pending
    j.close()
    assert HardStateJournal(tmp_path, OS_STORE).get(1) == HardState(4, 1)


def test_torn_or_corrupt_tail_is_cut(tmp_path: Path) -> None:
    j = HardStateJournal(tmp_path, OS_STORE)
    j.put(1, HardState(1, 1), durable=True)
    j.put(2, HardState(1, 2), durable=True)
    _sync(j)
    j.close()
    path = tmp_path / FILE_NAME
    data = path.read_bytes()
    path.write_bytes(data + data[:7])  # a torn record
    assert HardStateJournal(tmp_path, OS_STORE).get(2) == HardState(1, 2)
    assert path.stat().st_size == len(data)
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF  # the second record's CRC
    path.write_bytes(bytes(corrupt))
    j = HardStateJournal(tmp_path, OS_STORE)
    assert j.get(1) == HardState(1, 1) and j.get(2) is None
    j.put(2, HardState(5, 2), durable=True)  # appends after the cut
    _sync(j)
    j.close()
    assert HardStateJournal(tmp_path, OS_STORE).get(2) == HardState(5, 2)


def test_compaction_keeps_live_groups_only(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(hard_states, "COMPACT_MIN_RECORDS", 8)
    live = {1, 2}
    j = HardStateJournal(tmp_path, OS_STORE, live=lambda: live)
    j.put(3, HardState(1, 1), durable=True)  # a group since deleted
    _sync(j)
    for term in range(1, 20):
        j.put(1, HardState(term, 1), durable=True)
        j.put(2, HardState(term, 2), durable=True)
        _sync(j)
    assert (tmp_path / FILE_NAME).stat().st_size <= 8 * 20 + 2 * 20
    j.close()
    again = HardStateJournal(tmp_path, OS_STORE)
    assert again.get(1) == HardState(19, 1) and again.get(2) == HardState(19, 2)
    assert again.get(3) is None


def test_a_failed_write_or_sync_leaves_no_torn_record_and_is_written_again() -> None:
    """A full disk: the append that did not fit is cut off and its records
    wait for the next round. A failed sync: ``rewind`` cuts the file back to
    the last good sync (its pages may be gone), and the records put again are
    what a restart reads — after a power cut too."""
    store = MemoryFileStore("/data")
    j = HardStateJournal(Path("/data"), store)
    j.put(1, HardState(1, 1), durable=True)
    _sync(j)
    size = len(store.read(Path("/data") / FILE_NAME))
    store.faults = DiskFaults(capacity=store.used_bytes() + 7)  # 7 of 20 bytes fit
    j.put(2, HardState(2, 2), durable=True)
    try:
        j.dirty_files()
        raise AssertionError("the append should have failed")
    except OSError as e:
        assert e.errno == errno.ENOSPC
    assert len(store.read(Path("/data") / FILE_NAME)) == size  # no torn record
    assert j.pending
    store.faults = DiskFaults(sync_errno=errno.EIO)
    files = j.dirty_files()
    try:
        for f in files:
            f.sync()
        raise AssertionError("the sync should have failed")
    except OSError:
        j.rewind()
    assert len(store.read(Path("/data") / FILE_NAME)) == size
    store.faults = DiskFaults()
    j.put(2, HardState(2, 2), durable=True)  # the held-back group's vote, again
    _sync(j)
    store.crash(Random(1))
    again = HardStateJournal(Path("/data"), store)
    assert again.get(1) == HardState(1, 1) and again.get(2) == HardState(2, 2)
