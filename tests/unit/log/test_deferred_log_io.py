"""Rolls and deletions leave their syncs and unlinks to a later pass (issue 31):
the log's thread (the broker's event loop) never waits for an fsync there,
and a crash at any point still recovers every acknowledged batch."""

from __future__ import annotations

import threading
from pathlib import Path
from random import Random

import pytest

from kcompat.log import LogConfig, PartitionLog
from kcompat.log.deferred_io import RolledSegment
from kcompat.log.files import DELETED_SUFFIX, LOG_START_OFFSET_FILE, LOG_SUFFIX, read_int_file
from kcompat.log.partition_log import OffsetOutOfRange
from kcompat.testing.memory_store import MemoryFile, MemoryFileStore
from kcompat.wire.batch import parse_header
from kcompat.wire.records import encode_batch

DIR = Path("/data/t-0")


class RecordingFile(MemoryFile):
    def sync(self) -> None:
        store = self._store
        assert isinstance(store, RecordingStore)
        store.calls.append(("sync", self._key, threading.get_ident()))
        super().sync()


class RecordingStore(MemoryFileStore):
    """The simulator's disk, noting every file sync and directory sync."""

    def __init__(self) -> None:
        super().__init__("/data")
        self.calls: list[tuple[str, str, int]] = []

    def open(self, path: Path, truncate: bool = False) -> MemoryFile:
        f = super().open(path, truncate)
        f.__class__ = RecordingFile
        return f

    def sync_dir(self, directory: Path) -> None:
        self.calls.append(("sync_dir", str(directory), threading.get_ident()))
        super().sync_dir(directory)


class KeepNothing(Random):
    """A power cut that keeps none of the unsynced writes."""

    def randint(self, a: int, b: int) -> int:
        return a


def batch(value: bytes = b"v" * 40) -> memoryview:
    return memoryview(encode_batch([(None, value, (), 1_000)])).toreadonly()


def append(log: PartitionLog) -> int:
    view = batch()
    return log.append(view, parse_header(view), 0, 0).base_offset


def open_log(store: MemoryFileStore) -> PartitionLog:
    # about two batches a segment
    return PartitionLog.open(DIR, LogConfig(segment_bytes=250), 0, store)


def names(store: MemoryFileStore) -> list[str]:
    return store.names(DIR)


def test_an_append_that_rolls_syncs_nothing() -> None:
    store = RecordingStore()
    log = open_log(store)
    log.flush()
    store.calls.clear()
    for _ in range(7):
        append(log)
    assert len(log.segment_base_offsets) > 2, "the appends rolled segments"
    assert store.calls == [], "a roll synced on the appending thread"
    for durable in log.dirty_files():  # what the broker's flusher does off the loop
        durable.sync()
    synced = {key for kind, key, _ in store.calls if kind == "sync"}
    for base in log.segment_base_offsets:
        assert str(DIR / f"{base:020d}{LOG_SUFFIX}") in synced
    assert ("sync_dir", str(DIR)) in {(kind, key) for kind, key, _ in store.calls}


def test_a_pass_after_rolls_covers_the_batches_of_the_rolled_segments() -> None:
    store = MemoryFileStore("/data")
    log = open_log(store)
    offsets = [append(log) for _ in range(7)]
    expected = [log.read_batch_at(o) for o in offsets]
    for durable in log.dirty_files():
        durable.sync()
    store.crash(KeepNothing())
    log = open_log(store)
    assert [log.read_batch_at(o) for o in offsets] == expected


def test_a_crash_before_the_rolled_segment_is_synced_cuts_the_log_there() -> None:
    """The new segment's name and data may be on disk while the rolled one
    lost its tail (another pass synced the directory): recovery finds the
    rolled segment ending short of the next one's base and cuts there."""
    store = MemoryFileStore("/data")
    log = open_log(store)
    first = append(log)
    log.flush()
    append(log)  # lost: its segment is never synced
    later = [append(log) for _ in range(2)]  # roll; the new segment is synced
    assert len(log.segment_base_offsets) == 2
    for durable in log.dirty_files():
        if not isinstance(durable, RolledSegment):
            durable.sync()
    store.crash(KeepNothing())
    log = open_log(store)
    assert log.recovered_truncation
    assert log.log_end_offset == first + 1, f"kept batches past a hole: {later}"
    assert log.segment_base_offsets == [0]


def test_segments_rolled_since_the_last_clean_close_are_scanned() -> None:
    """Recovery trusts the segments below the last clean close's snapshot:
    every one rolled later, unsynced, is scanned and cut at its lost tail."""
    store = MemoryFileStore("/data")
    log = open_log(store)
    append(log)
    log.close()  # the snapshot at offset 1, in segment 0
    log = open_log(store)
    for _ in range(6):  # segments 0 (now full), 2 and 4, none synced
        append(log)
    store.sync_dir(DIR)  # their names made durable by some other pass
    store.crash(KeepNothing())
    log = open_log(store)
    assert log.recovered_truncation
    assert log.log_end_offset == 1
    assert log.segment_base_offsets == [0]


def test_a_clean_close_syncs_the_rolled_segments() -> None:
    store = MemoryFileStore("/data")
    log = open_log(store)
    offsets = [append(log) for _ in range(9)]
    expected = [log.read_batch_at(o) for o in offsets]
    log.close()  # no sync pass ran since the rolls
    store.crash(KeepNothing())
    log = open_log(store)  # clean: the segments below the active one are trusted
    assert not log.recovered_truncation
    assert [log.read_batch_at(o) for o in offsets] == expected


def test_delete_records_leaves_its_file_work_to_defer_io() -> None:
    store = RecordingStore()
    log = open_log(store)
    deferred: list[PartitionLog] = []
    log.defer_io = deferred.append
    for _ in range(7):
        append(log)
    log.flush()
    bases = log.segment_base_offsets
    store.calls.clear()
    cut = bases[2]
    log.delete_records_before(cut + 1)
    assert store.calls == [], "DeleteRecords synced on the log's thread"
    assert deferred == [log]
    assert log.log_start_offset == cut + 1
    assert log.segment_base_offsets == bases[2:]
    with pytest.raises(OffsetOutOfRange):
        log.read(bases[1], 1 << 20, log.log_end_offset)
    assert f"{bases[0]:020d}{LOG_SUFFIX}" not in names(store)
    assert f"{bases[0]:020d}{LOG_SUFFIX}{DELETED_SUFFIX}" in names(store)
    assert read_int_file(DIR / LOG_START_OFFSET_FILE, store) in (None, 0)

    work = log.take_deferred_io()
    assert work is not None
    work.sync()  # the flusher's worker thread
    assert read_int_file(DIR / LOG_START_OFFSET_FILE, store) == cut + 1
    assert not [n for n in names(store) if n.endswith(DELETED_SUFFIX)]
    assert ("sync_dir", str(DIR)) in {(kind, key) for kind, key, _ in store.calls}
    store.crash(KeepNothing())
    log = open_log(store)
    assert log.log_start_offset == cut + 1
    assert log.segment_base_offsets == bases[2:]


def test_a_crash_before_the_deletion_work_keeps_a_whole_log() -> None:
    store = MemoryFileStore("/data")
    log = open_log(store)
    log.defer_io = lambda _log: None  # the work never runs
    offsets = [append(log) for _ in range(7)]
    expected = {o: log.read_batch_at(o) for o in offsets}
    log.flush()
    bases = log.segment_base_offsets
    log.delete_records_before(bases[2] + 1)
    store.sync_dir(DIR)  # the renames made durable by some other pass
    store.crash(KeepNothing())
    log = open_log(store)
    assert not [n for n in names(store) if n.endswith(DELETED_SUFFIX)]
    assert log.segment_base_offsets == bases[2:]
    assert bases[2] <= log.log_start_offset <= bases[2] + 1
    assert log.log_end_offset == offsets[-1] + 1
    for offset in range(log.log_start_offset, log.log_end_offset):
        assert log.read_batch_at(offset) == expected[offset]


def test_a_segment_made_again_at_a_deleted_base_is_not_unlinked() -> None:
    store = MemoryFileStore("/data")
    log = open_log(store)
    log.defer_io = lambda _log: None
    for _ in range(5):
        append(log)
    bases = log.segment_base_offsets
    log.delete_records_before(bases[1])  # segment 0 goes, its unlink left for later
    log.reset_to(0)  # a new segment at base 0
    view = batch(b"again")
    log.append(view, parse_header(view), 1, 0)
    work = log.take_deferred_io()
    assert work is not None
    work.sync()
    log.close()
    log = open_log(store)
    assert log.log_end_offset == 1
    assert log.read_batch_at(0) == bytes(view[:8]) + bytes(view[8:12]) + \
        (1).to_bytes(4, "big") + bytes(view[16:])


def test_retention_deletes_the_same_way() -> None:
    store = RecordingStore()
    config = LogConfig(segment_bytes=250, retention_bytes=300)
    log = PartitionLog.open(DIR, config, 0, store)
    deferred: list[PartitionLog] = []
    log.defer_io = deferred.append
    for _ in range(7):
        append(log)
    log.flush()
    store.calls.clear()
    assert log.enforce_retention(now_ms=0) > 0
    assert store.calls == [] and deferred == [log]
    work = log.take_deferred_io()
    assert work is not None
    work.sync()
    assert read_int_file(DIR / LOG_START_OFFSET_FILE, store) == log.log_start_offset > 0
