"""The log cleaner (``kcompat.log.cleaner``) over real partition logs on disk:
batches built and read back with kafka-python's RecordBatch v2 code."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kcompat.log import LogConfig, PartitionLog, cleaner
from kcompat.log.files import INDEX_SUFFIX, LOG_SUFFIX, offset_path
from kcompat.wire.batch import validate
from kcompat.wire.records import encode_batch

DAY = 86_400_000


def _batch(records: list[tuple[bytes | None, bytes | None]], ts: int = 1_000, pid: int = -1,
           seq: int = -1, transactional: bool = False, codec: int = 0) -> memoryview:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=int(transactional), producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, batch_size=1 << 24)
    for i, (key, value) in enumerate(records):
        builder.append(i, ts + i, key, value, [])
    return memoryview(bytes(builder.build()))


def _open(path: Path, **config: object) -> PartitionLog:
    cfg = {"segment_bytes": 300, "compact": True, "delete": False,
           "min_cleanable_dirty_ratio": 0.01, **config}
    return PartitionLog.open(path, LogConfig(**cfg), 0)  # type: ignore[arg-type]


def _append(log: PartitionLog, batch: memoryview, epoch: int = 0) -> int:
    return log.append(batch, validate(bytes(batch)), epoch, 0).base_offset


def _records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, decoded by kafka-python."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, log.log_end_offset)
        records = MemoryRecords(data)
        last = offset
        while records.has_next():
            batch = records.next_batch()
            for r in batch:
                out.append((r.offset, r.key, r.value))
            last = batch.base_offset + batch.last_offset_delta + 1  # type: ignore[attr-defined]
        offset = last
    return out


def _clean(log: PartitionLog, hw: int | None = None, now_ms: int = 10_000) -> cleaner.Result | None:
    plan = log.cleaner_plan(log.log_end_offset if hw is None else hw, now_ms)
    if plan is None:
        return None
    result = cleaner.clean(plan)
    log.cleaner_done(result, plan)
    return result


def _fill(log: PartitionLog, versions: int = 6, keys: int = 4) -> dict[bytes, bytes]:
    latest = {}
    for v in range(versions):
        for k in range(keys):
            key, value = b"k%d" % k, b"v%d-%d" % (k, v)
            _append(log, _batch([(key, value)]))
            latest[key] = value
    log.roll(0)
    return latest


def test_keeps_the_latest_record_per_key_at_its_offset(tmp_path: Path) -> None:
    log = _open(tmp_path / "p")
    latest = _fill(log)
    before = {(o, k, v) for o, k, v in _records(log)}
    end = log.log_end_offset
    result = _clean(log)
    assert result is not None and result.records_removed == 20
    after = _records(log)
    assert {k: v for _, k, v in after} == latest
    assert len(after) == 4 and set(after) <= before  # the same offsets, no new record
    assert log.log_end_offset == end
    reopened = _open(tmp_path / "p")  # recovery accepts the gaps
    assert _records(reopened) == after
    assert _clean(reopened) is None  # nothing dirty is left


def test_first_batch_of_each_leader_epoch_stays_empty(tmp_path: Path) -> None:
    log = _open(tmp_path / "p")
    for epoch in (0, 1, 2):
        for v in range(3):
            _append(log, _batch([(b"k", b"e%d-%d" % (epoch, v))]), epoch)
    log.roll(0)
    epochs = log.leader_epochs
    _clean(log)
    assert log.leader_epochs == epochs
    assert [v for _, _, v in _records(log)] == [b"e2-2"]
    reopened = _open(tmp_path / "p")
    assert reopened.leader_epochs == epochs
    starts = {start for _, start in epochs}
    bases = set()
    offset = 0
    while offset < reopened.log_end_offset:
        data = reopened.read(offset, 1 << 20, reopened.log_end_offset)
        r = MemoryRecords(data)
        while r.has_next():
            b = r.next_batch()
            bases.add(b.base_offset)
            offset = b.base_offset + b.last_offset_delta + 1  # type: ignore[attr-defined]
    assert starts <= bases


def test_tombstones_go_after_delete_retention_of_their_first_clean(tmp_path: Path) -> None:
    log = _open(tmp_path / "p", delete_retention_ms=DAY)
    _append(log, _batch([(b"a", b"1"), (b"b", b"1")]))
    _append(log, _batch([(b"a", None)]))
    _append(log, _batch([(b"c", b"1")]))
    log.roll(0)
    _clean(log, now_ms=1_000)
    assert [(k, v) for _, k, v in _records(log)] == [(b"b", b"1"), (b"a", None), (b"c", b"1")]
    assert _clean(log, now_ms=1_000 + DAY - 1) is None  # not yet due
    assert _clean(log, now_ms=1_000 + DAY) is not None
    assert [(k, v) for _, k, v in _records(log)] == [(b"b", b"1"), (b"c", b"1")]


def test_aborted_transactions_and_their_markers_go(tmp_path: Path) -> None:
    log = _open(tmp_path / "p", delete_retention_ms=1000)
    pid = 7
    _append(log, _batch([(b"first", b"of the epoch")]))  # stays: the epoch's first batch
    _append(log, _batch([(b"x", b"aborted")], pid=pid, seq=0, transactional=True))
    abort = encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", (), 5)],
                         producer_id=pid, producer_epoch=0, transactional=True, control=True)
    _append(log, memoryview(abort))
    _append(log, _batch([(b"y", b"plain")]))
    _append(log, _batch([(b"x", b"committed")], pid=pid, seq=1, transactional=True))
    commit = encode_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", (), 6)],
                          producer_id=pid, producer_epoch=0, transactional=True, control=True)
    _append(log, memoryview(commit))
    log.roll(0)
    _clean(log, now_ms=10)
    values = [v for _, _, v in _records(log)]
    assert b"aborted" not in values and b"committed" in values and b"plain" in values
    _clean(log, now_ms=2_000)  # the abort marker outlived its horizon with no record left
    headers = [h for _, h in log.batches(0, log.log_end_offset)]
    markers = [h for h in headers if h.is_control and h.records_count]
    # the commit marker's transaction still has a record; the abort marker went,
    # its producer's last batch (the commit marker) stays
    assert len(markers) == 1 and markers[0].base_offset == 5


def test_compressed_batches_lose_records_and_stay_compressed(tmp_path: Path) -> None:
    log = _open(tmp_path / "p", segment_bytes=10_000)
    _append(log, _batch([(b"k%d" % i, b"old" * 20) for i in range(10)], codec=2))
    _append(log, _batch([(b"k%d" % i, b"new") for i in range(0, 10, 2)]))
    log.roll(0)
    _clean(log)
    got = {k: v for _, k, v in _records(log)}
    assert got == {b"k%d" % i: (b"new" if i % 2 == 0 else b"old" * 20) for i in range(10)}
    first = next(iter(log.batches(0, log.log_end_offset)))[1]
    assert first.compression == 2 and first.records_count == 5 and first.last_offset_delta == 9


def test_nothing_above_the_high_watermark_or_in_the_active_segment(tmp_path: Path) -> None:
    log = _open(tmp_path / "p")
    _fill(log, versions=3, keys=2)
    for v in range(3):
        _append(log, _batch([(b"k0", b"active%d" % v)]))  # active segment: never cleaned
    assert _clean(log, hw=0) is None
    _clean(log)
    values = [v for _, k, v in _records(log) if k == b"k0"]
    assert values[-3:] == [b"active0", b"active1", b"active2"] and len(values) == 4


def test_cleaned_segments_merge_into_one(tmp_path: Path) -> None:
    log = _open(tmp_path / "p")
    _fill(log, versions=6, keys=4)
    _clean(log)
    latest = _fill(log, versions=2, keys=4)
    before = len(log.segment_base_offsets)
    log.config = replace(log.config, segment_bytes=2000)  # segment.bytes raised: groups fit
    result = _clean(log)
    assert result is not None and any(len(r.olds) > 1 for r in result.rewrites)
    assert len(log.segment_base_offsets) < before
    assert {k: v for _, k, v in _records(log)} == latest and len(_records(log)) == 4
    reopened = _open(tmp_path / "p")
    assert reopened.segment_base_offsets == log.segment_base_offsets
    assert _records(reopened) == _records(log)


@pytest.mark.parametrize("crash_after", ["written", "log_renamed", "rest_removed"])
def test_a_crash_mid_swap_loses_nothing(tmp_path: Path, crash_after: str) -> None:
    """The swap's steps (``cleaner.install``) cut short at each point: recovery
    finishes or forgets it, and the log reads the same."""
    d = tmp_path / "p"
    log = _open(d)
    _fill(log, versions=6, keys=4)
    _clean(log)
    latest = _fill(log, versions=2, keys=4)
    log.config = replace(log.config, segment_bytes=2000)
    expected = {k: v for _, k, v in _records(log)}
    assert expected == latest
    plan = log.cleaner_plan(log.log_end_offset, 10_000)
    assert plan is not None
    result = cleaner.clean(plan)
    scratch = d / cleaner.SCRATCH_DIR
    group = next(r for r in result.rewrites if r.new is not None and len(r.olds) > 1)
    base = group.olds[0].base_offset
    if crash_after != "written":  # as install does it, up to the crash
        (d / cleaner.SWAP_FILE).write_text(
            f"[[{base}, {[s.base_offset for s in group.olds[1:]]}]]")
        offset_path(d, base, INDEX_SUFFIX).unlink()
        offset_path(scratch, base, LOG_SUFFIX).rename(offset_path(d, base, LOG_SUFFIX))
    if crash_after == "rest_removed":
        for s in group.olds[1:]:
            offset_path(d, s.base_offset, LOG_SUFFIX).unlink()
    for reader in plan.readers:
        reader.close()
    log.close(clean=False)
    reopened = _open(d)
    assert not scratch.exists() and not (d / cleaner.SWAP_FILE).exists()
    assert {k: v for _, k, v in _records(reopened)} == latest
    if crash_after != "written":
        assert not set(s.base_offset for s in group.olds[1:]) & set(reopened.segment_base_offsets)
    _clean(reopened)
    assert {k: v for _, k, v in _records(reopened)} == latest
    assert len(_records(reopened)) == 4


def test_delete_policy_alone_is_not_cleaned_and_compact_alone_keeps_old_segments(
        tmp_path: Path) -> None:
    plain = _open(tmp_path / "d", compact=False, delete=True)
    _fill(plain)
    assert plain.cleaner_plan(plain.log_end_offset, 10_000) is None
    compacted = _open(tmp_path / "c", retention_ms=1)
    _fill(compacted)
    assert compacted.enforce_retention(10 * DAY) == 0  # retention.ms does not apply to compact


def test_a_small_key_map_cleans_in_several_passes(tmp_path: Path) -> None:
    log = _open(tmp_path / "p")
    latest = _fill(log, versions=6, keys=6)
    ends = []
    for _ in range(20):
        plan = log.cleaner_plan(log.log_end_offset, 10_000, max_keys=2)
        if plan is None:
            break
        result = cleaner.clean(plan)
        log.cleaner_done(result, plan)
        ends.append(result.end)
    assert len(ends) > 1 and ends == sorted(ends)  # each pass stopped at a segment boundary
    assert {k: v for _, k, v in _records(log)} == latest and len(_records(log)) == 6


def test_a_later_pass_maps_only_the_dirty_part_and_cleans_the_clean_part_too(
        tmp_path: Path) -> None:
    log = _open(tmp_path / "p")
    _fill(log, versions=3, keys=4)
    _clean(log)
    assert len(_records(log)) == 4
    latest = {}
    for k in range(2):  # newer versions of two keys: their old records in the clean part go
        _append(log, _batch([(b"k%d" % k, b"newer")]))
        latest[b"k%d" % k] = b"newer"
    log.roll(0)
    result = _clean(log)
    assert result is not None and result.records_removed == 2
    got = {k: v for _, k, v in _records(log)}
    assert got == {**{b"k%d" % k: b"v%d-2" % k for k in range(4)}, **latest}


def test_a_kept_empty_transactional_batch_keeps_its_marker(tmp_path: Path) -> None:
    """A producer's last batch stays (empty) for its idempotence state; were its
    commit marker removed, a producer-state replay would see its transaction
    open forever and hold the last stable offset back."""
    d = tmp_path / "p"
    log = _open(d, delete_retention_ms=1000)
    _append(log, _batch([(b"k", b"in-txn")], pid=9, seq=0, transactional=True))
    commit = encode_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", (), 6)],
                          producer_id=9, producer_epoch=0, transactional=True, control=True)
    _append(log, memoryview(commit))
    _append(log, _batch([(b"k", b"later")]))
    log.roll(0)
    _clean(log, now_ms=10)
    _clean(log, now_ms=5_000)  # the marker is past its horizon, its transaction's batch stays
    values = [v for _, _, v in _records(log)]
    assert b"later" in values and b"in-txn" not in values
    assert any(h.is_control for _, h in log.batches(0, log.log_end_offset))
    log.close(clean=False)
    for snapshot in d.glob("*.snapshot"):
        snapshot.unlink()  # producer state rebuilt from the log alone
    reopened = _open(d)
    assert reopened.first_unstable_offset() is None
