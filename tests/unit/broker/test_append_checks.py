"""A producer's malformed batch is refused with Kafka 4.4's answer before
anything is stored (the differential fuzzer's findings, compat_tests/FINDINGS.md
F9-F12): nothing here reaches the partition."""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from kcompat.broker.storage.append import append_records
from kcompat.wire import batch as wbatch
from kcompat.wire.records import RecordInput, encode_batch

COUNT_AT, LAST_DELTA_AT, ATTRIBUTES_AT, MAGIC_AT = 57, 23, 21, 16
LOG_APPEND = {"message.timestamp.type": "LogAppendTime"}


def _batch(n: int = 2) -> bytearray:
    now = int(time.time() * 1000)
    records: list[RecordInput] = [(b"k", b"v", (), now) for _ in range(n)]
    return bytearray(encode_batch(records))


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, wbatch.compute_crc(batch))
    return bytes(batch)


def _append(records: bytes, topic_configs: dict[str, object] | None = None) -> Any:
    def write(*_: Any) -> Any:
        raise AssertionError("a refused batch reached the log")

    return append_records(None, records, topic_configs or {}, {},  # type: ignore[arg-type]
                          int(time.time() * 1000), lambda _h: None, write)


def _with_count(count: int, last_delta: int | None = None) -> bytes:
    batch = _batch()
    struct.pack_into(">i", batch, COUNT_AT, count)
    if last_delta is not None:
        struct.pack_into(">i", batch, LAST_DELTA_AT, last_delta)
    return _recrc(batch)


@pytest.mark.parametrize("count", [3, 1, 0, -1])
def test_a_record_count_off_the_offset_range_is_invalid_record(count: int) -> None:
    assert _append(_with_count(count)).error == E.invalid_record


def test_a_batch_of_no_records_is_invalid_record() -> None:
    batch = _batch(1)[:61]
    struct.pack_into(">i", batch, COUNT_AT, 0)
    struct.pack_into(">i", batch, LAST_DELTA_AT, 0)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    assert _append(_recrc(batch)).error == E.invalid_record


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_a_codec_id_no_codec_has_is_kafkas_unknown_server_error(codec: int) -> None:
    batch = _batch()
    batch[ATTRIBUTES_AT + 1] = (batch[ATTRIBUTES_AT + 1] & ~7) | codec
    assert _append(_recrc(batch)).error == E.unknown_server_error


@pytest.mark.parametrize(("magic", "error"), [(3, E.corrupt_message), (9, E.corrupt_message),
                                              (1, E.invalid_record), (0, E.invalid_record)])
def test_an_unknown_magic_is_corrupt_an_old_one_invalid(magic: int, error: E) -> None:
    batch = _batch()
    batch[MAGIC_AT] = magic  # outside the CRC
    assert _append(bytes(batch)).error == error


def test_the_log_append_time_bit_from_a_producer() -> None:
    batch = _batch()
    batch[ATTRIBUTES_AT + 1] |= 0x08
    sent = _recrc(batch)
    assert _append(sent, LOG_APPEND).error == E.invalid_timestamp
    cleared = wbatch.with_create_time(sent)
    header = wbatch.validate(cleared)
    assert not header.is_log_append_time and header.max_timestamp == \
        wbatch.parse_header(sent).max_timestamp


@pytest.mark.parametrize("bad", [b"", None, b"x" * 257])
def test_a_delayed_record_with_a_bad_dedup_id_refuses_the_batch(bad: bytes | None) -> None:
    """Rule 5 on a topic with a dedup window: a delayed record's bad
    ``kc-dedup-id`` is refused at produce, as a stored record's is (before,
    the delayed record was accepted and its id dropped when delivered)."""
    now = int(time.time() * 1000)
    batch = encode_batch([(b"k", b"v", (("kc-dedup-id", b"fine"),), now),
                          (b"k", b"v", (("kc-delay-ms", b"60000"), ("kc-dedup-id", bad)), now)])
    answer = _append(batch, {"kc.dedup.window.ms": 60000})
    assert answer.error == E.invalid_record and "kc-dedup-id" in answer.message, answer

