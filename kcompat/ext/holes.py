"""Taking records out of a produced batch to move them (EXTENSIONS.md rules 1, 4, 5).

Theory of operation
-------------------
Rule 1 (free when unused): ``may_carry_headers`` — a batch whose bytes do
not contain ``kc-`` carries no extension header, and that substring search
(C speed over the raw bytes; compressed batches are decompressed first) is
all a plain batch pays before it is stored as sent. Otherwise
``split(view, header, now_ms, max_delay_ms)`` classifies every record's
headers (``delay.classify``): records to deliver later and cancellations are
taken out, and the batch is rebuilt with the same base offset, ``lastOffsetDelta``, producer id, epoch and
base sequence and fewer records — a batch with holes, as Kafka's log cleaner
leaves them (rule 4), possibly empty. Offsets and idempotent-producer state
therefore stay exactly what they would have been.

A retry topic (``retry``: its policy) takes every record out: each is either
retried in the same partition after its backoff or moved to the dead-letter
topic (``ext.retry.route``), so its batch is always empty — delay headers
are ignored there.

Each record taken out becomes a ``Move``: when (``due_ms``), where (its own
partition, or ``topic``), with which headers.

Rule 5: one bad header value raises ``HeaderError`` and nothing of the batch
is stored (the caller answers INVALID_RECORD with the message).

Pure: bytes and ``now_ms`` in, values out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kcompat.ext.delay import DELAY_MAX_MS_DEFAULT, Cancel, Deliver, classify
from kcompat.ext.retry import Headers, Retry, RetryPolicy, route
from kcompat.wire.batch import HEADER_SIZE, BatchHeader
from kcompat.wire.compression import CompressionError, decompress
from kcompat.wire.records import Record, decode_batch, rebuild_batch

_MARK = re.compile(b"kc-")  # searches a memoryview in place (``in`` would not)


@dataclass(frozen=True, slots=True)
class Move:
    record: Record  # as produced; its offset is its hole in the produced batch
    due_ms: int
    schedule_id: str | None = None
    headers: Headers | None = None  # delivered with these; None: its own
    topic: str | None = None  # delivered there; None: its own topic-partition
    partition: int = -1  # with ``topic``: this partition if it has it
    retry: bool = False  # a retry (counted as such)


@dataclass(frozen=True, slots=True)
class Split:
    hole: bytes  # the batch to store in the partition, with holes
    moves: tuple[Move, ...]
    cancels: tuple[tuple[int, Cancel], ...]  # (offset: its hole, the cancellation)


def may_carry_headers(view: memoryview | bytes, header: BatchHeader) -> bool:
    """False when no record of the batch can carry a ``kc-`` header."""
    if header.compression == 0:
        return _MARK.search(view, HEADER_SIZE) is not None
    try:
        return _MARK.search(decompress(header.compression, memoryview(view)[HEADER_SIZE:])
                            ) is not None
    except CompressionError:
        return True  # decode_batch reports it


def split(view: memoryview | bytes, header: BatchHeader, now_ms: int,
          max_delay_ms: int = DELAY_MAX_MS_DEFAULT, retry: RetryPolicy | None = None
          ) -> Split | None:
    """The records to move and the cancellations taken out, or None when
    there are none (see the module); the caller has ruled out a plain batch
    with ``may_carry_headers`` (unless ``retry``). Raises ``HeaderError`` or
    ``BatchError``."""
    if retry is not None:
        return _retries(view, header, now_ms, retry)
    kept: list[Record] = []
    moves: list[Move] = []
    cancels: list[tuple[int, Cancel]] = []
    for record in decode_batch(view):
        asked = classify(record.headers, now_ms, max_delay_ms)
        if asked is None:
            kept.append(record)
        elif isinstance(asked, Deliver):
            moves.append(Move(record, asked.due_ms, asked.schedule_id))
        else:
            cancels.append((record.offset, asked))
    if not moves and not cancels:
        return None
    return Split(rebuild_batch(header, kept), tuple(moves), tuple(cancels))


def _retries(view: memoryview | bytes, header: BatchHeader, now_ms: int,
             policy: RetryPolicy) -> Split:
    moves = []
    for record in decode_batch(view):
        where = route(record, policy, now_ms)
        if isinstance(where, Retry):
            moves.append(Move(record, where.due_ms, None, where.headers, retry=True))
        else:
            moves.append(Move(record, now_ms, None, where.headers, where.topic,
                              where.partition))
    return Split(rebuild_batch(header, []), tuple(moves), ())
