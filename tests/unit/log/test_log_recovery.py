"""Recovery on open: torn and corrupt tails, lost indexes, producer state."""

from __future__ import annotations

import os
from pathlib import Path

from log_helpers import all_headers, append, make_batch, open_log

from kcompat.log import PartitionLog

SEG0 = "00000000000000000000"


def _fill(path: Path, batches: int = 5, **config: int) -> tuple[PartitionLog, int]:
    log = open_log(path, **config)
    for i in range(batches):
        append(log, 3, ts=1000 + i, epoch=1)
    return log, log.log_end_offset


def _assert_intact(log: PartitionLog, end: int) -> None:
    assert log.log_end_offset == end
    assert [h.base_offset for h in all_headers(log)] == list(range(0, end, 3))
    assert append(log, 2).base_offset == end
    assert log.read_batch_at(end + 1)[:8] == end.to_bytes(8, "big")


def test_torn_write_is_truncated(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, end = _fill(d)
    size = log.size_bytes
    log.close(clean=False)
    partial = bytes(make_batch(3)[0])[:40]
    with open(d / f"{SEG0}.log", "ab") as f:
        f.write(partial)
    recovered = open_log(d)
    assert recovered.recovered_truncation
    assert os.path.getsize(d / f"{SEG0}.log") == size
    _assert_intact(recovered, end)
    recovered.close()


def test_garbage_tail_is_truncated(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, end = _fill(d)
    log.close()  # even after a clean close the active segment is scanned
    with open(d / f"{SEG0}.log", "ab") as f:
        f.write(b"\x00" * 7 + b"\xff" * 100)
    recovered = open_log(d)
    _assert_intact(recovered, end)
    recovered.close()


def test_crc_flip_in_last_batch_drops_it(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, end = _fill(d)
    last = log.read_batch_at(end - 1)
    log.close(clean=False)
    path = d / f"{SEG0}.log"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # inside the records of the last batch
    path.write_bytes(bytes(data))
    recovered = open_log(d)
    assert recovered.recovered_truncation
    assert os.path.getsize(path) == len(data) - len(last)
    _assert_intact(recovered, end - 3)
    recovered.close()


def test_corrupt_offset_field_is_caught_by_contiguity(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, end = _fill(d)
    position = log.size_bytes - len(log.read_batch_at(end - 1))
    log.close(clean=False)
    path = d / f"{SEG0}.log"
    data = bytearray(path.read_bytes())
    data[position + 7] ^= 0x40  # baseOffset lies outside the CRC
    path.write_bytes(bytes(data))
    recovered = open_log(d)
    _assert_intact(recovered, end - 3)
    recovered.close()


def test_corruption_in_older_segment_drops_later_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    size = make_batch(3)[1].size
    log, end = _fill(d, batches=6, segment_bytes=size * 2)
    assert log.segment_base_offsets == [0, 6, 12]
    log.close(clean=False)  # no snapshot: every segment is scanned
    path = d / "00000000000000000006.log"
    data = bytearray(path.read_bytes())
    data[size + 30] ^= 0x10  # second batch of the middle segment
    path.write_bytes(bytes(data))
    recovered = open_log(d, segment_bytes=size * 2)
    assert recovered.segment_base_offsets == [0, 6]
    assert not (d / "00000000000000000012.log").exists()
    _assert_intact(recovered, 9)
    recovered.close()


def test_missing_indexes_are_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    size = make_batch(3)[1].size
    cfg = {"segment_bytes": size * 4, "index_interval_bytes": 1}
    log, end = _fill(d, batches=10, **cfg)
    assert log.segment_base_offsets == [0, 12, 24]
    log.close()
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}
    assert len(before) == 6
    assert len(before[f"{SEG0}.index"]) == 3 * 8  # sparse: every batch but the first
    assert len(before[f"{SEG0}.timeindex"]) == 3 * 12
    for name in before:
        (d / name).unlink()
    recovered = open_log(d, **cfg)
    recovered.flush()
    after = {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}
    assert after == before
    assert recovered.offset_for_timestamp(1005) == (9, 1005)
    _assert_intact(recovered, end)
    recovered.close()


def test_corrupt_index_is_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    size = make_batch(3)[1].size
    cfg = {"segment_bytes": size * 4, "index_interval_bytes": 1}
    log, end = _fill(d, batches=10, **cfg)
    log.close()
    with open(d / f"{SEG0}.index", "ab") as f:
        f.write(b"\x00\x00\x00")  # not a multiple of the entry size
    (d / "00000000000000000012.index").write_bytes(b"\x00\x00\x00\x03\x7f\x00\x00\x00")
    recovered = open_log(d, **cfg)
    for offset in range(end):
        assert recovered.read_batch_at(offset)[:8] == (offset // 3 * 3).to_bytes(8, "big")
    _assert_intact(recovered, end)
    recovered.close()


def test_producer_state_after_clean_close(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    append(log, 2, producer_id=5, producer_epoch=1, base_sequence=0)
    append(log, 3, producer_id=5, producer_epoch=1, base_sequence=2)
    append(log, 1, producer_id=6, producer_epoch=0, base_sequence=0)
    expected = log.producers.to_snapshot()
    log.close()
    assert (d / "clean-shutdown").exists()
    assert (d / "00000000000000000006.snapshot").exists()
    reopened = open_log(d)
    assert not (d / "clean-shutdown").exists()
    assert reopened.producers.to_snapshot() == expected
    assert reopened.producers.producers[5].last_seq == 4
    reopened.close()


def test_producer_state_after_unclean_close(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    append(log, 2, producer_id=5, producer_epoch=1, base_sequence=0)
    log.close()  # snapshot at 2
    log = open_log(d)
    append(log, 3, producer_id=5, producer_epoch=1, base_sequence=2)
    append(log, 1, producer_id=6, producer_epoch=0, base_sequence=0)
    expected = log.producers.to_snapshot()
    log.close(clean=False)
    reopened = open_log(d)
    assert reopened.producers.to_snapshot() == expected
    reopened.close()
    for snap in d.glob("*.snapshot"):
        snap.unlink()
    (d / "clean-shutdown").unlink()
    replayed = open_log(d)  # no snapshot: the whole log is replayed
    assert replayed.producers.to_snapshot() == expected
    replayed.close(clean=False)


def test_snapshots_pruned_and_stale_ones_ignored(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    for i in range(4):
        append(log, 1, producer_id=1, producer_epoch=0, base_sequence=i)
        log.close()
        log = open_log(d)
    assert sorted(p.name for p in d.glob("*.snapshot")) == [
        "00000000000000000003.snapshot",
        "00000000000000000004.snapshot",
    ]
    log.truncate_to(3)
    assert sorted(p.name for p in d.glob("*.snapshot")) == ["00000000000000000003.snapshot"]
    assert log.producers.producers[1].last_seq == 2
    log.close(clean=False)


def test_reopen_many_segments_clean(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    size = make_batch(3)[1].size
    log, end = _fill(d, batches=20, segment_bytes=size * 3, index_interval_bytes=100)
    bases = log.segment_base_offsets
    log.close()
    reopened = open_log(d, segment_bytes=size * 3, index_interval_bytes=100)
    assert reopened.segment_base_offsets == bases
    assert reopened.leader_epochs == [(1, 0)]
    _assert_intact(reopened, end)
    reopened.close()


def test_scan_policy_clean_trusts_rolled_segments(tmp_path: Path) -> None:
    """After a clean close only the active segment is re-validated; after a
    crash without snapshot every segment is."""
    d = tmp_path / "t-0"
    size = make_batch(3)[1].size
    log, end = _fill(d, batches=4, segment_bytes=size * 2)
    assert log.segment_base_offsets == [0, 6]
    log.close()
    path = d / f"{SEG0}.log"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # a record byte of the rolled segment's last batch
    path.write_bytes(bytes(data))
    trusted = open_log(d, segment_bytes=size * 2)
    assert trusted.log_end_offset == end and not trusted.recovered_truncation
    trusted.close(clean=False)
    for snap in d.glob("*.snapshot"):
        snap.unlink()
    scanned = open_log(d, segment_bytes=size * 2)
    assert scanned.recovered_truncation
    assert scanned.segment_base_offsets == [0] and scanned.log_end_offset == 3
    scanned.close()


def test_locate_gives_a_file_slice(tmp_path: Path) -> None:
    log, end = _fill(tmp_path / "t-0")
    where = log.locate(4, 1, end)
    assert where is not None
    assert where.read() == log.read_batch_at(4)
    assert log.locate(end, 100, end) is None
    log.close()
