"""Delayed-delivery headers: what a record asks for, and what is refused (rule 5)."""

from __future__ import annotations

import pytest

from kcompat.ext.delay import (
    CANCEL_SCHEDULE,
    DELAY_MS,
    DELIVER_AT,
    SCHEDULE_ID,
    Cancel,
    Deliver,
    HeaderError,
    classify,
)

NOW = 1_700_000_000_000


def test_ordinary_records() -> None:
    assert classify([], NOW) is None
    assert classify([("trace", b"x"), ("kc-other", b"1")], NOW) is None
    assert classify([(DELAY_MS, b"0")], NOW) is None  # nothing to hold back
    assert classify([(DELIVER_AT, str(NOW).encode())], NOW) is None
    assert classify([(DELIVER_AT, b"5")], NOW) is None  # long past
    assert classify([(SCHEDULE_ID, b"a")], NOW) is None  # an id alone delays nothing


def test_delays_and_delivery_times() -> None:
    assert classify([(DELAY_MS, b"1500")], NOW) == Deliver(NOW + 1500)
    assert classify([(DELIVER_AT, str(NOW + 9).encode()), (SCHEDULE_ID, b"job-7")],
                    NOW) == Deliver(NOW + 9, "job-7")
    assert classify([(DELAY_MS, b" 10 ")], NOW) == Deliver(NOW + 10)


def test_cancellation() -> None:
    assert classify([(CANCEL_SCHEDULE, b"job-7"), ("x", b"")], NOW) == Cancel("job-7")


@pytest.mark.parametrize(("headers", "named", "reason"), [
    ([(DELAY_MS, b"abc")], DELAY_MS, "not a decimal number"),
    ([(DELAY_MS, b"-5")], DELAY_MS, "must not be negative"),
    ([(DELAY_MS, b"1.5")], DELAY_MS, "not a decimal number"),
    ([(DELAY_MS, b"")], DELAY_MS, "not a decimal number"),
    ([(DELAY_MS, None)], DELAY_MS, "has no value"),
    ([(DELAY_MS, b"9" * 30)], DELAY_MS, "too large"),
    ([(DELAY_MS, b"2592000001")], DELAY_MS, "beyond kc.delay.max.ms (2592000000)"),
    ([(DELIVER_AT, b"2026-11-26")], DELIVER_AT, "not a decimal number"),
    ([(DELIVER_AT, str(NOW + 2592000001).encode())], DELIVER_AT, "ahead"),
    ([(DELAY_MS, b"1"), (DELIVER_AT, b"1")], DELIVER_AT, "not both"),
    ([(DELAY_MS, b"1"), (DELAY_MS, b"2")], DELAY_MS, "more than once"),
    ([(CANCEL_SCHEDULE, b"")], CANCEL_SCHEDULE, "must not be empty"),
    ([(CANCEL_SCHEDULE, b"\xff")], CANCEL_SCHEDULE, "not UTF-8"),
    ([(CANCEL_SCHEDULE, b"a"), (DELAY_MS, b"5")], CANCEL_SCHEDULE, "cannot also carry"),
    ([(DELAY_MS, b"5"), (SCHEDULE_ID, b"")], SCHEDULE_ID, "must not be empty"),
])
def test_bad_values_are_refused_naming_the_header(headers: list[tuple[str, bytes | None]],
                                                  named: str, reason: str) -> None:
    with pytest.raises(HeaderError) as caught:
        classify(headers, NOW)
    assert caught.value.header == named
    assert str(caught.value).startswith(f"header {named}=")
    assert reason in str(caught.value)


def test_topic_limit() -> None:
    assert classify([(DELAY_MS, b"100")], NOW, max_delay_ms=100) == Deliver(NOW + 100)
    with pytest.raises(HeaderError, match=r"beyond kc.delay.max.ms \(99\)"):
        classify([(DELAY_MS, b"100")], NOW, max_delay_ms=99)
