"""PartitionLog: append/read, rolling, retention, timestamps, epochs, truncation."""

from __future__ import annotations

from pathlib import Path

import pytest
from log_helpers import all_headers, append, headers_of, make_batch, open_log

from kcompat.log import LogConfig, OffsetOutOfRange, PartitionLog
from kcompat.wire.batch import compute_crc, validate


def test_append_assigns_dense_offsets_and_reads_back(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    counts = [1, 3, 5, 2]
    headers = [append(log, n, ts=1000 + i * 10, epoch=2) for i, n in enumerate(counts)]
    assert [h.base_offset for h in headers] == [0, 1, 4, 9]
    assert log.log_end_offset == 11
    data = log.read(0, 1 << 20, log.log_end_offset)
    read = headers_of(data)
    assert len(data) == log.size_bytes
    assert [(h.base_offset, h.records_count) for h in read] == [(0, 1), (1, 3), (4, 5), (9, 2)]
    for h in read:
        assert h.partition_leader_epoch == 2
    # the stored batches are still CRC-valid batches with the assigned offsets
    pos = 0
    for h in read:
        one = data[pos : pos + h.size]
        assert compute_crc(one) == h.crc and validate(one).base_offset == h.base_offset
        pos += h.size
    log.close()


def test_read_from_middle_of_batch_starts_at_that_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, 3)
    append(log, 3)
    assert headers_of(log.read(4, 1 << 20, 100))[0].base_offset == 3
    assert log.read_batch_at(5) == log.read(3, 1, 100)
    log.close()


def test_read_min_one_batch_and_cut_tail(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = append(log, 4, value_size=100)
    append(log, 4, value_size=100)
    assert log.read(0, 1, 100) == log.read_batch_at(0)
    assert len(log.read(0, 1, 100)) == first.size
    cut = log.read(0, first.size + 20, 100)
    assert len(cut) == first.size + 20  # a trailing partial batch, as Kafka sends
    log.close()


def test_read_max_offset_bound(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a = append(log, 2)
    b = append(log, 2)
    append(log, 2)
    assert log.read(0, 1 << 20, 0) == b""
    assert log.read(0, 1 << 20, 1) == b""  # batch 0-1 is not wholly below 1
    assert len(log.read(0, 1 << 20, 2)) == a.size
    assert len(log.read(0, 1 << 20, 4)) == a.size + b.size
    assert len(log.read(0, 1 << 20, 5)) == a.size + b.size
    assert log.read(2, 1 << 20, 2) == b""
    log.close()


def test_offset_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, 3)
    assert log.read(3, 100, 3) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(4, 100, 10)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100, 10)
    with pytest.raises(OffsetOutOfRange):
        log.read_batch_at(3)
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRange):
        log.read(1, 100, 10)
    assert headers_of(log.read(2, 100, 10))[0].base_offset == 0  # batch holding 2
    log.close()


def test_roll_by_size(tmp_path: Path) -> None:
    size = make_batch(1, value_size=200)[1].size
    log = open_log(tmp_path / "t-0", segment_bytes=size * 3)
    for _ in range(7):
        append(log, 1, value_size=200)
    assert log.segment_base_offsets == [0, 3, 6]
    assert (tmp_path / "t-0" / "00000000000000000003.log").exists()
    assert (tmp_path / "t-0" / "00000000000000000003.index").exists()
    assert (tmp_path / "t-0" / "00000000000000000003.timeindex").exists()
    # a read stays within one segment
    assert [h.base_offset for h in headers_of(log.read(0, 1 << 20, 100))] == [0, 1, 2]
    assert [h.base_offset for h in all_headers(log)] == list(range(7))
    # a batch bigger than segment_bytes still goes into an (empty) segment
    big = append(log, 1, value_size=size * 5)
    assert log.segment_base_offsets[-1] == big.base_offset == 7
    log.close()


def test_roll_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_ms=1000)
    append(log, ts=5_000, now_ms=5_000)
    append(log, ts=5_500, now_ms=5_500)
    assert log.segment_base_offsets == [0]
    append(log, ts=6_001, now_ms=6_001)
    assert log.segment_base_offsets == [0, 2]
    log.close()


def test_roll_by_record_time_not_the_wall_clock(tmp_path: Path) -> None:
    """Kafka rolls by the new batch's timestamp less the segment's first batch's:
    records replayed with old timestamps (a day before the broker's clock) fill
    one segment instead of rolling one per batch."""
    log = open_log(tmp_path / "t-0", segment_ms=1000)
    day = 86_400_000
    for i in range(5):
        append(log, ts=5_000 + 100 * i, now_ms=day + 5_000)
    assert log.segment_base_offsets == [0]
    append(log, ts=6_001, now_ms=day + 5_000)
    assert log.segment_base_offsets == [0, 5]
    log.close()


def test_a_new_config_reaches_the_active_segment(tmp_path: Path) -> None:
    """A topic's AlterConfigs or a dynamic broker default replaces the log's
    config: the active segment rolls by the new segment.ms at once."""
    log = open_log(tmp_path / "t-0", segment_ms=604_800_000)
    append(log, ts=5_000, now_ms=5_000)
    append(log, ts=6_001, now_ms=6_001)
    assert log.segment_base_offsets == [0]
    log.config = LogConfig(segment_ms=100)
    append(log, ts=6_200, now_ms=6_200)
    assert log.segment_base_offsets == [0, 2]
    log.close()


def test_retention_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", retention_ms=10_000)
    for i in range(4):
        append(log, ts=1_000 * (i + 1))
        log.roll(now_ms=0)
    append(log, ts=9_000)
    assert log.segment_base_offsets == [0, 1, 2, 3, 4]
    assert log.enforce_retention(now_ms=12_500) == 2  # max ts 1000 and 2000
    assert log.segment_base_offsets == [2, 3, 4]
    assert log.log_start_offset == 2
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert log.enforce_retention(now_ms=18_500) == 2  # the active one's max ts is 9000
    assert log.segment_base_offsets == [4] and log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 100, 100)
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.log_start_offset == 4 and reopened.log_end_offset == 5
    reopened.close()


def test_retention_deletes_an_expired_active_segment(tmp_path: Path) -> None:
    """As Kafka: an active segment whose records all expired goes too (a quiet
    topic keeps nothing past retention.ms), once the high watermark is the
    log end; an empty segment is rolled at the log end and becomes the start."""
    log = open_log(tmp_path / "t-0", retention_ms=10_000)
    append(log, ts=1_000)
    log.roll(now_ms=0)
    append(log, ts=2_000)
    append(log, ts=3_000)
    assert log.segment_base_offsets == [0, 1]
    # the high watermark at 2: the first segment may go, the active one not
    assert log.enforce_retention(now_ms=50_000, high_watermark=2) == 1
    assert log.segment_base_offsets == [1] and log.log_start_offset == 1
    # a high watermark inside the only segment keeps it whole
    assert log.enforce_retention(now_ms=50_000, high_watermark=1) == 0
    assert log.enforce_retention(now_ms=12_999) == 0  # max ts 3000: not yet expired
    assert log.enforce_retention(now_ms=13_001) == 1
    assert log.segment_base_offsets == [3]
    assert log.log_start_offset == log.log_end_offset == 3 and log.size_bytes == 0
    assert log.enforce_retention(now_ms=100_000) == 0  # an empty active segment stays
    assert append(log, ts=99_000).base_offset == 3
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert (reopened.log_start_offset, reopened.log_end_offset) == (3, 4)
    reopened.close()


def test_retention_by_bytes(tmp_path: Path) -> None:
    size = make_batch(1)[1].size
    log = open_log(tmp_path / "t-0", segment_bytes=size * 2, retention_bytes=size * 3)
    for _ in range(7):
        append(log)
    assert log.segment_base_offsets == [0, 2, 4, 6]
    assert log.enforce_retention(now_ms=0) == 2  # 7 batches -> keep 3 (4,5 and 6)
    assert log.segment_base_offsets == [4, 6]
    assert log.size_bytes == 3 * size
    assert log.log_start_offset == 4
    log.close()


def test_delete_records_before(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=make_batch(1)[1].size * 2)
    for _ in range(6):
        append(log)
    assert log.segment_base_offsets == [0, 2, 4]
    log.delete_records_before(3)
    assert log.log_start_offset == 3 and log.segment_base_offsets == [2, 4]
    assert (tmp_path / "t-0" / "log-start-offset").read_text() == "3"
    log.delete_records_before(1)  # never lowers it
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(7)
    log.delete_records_before(6)  # the log end: everything can go
    assert log.segment_base_offsets == [6]
    assert log.log_start_offset == log.log_end_offset == 6 and log.size_bytes == 0
    assert append(log).base_offset == 6
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert (reopened.log_start_offset, reopened.log_end_offset) == (6, 7)
    reopened.close()


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=0)
    assert log.offset_for_timestamp(0) is None and log.max_timestamp_offset() is None
    stamps = [100, 200, 150, 400, 300, 500, 500, 450]
    for ts in stamps:
        append(log, 2, ts=ts, ts_step=5)
    assert len(log.segment_base_offsets) > 1
    assert log.offset_for_timestamp(0) == (0, 105)
    assert log.offset_for_timestamp(105) == (0, 105)
    assert log.offset_for_timestamp(106) == (2, 205)
    assert log.offset_for_timestamp(300) == (6, 405)
    assert log.offset_for_timestamp(406) == (10, 505)
    assert log.offset_for_timestamp(506) is None
    assert log.max_timestamp_offset() == (10, 505)
    log.delete_records_before(8)
    assert log.offset_for_timestamp(0) == (8, 305)
    log.close()
    # rebuilt from indexes / scans after reopen
    reopened = open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=0)
    assert reopened.offset_for_timestamp(406) == (10, 505)
    assert reopened.max_timestamp_offset() == (10, 505)
    reopened.close()


def test_leader_epoch_cache(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, 2, epoch=1)
    append(log, 2, epoch=1)
    append(log, 3, epoch=3)
    append(log, 1, epoch=5)
    assert log.leader_epochs == [(1, 0), (3, 4), (5, 7)]
    assert log.end_offset_for_epoch(5) == (5, 8)
    assert log.end_offset_for_epoch(4) == (3, 7)
    assert log.end_offset_for_epoch(3) == (3, 7)
    assert log.end_offset_for_epoch(2) == (1, 4)
    assert log.end_offset_for_epoch(1) == (1, 4)
    assert log.end_offset_for_epoch(0) == (0, 0)  # below all: Kafka answers the first start
    assert log.end_offset_for_epoch(6) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.leader_epochs == [(1, 0), (3, 4), (5, 7)]
    reopened.close()


def test_leader_epoch_cache_rebuilt_from_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, 2, epoch=1)
    append(log, 2, epoch=4)
    log.close(clean=False)
    (tmp_path / "t-0" / "leader-epoch-checkpoint").unlink(missing_ok=True)
    reopened = open_log(tmp_path / "t-0")
    assert reopened.leader_epochs == [(1, 0), (4, 2)]
    reopened.close()


def test_a_new_epoch_is_checkpointed_at_the_clean_close_not_at_the_append(
        tmp_path: Path) -> None:
    """An append that starts an epoch writes no file and syncs nothing (on the
    broker it runs on the event loop); the clean close writes the checkpoint,
    and after a crash the epochs since the last clean close are rebuilt from
    the batches."""
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    log = open_log(tmp_path / "t-0")
    append(log, 2, epoch=1)
    log.close()
    written = checkpoint.read_bytes()
    log = open_log(tmp_path / "t-0")
    append(log, 2, epoch=3)
    append(log, 1, epoch=4)
    assert checkpoint.read_bytes() == written  # nothing written on the append path
    log.close(clean=False)  # a crash: the checkpoint lacks epochs 3 and 4
    log = open_log(tmp_path / "t-0")
    assert log.leader_epochs == [(1, 0), (3, 2), (4, 4)]  # rebuilt from the batches
    append(log, 1, epoch=6)
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.leader_epochs == [(1, 0), (3, 2), (4, 4), (6, 5)]
    reopened.close()


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=make_batch(2)[1].size * 2)
    for epoch in (1, 1, 2, 2, 3):
        append(log, 2, epoch=epoch)
    assert log.segment_base_offsets == [0, 4, 8]
    log.truncate_to(5)  # inside batch 4-5: the whole batch goes
    assert log.log_end_offset == 4
    assert log.segment_base_offsets == [0, 4]
    assert log.leader_epochs == [(1, 0)]
    assert [h.base_offset for h in all_headers(log)] == [0, 2]
    assert append(log, 2, epoch=6).base_offset == 4
    assert log.end_offset_for_epoch(1) == (1, 4)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.leader_epochs == []
    assert append(log, epoch=7).base_offset == 0
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.log_end_offset == 1 and reopened.leader_epochs == [(7, 0)]
    reopened.close()


def test_truncate_rebuilds_producer_state(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, 2, producer_id=9, producer_epoch=0, base_sequence=0)
    append(log, 2, producer_id=9, producer_epoch=0, base_sequence=2)
    assert log.producers.producers[9].last_seq == 3
    log.truncate_to(2)
    assert log.producers.producers[9].last_seq == 1
    log.truncate_to(0)
    assert 9 not in log.producers.producers
    log.close()


def test_dirty_files_and_flush(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    created = log.dirty_files()  # a new log's directory entries, synced by the first pass
    assert len(created) == 1
    created[0].sync()
    assert log.dirty_files() == []
    reopened = open_log(tmp_path / "t-0")  # an existing directory: synced while opening
    assert reopened.dirty_files() == []
    reopened.close()
    append(log)
    files = log.dirty_files()
    assert len(files) == 1
    assert log.dirty_files() == []
    append(log)
    log.flush()
    assert log.dirty_files() == []
    log.close()


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log)
    log.delete()
    assert not (tmp_path / "t-0").exists()


def test_open_creates_directory_and_empty_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "a" / "t-3", LogConfig(), 0)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 100, 100) == b""
    assert (tmp_path / "a" / "t-3" / "00000000000000000000.log").exists()
    log.close()


class _CountedReads:
    """A segment's file, counting its preads (syscalls of the loop thread)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.preads = inner, 0

    def pread(self, size: int, position: int) -> bytes:
        self.preads += 1
        return self.inner.pread(size, position)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.mark.parametrize("interval", [0, 4096, 1 << 20])
def test_a_lookup_walks_the_headers_after_its_index_entry_in_one_read(
        tmp_path: Path, interval: int) -> None:
    """Finding the batch of an offset reads what follows its index entry at
    once, not one header per pread: each pread is a syscall that gives the
    GIL up, and behind a busy worker thread waits to take it back."""
    log = open_log(tmp_path / "t-0", index_interval_bytes=interval)
    for i in range(400):
        append(log, 1, ts=1000 + i)
    segment = log._segments[-1]
    counted = segment.file = _CountedReads(segment.file)  # type: ignore[assignment]
    most = 0
    for offset in range(400):
        before = counted.preads
        data = log.read(offset, 1, 400)  # the batch of ``offset``, and its bytes
        assert headers_of(data)[0].base_offset == offset
        bounded = log.read(max(offset - 7, 0), 1 << 20, offset + 1)  # walks to the bound too
        assert headers_of(bounded)[-1].base_offset == offset
        most = max(most, counted.preads - before)
    before = counted.preads
    assert log.read(200, 1 << 20, 200) == b""  # a reader at its bound (the high watermark)
    assert counted.preads == before  # reads nothing
    # two look-ups and a read of the data each: a walk of 4 KiB of 70-byte
    # batches read header by header took up to 60 (the index interval 0: an
    # entry per batch, a header read each)
    assert most <= 6, most
    log.close()
