"""Transactional data in the log: open transactions bound the LSO, abort
markers feed the aborted-transaction index, and both survive a crash."""

from __future__ import annotations

from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from kcompat.log import PartitionLog
from kcompat.log.files import CLEAN_SHUTDOWN_FILE
from kcompat.wire.batch import validate
from kcompat.wire.records import encode_marker_batch
from tests.unit.log.log_helpers import append, open_log


def txn_append(log: PartitionLog, pid: int, seq: int, count: int = 2, epoch: int = 0) -> int:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=1,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)
    for i in range(count):
        b.append(i, 1000, None, b"v", [])
    data = bytes(b.build())
    return log.append(memoryview(data), validate(data), 0, 0).base_offset


def marker(log: PartitionLog, pid: int, commit: bool, epoch: int = 0) -> int:
    data = encode_marker_batch(commit, producer_id=pid, producer_epoch=epoch,
                               coordinator_epoch=0, timestamp=1000)
    return log.append(memoryview(data), validate(data), 0, 0).base_offset


def test_lso_and_aborted_index(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, 3)                             # 0..2 plain
    first_a = txn_append(log, pid=10, seq=0)   # 3..4 txn A
    first_b = txn_append(log, pid=11, seq=0)   # 5..6 txn B
    assert log.first_unstable_offset() == first_a == 3
    abort_at = marker(log, 10, commit=False)   # 7: A aborted
    assert log.first_unstable_offset() == first_b
    marker(log, 11, commit=True)               # 8: B committed
    assert log.first_unstable_offset() is None
    aborted = log.aborted_transactions(0, log.log_end_offset)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [
        (10, first_a, abort_at)]
    assert log.aborted_transactions(abort_at + 1, 100) == []
    log.close()


def test_transaction_state_survives_crash(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    txn_append(log, pid=20, seq=0)             # 0..1
    marker(log, 20, commit=False)              # 2
    open_first = txn_append(log, pid=21, seq=0)  # 3..4 still open
    log.flush()
    log.close(clean=False)                     # a crash: no snapshot, no marker file
    assert not (tmp_path / "p" / CLEAN_SHUTDOWN_FILE).exists()
    again = open_log(tmp_path / "p")
    assert again.first_unstable_offset() == open_first
    assert [(a.producer_id, a.first_offset) for a in again.aborted_transactions(0, 10)] == [
        (20, 0)]
    marker(again, 21, commit=False)
    again.close()
    third = open_log(tmp_path / "p")           # after a clean close: snapshot + files
    assert third.first_unstable_offset() is None
    assert [a.producer_id for a in third.aborted_transactions(0, 10)] == [20, 21]
    third.truncate_to(5)                       # drops the second abort marker
    assert third.first_unstable_offset() == open_first
    assert [a.producer_id for a in third.aborted_transactions(0, 10)] == [20]
    third.close()


def test_marker_with_bumped_epoch_closes_and_fences(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    txn_append(log, pid=30, seq=0, epoch=0)
    marker(log, 30, commit=False, epoch=1)     # coordinator aborted with a bumped epoch
    assert log.first_unstable_offset() is None
    assert log.producers.producers[30].epoch == 1
    log.close()
