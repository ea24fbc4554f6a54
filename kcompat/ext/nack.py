"""``nack``: hand a record a consumer failed on to its retry topic (optional helper).

Theory of operation
-------------------
Retries need nothing but a producer (docs/extensions.md): produce the failed
record, with its key, value and headers, to the retry topic ``<topic>.retry``
(or the group's own). This helper does exactly that for kafka-python and
confluent-kafka users and adds what only the consumer knows: ``kc-error``
(the error's text), ``kc-consumer`` (who failed, if given) and, on the first
failure — the record still comes from its own topic —
``kc-original-partition`` / ``kc-original-offset``. The broker counts the
attempts, waits out the backoff and moves the record to the dead-letter
topic after the last one.

It works with the record and producer objects of either client, and only
calls the producer: the caller flushes or waits as it would for any send.
"""

from __future__ import annotations

from typing import Any

from kcompat.ext.retry import (
    ATTEMPT,
    CONSUMER,
    ERROR,
    ORIGINAL_OFFSET,
    ORIGINAL_PARTITION,
    RETRY_SUFFIX,
)

_NOTES = frozenset({ERROR, CONSUMER})


def _field(record: Any, name: str) -> Any:
    value = getattr(record, name)
    return value() if callable(value) else value  # confluent-kafka: methods


def retry_topic_of(topic: str) -> str:
    """A record of ``X`` or of ``X.retry`` is retried in ``X.retry``."""
    return topic if topic.endswith(RETRY_SUFFIX) else topic + RETRY_SUFFIX


def nack(producer: Any, record: Any, error: BaseException | str, *,
         retry_topic: str | None = None, consumer: str | None = None) -> Any:
    """Produce ``record`` (a kafka-python ``ConsumerRecord`` or a
    confluent-kafka ``Message``) to its retry topic; returns what the
    producer's send returns (kafka-python: a future)."""
    topic = _field(record, "topic")
    headers = [(k, v) for k, v in (_field(record, "headers") or []) if k not in _NOTES]
    if not any(k == ATTEMPT for k, _v in headers) and not topic.endswith(RETRY_SUFFIX):
        headers = [(k, v) for k, v in headers
                   if k not in (ORIGINAL_PARTITION, ORIGINAL_OFFSET)]
        headers += [(ORIGINAL_PARTITION, str(_field(record, "partition")).encode()),
                    (ORIGINAL_OFFSET, str(_field(record, "offset")).encode())]
    headers.append((ERROR, str(error).encode("utf-8", "replace")))
    if consumer is not None:
        headers.append((CONSUMER, consumer.encode()))
    target = retry_topic or retry_topic_of(topic)
    key, value = _field(record, "key"), _field(record, "value")
    if hasattr(producer, "produce"):  # confluent-kafka
        return producer.produce(target, key=key, value=value, headers=headers)
    return producer.send(target, key=key, value=value, headers=headers)
