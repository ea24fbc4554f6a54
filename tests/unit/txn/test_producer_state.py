"""Idempotence table: duplicates, gaps, epochs, wrap-around, snapshots (KIP-98/KIP-360)."""

from __future__ import annotations

import dataclasses

import pytest

from kcompat.txn.producer_state import ProducerStateTable, SequenceError
from kcompat.wire.batch import parse_header
from kcompat.wire.records import encode_batch


def header(pid: int, epoch: int, seq: int, count: int = 1, base_offset: int = 0):  # type: ignore[no-untyped-def]
    raw = encode_batch([(None, b"v", (), 1000)] * count, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)
    return dataclasses.replace(parse_header(raw), base_offset=base_offset)


def test_in_sequence_batches_are_accepted_and_duplicates_return_original_offsets() -> None:
    table = ProducerStateTable()
    offset = 0
    for seq in range(0, 30, 3):
        h = header(7, 0, seq, count=3, base_offset=offset)
        assert table.check(h) is None
        table.apply(h)
        offset += 3
    # the last five batches (seq 15..29) are remembered
    dup = table.check(header(7, 0, 24, count=3))
    assert dup is not None and (dup.base_offset, dup.last_offset) == (24, 26)
    with pytest.raises(SequenceError) as err:  # older than the cached window: a gap
        table.check(header(7, 0, 3, count=3))
    assert err.value.error == "out_of_order_sequence_number"


def test_gap_is_out_of_order() -> None:
    table = ProducerStateTable()
    table.apply(header(1, 0, 0))
    with pytest.raises(SequenceError) as err:
        table.check(header(1, 0, 2))
    assert err.value.error == "out_of_order_sequence_number"


def test_old_epoch_is_fenced_and_new_epoch_must_start_at_zero() -> None:
    table = ProducerStateTable()
    table.apply(header(1, 3, 0))
    with pytest.raises(SequenceError) as err:
        table.check(header(1, 2, 1))
    assert err.value.error == "invalid_producer_epoch"
    with pytest.raises(SequenceError):
        table.check(header(1, 4, 5))
    assert table.check(header(1, 4, 0)) is None


def test_unknown_producer_may_start_anywhere_and_sequence_wraps() -> None:
    table = ProducerStateTable()
    top = (1 << 31) - 1
    h = header(9, 0, top)
    assert table.check(h) is None
    table.apply(h)
    assert table.check(header(9, 0, 0, base_offset=1)) is None


def test_snapshot_round_trip() -> None:
    table = ProducerStateTable()
    table.apply(header(5, 1, 0, count=2, base_offset=10))
    restored = ProducerStateTable.from_snapshot(table.to_snapshot())
    dup = restored.check(header(5, 1, 0, count=2))
    assert dup is not None and dup.base_offset == 10
