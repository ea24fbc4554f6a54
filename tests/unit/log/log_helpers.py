"""Test batches built with kafka-python's real RecordBatch v2 encoder."""

from __future__ import annotations

from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from kcompat.log import LogConfig, PartitionLog
from kcompat.wire.batch import BatchHeader, iter_headers, validate


def make_batch(
    count: int = 1,
    ts: int = 1_000,
    *,
    ts_step: int = 1,
    value_size: int = 10,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> tuple[memoryview, BatchHeader]:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 24,
    )
    for i in range(count):
        builder.append(i, ts + i * ts_step, None, bytes([i % 256]) * value_size, [])
    data = bytes(builder.build())
    return memoryview(data), validate(data)


def append(
    log: PartitionLog, count: int = 1, ts: int = 1_000, epoch: int = 0, now_ms: int = 0, **kw: int
) -> BatchHeader:
    batch, header = make_batch(count, ts, **kw)
    return log.append(batch, header, epoch, now_ms)


def open_log(path: Path, now_ms: int = 0, **config: int) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**config), now_ms)


def headers_of(data: bytes) -> list[BatchHeader]:
    return [h for _, h in iter_headers(data)]


def all_headers(log: PartitionLog) -> list[BatchHeader]:
    """Every batch header of the log, read back through the public read API."""
    out: list[BatchHeader] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 30, log.log_end_offset)
        hs = headers_of(chunk)
        assert hs, f"no whole batch at {offset}"
        out.extend(hs)
        offset = hs[-1].next_offset
    return out
