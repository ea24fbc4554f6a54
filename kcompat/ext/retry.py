"""Retry topics and dead-letter topics (docs/extensions.md): where a failed record goes.

Theory of operation
-------------------
A consumer that fails on a record of topic X produces it, unchanged, to X's
retry topic R (any topic with ``kc.retry.of=X``; ``X.retry`` is created with
that config on first use). Every record produced to R is a retry: the broker
takes it out of its batch (a hole, as for delayed records) and ``route``
decides, from the attempts it already had (header ``kc-attempt``, absent on
the first failure):

* attempt n = previous + 1 ≤ ``kc.retry.max.attempts``: ``Retry`` — it
  becomes visible in R again after ``kc.retry.backoff.ms`` ×
  ``kc.retry.backoff.multiplier``^(n−1), capped at ``kc.retry.backoff.max.ms``,
  with ``kc-attempt: n``;
* otherwise ``DeadLetter`` — it goes to the dead-letter topic
  (``kc.dlq.topic``, default ``X.dlq``) with where it came from and why, as
  ``kc-dlq-original-topic`` / ``-partition`` / ``-offset`` / ``-timestamp``,
  ``kc-dlq-attempts`` and ``kc-dlq-error`` (decimal or UTF-8 text), and as
  Spring Kafka's ``kafka_dlt-original-topic`` (UTF-8), ``-partition`` (int32),
  ``-offset`` and ``-timestamp`` (int64, big-endian) and
  ``kafka_dlt-exception-message``.

The original partition and offset are the consumer's to give (headers
``kc-original-partition`` / ``kc-original-offset`` on the first failure);
without them the DLQ headers say -1. The last ``kc-error`` is the error.

Bad input is refused whole (rule 5): a ``kc-attempt`` or ``kc-original-*``
that is not a non-negative decimal number (a partition beyond int32) raises
``HeaderError``, on every attempt.

``replayable`` strips this bookkeeping again (``kcompat dlq replay``). Pure.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kcompat.ext.delay import HeaderError
from kcompat.wire.records import Record

RETRY_SUFFIX = ".retry"
DLQ_SUFFIX = ".dlq"
ATTEMPT = "kc-attempt"
ERROR = "kc-error"
CONSUMER = "kc-consumer"
ORIGINAL_PARTITION = "kc-original-partition"
ORIGINAL_OFFSET = "kc-original-offset"
DLQ_ORIGINAL_TOPIC = "kc-dlq-original-topic"
DLQ_ORIGINAL_PARTITION = "kc-dlq-original-partition"
DLQ_ORIGINAL_OFFSET = "kc-dlq-original-offset"
DLQ_ORIGINAL_TIMESTAMP = "kc-dlq-original-timestamp"
DLQ_ATTEMPTS = "kc-dlq-attempts"
DLQ_ERROR = "kc-dlq-error"
SPRING_TOPIC = "kafka_dlt-original-topic"
SPRING_PARTITION = "kafka_dlt-original-partition"
SPRING_OFFSET = "kafka_dlt-original-offset"
SPRING_TIMESTAMP = "kafka_dlt-original-timestamp"
SPRING_MESSAGE = "kafka_dlt-exception-message"
# the broker's bookkeeping, replaced on each move and stripped on replay
BOOKKEEPING = frozenset({ATTEMPT, "kc-scheduled-offset", "kc-delay-ms", "kc-deliver-at",
                         "kc-schedule-id", "kc-cancel-schedule"})
DLQ_HEADERS = frozenset({DLQ_ORIGINAL_TOPIC, DLQ_ORIGINAL_PARTITION, DLQ_ORIGINAL_OFFSET,
                         DLQ_ORIGINAL_TIMESTAMP, DLQ_ATTEMPTS, DLQ_ERROR, SPRING_TOPIC,
                         SPRING_PARTITION, SPRING_OFFSET, SPRING_TIMESTAMP, SPRING_MESSAGE})

Headers = tuple[tuple[str, bytes | None], ...]


# the defaults of kc.retry.max.attempts, .backoff.ms, .backoff.multiplier, .backoff.max.ms
MAX_ATTEMPTS, BACKOFF_MS, MULTIPLIER, BACKOFF_MAX_MS = 3, 2000, 2.0, 30000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    of: str  # the topic whose records are retried
    max_attempts: int = MAX_ATTEMPTS
    backoff_ms: int = BACKOFF_MS
    multiplier: float = MULTIPLIER
    backoff_max_ms: int = BACKOFF_MAX_MS
    dlq_topic: str = ""  # empty: ``<of>.dlq``

    @property
    def dead_letter_topic(self) -> str:
        return self.dlq_topic or self.of + DLQ_SUFFIX

    def backoff(self, attempt: int) -> int:
        """How long attempt ``attempt`` (1, 2, ...) waits."""
        wait = self.backoff_ms * self.multiplier ** (attempt - 1)
        return int(min(wait, self.backoff_max_ms))


@dataclass(frozen=True, slots=True)
class Retry:
    due_ms: int
    headers: Headers


@dataclass(frozen=True, slots=True)
class DeadLetter:
    topic: str
    headers: Headers
    partition: int = -1  # the original partition, if the consumer named it


def route(record: Record, policy: RetryPolicy, now_ms: int) -> Retry | DeadLetter:
    """Where a record produced to the retry topic goes (see the module)."""
    return route_headers(record.headers, record.timestamp, policy, now_ms)


def route_headers(headers: Sequence[tuple[str, bytes | None]], timestamp: int,
                  policy: RetryPolicy, now_ms: int) -> Retry | DeadLetter:
    """``route`` from a record's headers and timestamp alone (its key and
    value are not needed: a produce to a retry topic does not decode them)."""
    found = dict(headers)
    previous = _number(ATTEMPT, found[ATTEMPT]) if ATTEMPT in found else 0
    # checked on every attempt, not only the last: a bad value refused at the
    # first produce, never after the retries, when the record could no longer
    # reach its dead-letter topic (rule 5)
    partition = (_number(ORIGINAL_PARTITION, found[ORIGINAL_PARTITION])
                 if ORIGINAL_PARTITION in found else -1)
    if partition > _INT32_MAX:
        raise HeaderError(ORIGINAL_PARTITION, found[ORIGINAL_PARTITION],
                          f"is beyond the largest partition number ({_INT32_MAX})")
    offset = (_number(ORIGINAL_OFFSET, found[ORIGINAL_OFFSET])
              if ORIGINAL_OFFSET in found else -1)
    attempt = previous + 1
    kept = tuple(h for h in headers if h[0] not in BOOKKEEPING)
    if attempt <= policy.max_attempts:
        return Retry(now_ms + policy.backoff(attempt),
                     (*kept, (ATTEMPT, str(attempt).encode())))
    error = found.get(ERROR) or b""
    topic = policy.of.encode()
    context: Headers = (
        (DLQ_ORIGINAL_TOPIC, topic), (DLQ_ORIGINAL_PARTITION, str(partition).encode()),
        (DLQ_ORIGINAL_OFFSET, str(offset).encode()),
        (DLQ_ORIGINAL_TIMESTAMP, str(timestamp).encode()),
        (DLQ_ATTEMPTS, str(previous).encode()), (DLQ_ERROR, error),
        (SPRING_TOPIC, topic), (SPRING_PARTITION, struct.pack(">i", partition)),
        (SPRING_OFFSET, struct.pack(">q", offset)),
        (SPRING_TIMESTAMP, struct.pack(">q", timestamp)), (SPRING_MESSAGE, error))
    kept = tuple(h for h in kept if h[0] not in DLQ_HEADERS)
    return DeadLetter(policy.dead_letter_topic, (*kept, *context), partition)


_CONSUMER_NOTES = frozenset({ERROR, CONSUMER, ORIGINAL_PARTITION, ORIGINAL_OFFSET})


def replayable(headers: Headers) -> Headers:
    """A dead letter's headers as a fresh record's (``kcompat dlq replay``): the
    broker's bookkeeping, the failure notes and the DLQ context removed."""
    return tuple(h for h in headers if h[0] not in BOOKKEEPING and h[0] not in DLQ_HEADERS
                 and h[0] not in _CONSUMER_NOTES)


_INT32_MAX = 2**31 - 1


def _number(header: str, value: bytes | None) -> int:
    text = (value or b"").strip()
    if not text.isdigit() or not text.isascii() or len(text) > 18:
        raise HeaderError(header, value, "is not a non-negative decimal number")
    return int(text)
