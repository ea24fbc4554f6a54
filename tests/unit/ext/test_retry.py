"""Retry topics and dead letters: attempts, backoff, the DLQ context headers."""

from __future__ import annotations

import struct

import pytest

from kcompat.ext.delay import HeaderError
from kcompat.ext.holes import split
from kcompat.ext.retry import DeadLetter, Retry, RetryPolicy, replayable, route
from kcompat.wire.batch import validate
from kcompat.wire.records import Record, decode_batch, encode_batch

NOW = 1_700_000_000_000
POLICY = RetryPolicy("orders")


def _failed(headers: tuple[tuple[str, bytes | None], ...]) -> Record:
    return Record(7, NOW - 50_000, b"key", b"value", (("trace", b"t1"), *headers))


def test_three_attempts_with_growing_backoff_then_the_dead_letter_topic() -> None:
    record = _failed((("kc-original-partition", b"2"), ("kc-original-offset", b"41"),
                      ("kc-error", b"boom")))
    waits = []
    for attempt in (1, 2, 3):
        where = route(record, POLICY, NOW)
        assert isinstance(where, Retry)
        waits.append(where.due_ms - NOW)
        assert dict(where.headers)["kc-attempt"] == str(attempt).encode()
        assert [h for h, _ in where.headers].count("kc-attempt") == 1
        record = Record(record.offset, record.timestamp, record.key, record.value, where.headers)
    assert waits == [2000, 4000, 8000]
    dead = route(record, POLICY, NOW)
    assert isinstance(dead, DeadLetter) and dead.topic == "orders.dlq"
    h = dict(dead.headers)
    assert (h["kc-dlq-original-topic"], h["kc-dlq-original-partition"],
            h["kc-dlq-original-offset"], h["kc-dlq-attempts"], h["kc-dlq-error"]) == (
        b"orders", b"2", b"41", b"3", b"boom")
    assert h["kc-dlq-original-timestamp"] == str(NOW - 50_000).encode()
    assert h["kafka_dlt-original-topic"] == b"orders"
    assert struct.unpack(">i", h["kafka_dlt-original-partition"] or b"") == (2,)
    assert struct.unpack(">q", h["kafka_dlt-original-offset"] or b"") == (41,)
    assert struct.unpack(">q", h["kafka_dlt-original-timestamp"] or b"") == (NOW - 50_000,)
    assert h["kafka_dlt-exception-message"] == b"boom" and h["trace"] == b"t1"
    assert "kc-attempt" not in h
    assert replayable(dead.headers) == (("trace", b"t1"),)


def test_backoff_is_capped_and_a_custom_dead_letter_topic_is_used() -> None:
    policy = RetryPolicy("o", max_attempts=10, backoff_ms=1000, multiplier=3.0,
                         backoff_max_ms=5000, dlq_topic="graveyard")
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == [1000, 3000, 5000, 5000]
    dead = route(_failed((("kc-attempt", b"10"),)), policy, NOW)
    assert isinstance(dead, DeadLetter) and dead.topic == "graveyard"
    assert dict(dead.headers)["kc-dlq-original-partition"] == b"-1"  # the consumer did not say


@pytest.mark.parametrize("header", ["kc-attempt", "kc-original-partition", "kc-original-offset"])
def test_a_bad_number_is_refused(header: str) -> None:
    with pytest.raises(HeaderError, match=header):
        route(_failed(((header, b"x1"), ("kc-attempt", b"9"))
                      if header != "kc-attempt" else ((header, b"x1"),)), POLICY, NOW)


@pytest.mark.parametrize(("header", "value"), [
    ("kc-original-partition", b"x1"), ("kc-original-offset", b"-1"),
    ("kc-original-partition", b"2147483648")])
def test_a_bad_original_is_refused_at_the_first_attempt(header: str, value: bytes) -> None:
    """Not only once the retries are spent: then the record could never reach
    its dead-letter topic."""
    with pytest.raises(HeaderError, match=header):
        route(_failed(((header, value),)), POLICY, NOW)


def test_a_retry_topic_takes_every_record_out_of_its_batch() -> None:
    raw = encode_batch([(b"a", b"1", (), NOW), (b"b", b"2", (("kc-attempt", b"3"),), NOW),
                        (b"c", b"3", (("kc-delay-ms", b"99"),), NOW)],
                       producer_id=5, producer_epoch=0, base_sequence=0)
    out = split(raw, validate(raw), NOW, retry=POLICY)
    assert out is not None and decode_batch(out.hole) == []
    assert validate(out.hole).last_offset_delta == 2
    assert [(m.record.key, m.topic, m.retry, m.due_ms - NOW) for m in out.moves] == [
        (b"a", None, True, 2000), (b"b", "orders.dlq", False, 0), (b"c", None, True, 2000)]
    # a delay header means nothing in a retry topic and is not kept
    assert "kc-delay-ms" not in dict(out.moves[2].headers or ())
