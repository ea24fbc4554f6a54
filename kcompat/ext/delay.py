"""What a produced record's delayed-delivery headers ask for (docs/extensions.md).

Theory of operation
-------------------
A record opts into delayed delivery with ``kc-delay-ms`` (decimal ASCII
milliseconds from now) or ``kc-deliver-at`` (decimal epoch milliseconds),
optionally naming itself with ``kc-schedule-id`` so that a later record
carrying ``kc-cancel-schedule: ID`` to the same topic-partition can cancel it
until it is due. ``classify`` reads the headers of one record and answers:

* ``None`` — an ordinary record (no delay header, a zero delay, or a delivery
  time already reached: nothing to hold back);
* ``Deliver(due_ms, schedule_id)`` — hold the record back until ``due_ms``;
* ``Cancel(schedule_id)`` — a cancellation (the record itself is not stored).

Bad input is refused whole (rule 5): a value that is missing, not a decimal
number, negative, beyond ``kc.delay.max.ms``, or a header given twice or in a
contradicting combination raises ``HeaderError`` naming the header and the
value; the caller answers INVALID_RECORD and stores nothing of the batch.

Pure: no clock (``now_ms`` is an argument), no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DELAY_MS = "kc-delay-ms"
DELIVER_AT = "kc-deliver-at"
SCHEDULE_ID = "kc-schedule-id"
CANCEL_SCHEDULE = "kc-cancel-schedule"
SCHEDULED_OFFSET = "kc-scheduled-offset"
DELAY_HEADERS = frozenset({DELAY_MS, DELIVER_AT, SCHEDULE_ID, CANCEL_SCHEDULE})

DELAY_MAX_MS_DEFAULT = 30 * 24 * 3600 * 1000  # kc.delay.max.ms: 30 days
MAX_DIGITS = 19  # an int64 in decimal


class HeaderError(ValueError):
    """A ``kc-*`` header value the broker refuses (INVALID_RECORD)."""

    def __init__(self, header: str, value: bytes | None, reason: str) -> None:
        shown = "null" if value is None else repr(value.decode("utf-8", "replace"))
        super().__init__(f"header {header}={shown}: {reason}")
        self.header = header
        self.value = value


@dataclass(frozen=True, slots=True)
class Deliver:
    due_ms: int
    schedule_id: str | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    schedule_id: str


def classify(headers: Iterable[tuple[str, bytes | None]], now_ms: int,
             max_delay_ms: int = DELAY_MAX_MS_DEFAULT) -> Deliver | Cancel | None:
    """The delayed-delivery request of one record's headers (see the module)."""
    found: dict[str, bytes | None] = {}
    for name, value in headers:
        if name in DELAY_HEADERS:
            if name in found:
                raise HeaderError(name, value, "given more than once")
            found[name] = value
    if not found:
        return None
    if CANCEL_SCHEDULE in found:
        others = sorted(found.keys() - {CANCEL_SCHEDULE})
        if others:
            raise HeaderError(CANCEL_SCHEDULE, found[CANCEL_SCHEDULE],
                              f"a cancellation cannot also carry {', '.join(others)}")
        return Cancel(_text(CANCEL_SCHEDULE, found[CANCEL_SCHEDULE]))
    if DELAY_MS in found and DELIVER_AT in found:
        raise HeaderError(DELIVER_AT, found[DELIVER_AT], f"give {DELAY_MS} or {DELIVER_AT}, "
                          "not both")
    schedule_id = (_text(SCHEDULE_ID, found[SCHEDULE_ID]) if SCHEDULE_ID in found else None)
    if DELAY_MS in found:
        delay = _millis(DELAY_MS, found[DELAY_MS])
        if delay > max_delay_ms:
            raise HeaderError(DELAY_MS, found[DELAY_MS],
                              f"beyond kc.delay.max.ms ({max_delay_ms})")
        due = now_ms + delay
    elif DELIVER_AT in found:
        due = _millis(DELIVER_AT, found[DELIVER_AT])
        if due - now_ms > max_delay_ms:
            raise HeaderError(DELIVER_AT, found[DELIVER_AT],
                              f"more than kc.delay.max.ms ({max_delay_ms}) ahead")
    else:
        return None  # kc-schedule-id alone: an ordinary record that keeps its header
    return Deliver(due, schedule_id) if due > now_ms else None


def _millis(header: str, value: bytes | None) -> int:
    if value is None:
        raise HeaderError(header, value, "has no value")
    text = value.strip()
    if text.startswith(b"-") and text[1:].isdigit():
        raise HeaderError(header, value, "must not be negative")
    if not text.isdigit() or not text.isascii():
        raise HeaderError(header, value, "is not a decimal number of milliseconds")
    if len(text.lstrip(b"0")) > MAX_DIGITS:
        raise HeaderError(header, value, "is too large")
    return int(text)


def _text(header: str, value: bytes | None) -> str:
    if not value:
        raise HeaderError(header, value, "must not be empty")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise HeaderError(header, value, "is not UTF-8") from None
