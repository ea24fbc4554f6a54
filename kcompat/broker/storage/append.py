"""Appending a producer's batch to a partition: the produce hot path.

Theory of operation
-------------------
docs/architecture.md, principle 3: the records field of a produce request is validated at batch
level only — size, magic, CRC32C, codec, a record count that matches the
offset range and is not zero, and the idempotence check on the header's
producer id/epoch/sequence — and then written as the client sent it, with
``baseOffset`` and ``partitionLeaderEpoch`` (both outside the CRC) replaced on
the way to disk. Nothing is stored unless every check passes. Only a topic with
``message.timestamp.type=LogAppendTime`` pays for a copy (its timestamp and CRC
change); such a topic refuses a batch whose producer set the LogAppendTime
bit (INVALID_TIMESTAMP), a CreateTime topic stores it as CreateTime (a copy,
its bit cleared), as Kafka does. A client-sent control batch is refused:
markers are written by the transaction coordinator only. A compacted topic (``cleanup.policy`` with
``compact``) refuses a batch with a record without a key, as Kafka's
LogValidator does (INVALID_RECORD, each such record in ``record_errors``). A
batch larger than the topic's segment size (``internal.segment.bytes`` or
``segment.bytes``) is RECORD_LIST_TOO_LARGE, as in Kafka: a segment holds
whole batches.

Extensions (docs/extensions.md): a batch whose records carry delayed-delivery
headers is stored with those records taken out (``ext.holes``: same offsets,
producer id and sequence range, fewer records); the result carries them
(``split``) for the produce handler to schedule once the batch is committed.
A plain batch of a topic that is not a retry topic pays one substring search
for ``kc-`` (``holes.may_carry_headers``; a compressed batch is decompressed
for it, as Kafka decompresses one to validate its records). A large batch
with such headers is split ahead in a worker thread (``split_ahead``), before
the no-await section, so its per-record work never holds the event loop.
Batches the broker writes itself go through ``append_internal``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kcompat.broker.config.configdef import LONG_MAX
from kcompat.broker.config.topic_config import effective, retry_policy
from kcompat.broker.storage import dedup_windows
from kcompat.broker.storage.partition import Partition
from kcompat.ext import holes
from kcompat.ext.dedup import BY_HEADER, DEDUP_ID, header_id
from kcompat.ext.delay import HeaderError
from kcompat.ext.holes import Split
from kcompat.txn.producer_state import SequenceError
from kcompat.wire import batch as wbatch
from kcompat.wire import record_scan
from kcompat.wire.batch import BatchError, BatchHeader
from kcompat.wire.records import decode_batch, varint_bytes


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    message: str | None = None
    split: Split | None = None  # delayed records taken out (stored with holes)
    record_errors: tuple[tuple[int, str], ...] = ()  # (index in the batch, message)


# a producer's bad batch (wire.batch.BatchError kind) as Kafka answers it
_BATCH_ERRORS = {"corrupt": ErrorCode.corrupt_message, "invalid": ErrorCode.invalid_record,
                 "unknown": ErrorCode.unknown_server_error}


def _fail(code: ErrorCode, message: str) -> AppendResult:
    return AppendResult(code, message=message)


def _timestamp_problem(view: memoryview, header: BatchHeader, topic_configs: dict[str, object],
                       broker_defaults: dict[str, object], now_ms: int) -> str | None:
    """CreateTime bounds (KIP-937/1030): message.timestamp.after.max.ms (default
    1 h) via the header's max timestamp; message.timestamp.before.max.ms only
    when set, and only then by decoding the batch for its smallest timestamp."""
    after_ms = int(effective("message.timestamp.after.max.ms", topic_configs,
                             broker_defaults)[0])
    if header.max_timestamp >= 0 and header.max_timestamp - now_ms > after_ms:
        return (f"timestamp {header.max_timestamp} is more than "
                f"message.timestamp.after.max.ms={after_ms} ahead of the broker's time")
    before_ms = int(effective("message.timestamp.before.max.ms", topic_configs,
                              broker_defaults)[0])
    if before_ms < LONG_MAX:
        try:
            smallest = min((r.timestamp for r in decode_batch(view)), default=now_ms)
        except BatchError:
            return "unreadable records"
        if now_ms - smallest > before_ms:
            return (f"timestamp {smallest} is more than "
                    f"message.timestamp.before.max.ms={before_ms} behind the broker's time")
    return None


def append_records(
    part: Partition,
    records: bytes | None,
    topic_configs: dict[str, object],
    broker_defaults: dict[str, object],
    now_ms: int,
    txn_check: Callable[[BatchHeader], ErrorCode | None],
    write: Callable[[memoryview, BatchHeader, int], BatchHeader],
    presplit: Presplit | None = None,
) -> AppendResult:
    """Validate and ``write`` (the partition's Raft proposal); the caller holds
    no await between this and the ack. ``presplit``: the split of these
    records already made (``split_ahead``) for the same time and configs."""
    if not records:
        return _fail(ErrorCode.invalid_record, "produce request carries no record batch")
    max_bytes = int(effective("max.message.bytes", topic_configs, broker_defaults)[0])
    try:
        batches = wbatch.split_batches(records)
        if len(batches) != 1:
            return _fail(ErrorCode.invalid_record,
                         "produce requests of version 3+ must contain exactly one record batch")
        view = batches[0]
        if len(view) > max_bytes:
            return _fail(ErrorCode.message_too_large,
                         f"batch of {len(view)} bytes exceeds max.message.bytes {max_bytes}")
        header = wbatch.validate(view)
    except wbatch.BatchError as e:
        return _fail(_BATCH_ERRORS.get(e.kind, ErrorCode.invalid_record), str(e))
    if header.is_control:
        return _fail(ErrorCode.invalid_record, "clients may not write control batches")
    if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
        return _fail(ErrorCode.invalid_record, (
            f"record count {header.records_count} disagrees with the batch's offset range "
            f"(lastOffsetDelta {header.last_offset_delta})"))
    log_append = effective("message.timestamp.type", topic_configs, broker_defaults)[0] == (
        "LogAppendTime")
    if header.is_log_append_time:  # set by the producer
        if log_append:
            return _fail(ErrorCode.invalid_timestamp,
                         "producers may not set the timestamp type to LogAppendTime")
        view = memoryview(wbatch.with_create_time(view))
        header = wbatch.parse_header(view)
        presplit = None  # made of the batch as sent
    if header.is_transactional:  # as Kafka verifies it before its log validates records
        txn_error = txn_check(header)
        if txn_error is not None:
            return _fail(txn_error, "transactional batch outside an ongoing transaction "
                                  "that includes this partition")
    if "compact" in effective("cleanup.policy", topic_configs, broker_defaults)[0]:
        refused = _keyless(part, view)
        if refused is not None:
            return refused
    if not log_append:
        problem = _timestamp_problem(view, header, topic_configs, broker_defaults, now_ms)
        if problem is not None:
            return _fail(ErrorCode.invalid_timestamp, problem)
    split = None
    retry = retry_policy(topic_configs, broker_defaults)
    if retry is not None or holes.may_carry_headers(view, header):
        max_delay = int(effective("kc.delay.max.ms", topic_configs, broker_defaults)[0])
        try:
            split = (presplit.take() if presplit is not None
                     and presplit.made_for == (now_ms, max_delay, retry)
                     else holes.split(view, header, now_ms, max_delay, retry))
        except HeaderError as e:
            return _fail(ErrorCode.invalid_record, str(e))
        except wbatch.BatchError as e:
            return _fail(ErrorCode.corrupt_message, str(e))
        if split is not None:
            view = memoryview(split.hole)
            header = wbatch.parse_header(view)
    dedup = dedup_windows.policy(topic_configs, broker_defaults)
    if split is not None and dedup is not None:
        try:
            _check_moved_ids(split, dedup)
        except HeaderError as e:
            return _fail(ErrorCode.invalid_record, str(e))
    if len(view) > part.log.config.segment_bytes:  # a batch never spans segments (Kafka: no message)
        return AppendResult(ErrorCode.record_list_too_large)
    ahead = presplit.ids if presplit is not None and split is None else None
    result = store(part, view, header, log_append, now_ms, write, dedup, strict=True,
                   ids_ahead=ahead)
    return result if split is None else dataclasses.replace(result, split=split)


_DEDUP_ID_NAME = DEDUP_ID.encode()


def _check_moved_ids(split: Split, pol: dedup_windows.Policy) -> None:
    """Rule 5 for the records a produce takes out on a topic with a dedup
    window: a bad ``kc-dedup-id`` on a delayed record refuses the batch as on
    a stored one (``HeaderError``), rather than the id being dropped when it
    is delivered. Only the headers of the records whose header bytes name
    it are read (not their key and value)."""
    if pol.by != BY_HEADER:
        return
    taken = split.taken
    for count, header_bytes in zip(taken.header_counts, taken.header_bytes, strict=True):
        if _DEDUP_ID_NAME in header_bytes:
            block = varint_bytes(count) + header_bytes
            header_id(record_scan.headers_at(block, 0, len(block))[0])  # read by split already


@dataclass(frozen=True, slots=True)
class Presplit:
    """``holes.split`` of a batch made ahead, off the append's no-await
    section: its result, or what it raised (raised again in its place)."""

    made_for: tuple[int, int, object]  # now_ms, kc.delay.max.ms, retry policy
    split: Split | None = None
    error: Exception | None = None
    # the dedup ids of the batch as stored when nothing was split out of it
    # (``dedup_windows.scan_ids``), for the ``kc.dedup.by`` they were read by
    ids: dedup_windows.ScannedIds | None = None

    def take(self) -> Split | None:
        if self.error is not None:
            raise self.error
        return self.split


def split_ahead(records: bytes | None, topic_configs: dict[str, object],
                broker_defaults: dict[str, object], now_ms: int) -> Presplit | None:
    """The split ``append_records`` would make of ``records`` at ``now_ms``,
    and, on a topic with a dedup window, the ids of the records of a batch
    nothing is split out of; or None where it would make neither (a plain
    batch) or the batch is bad (``append_records`` says why). Pure: run in a
    worker thread, so that a batch of ten thousand delayed records (about
    0.1 s of decoding) or of ids (about 20 us each) does not hold the event
    loop — the ids' check against the index, a dict lookup each, stays with
    the append."""
    try:
        batches = wbatch.split_batches(records) if records else []
        if len(batches) != 1:
            return None
        view = batches[0]
        header = wbatch.validate(view)
    except BatchError:
        return None
    if header.is_control:
        return None
    retry = retry_policy(topic_configs, broker_defaults)
    max_delay = int(effective("kc.delay.max.ms", topic_configs, broker_defaults)[0])
    made_for = (now_ms, max_delay, retry)
    split = None
    if retry is not None or holes.may_carry_headers(view, header):
        try:
            split = holes.split(view, header, now_ms, max_delay, retry)
        except (HeaderError, BatchError) as e:
            return Presplit(made_for, error=e)
    dedup = dedup_windows.policy(topic_configs, broker_defaults)
    ids = None
    if dedup is not None and split is None:
        try:
            ids = dedup_windows.scan_ids(dedup, view)
        except (HeaderError, BatchError) as e:  # answered by the append, as it would find it
            ids = dedup_windows.ScannedIds(dedup.by, error=e)
    if split is None and ids is None:
        return None
    return Presplit(made_for, split, ids=ids)


def _keyless(part: Partition, view: memoryview) -> AppendResult | None:
    """Kafka's LogValidator: a compacted topic refuses a batch holding a record
    without a key, naming each such record (at most the first three in the
    message, as Kafka's)."""
    try:
        records = record_scan.scan(view)[2]
    except wbatch.BatchError as e:
        return _fail(ErrorCode.corrupt_message, str(e))
    where = f"{part.topic}-{part.index}"
    errors = tuple((i, f"Compacted topic cannot accept message without key in topic "
                       f"partition {where}") for i, r in enumerate(records) if not r.keyed)
    if not errors:
        return None
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return AppendResult(ErrorCode.invalid_record, record_errors=errors, message=(
        f"One or more records have been rejected due to {len(errors)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]"))


def store(part: Partition, view: memoryview, header: BatchHeader, log_append: bool,
          now_ms: int, write: Callable[[memoryview, BatchHeader, int], BatchHeader],
          dedup: dedup_windows.Policy | None = None, strict: bool = False,
          ids_ahead: dedup_windows.ScannedIds | None = None) -> AppendResult:
    """The idempotence check and the write of a validated batch; a duplicate
    answers the original's offset and writes nothing. With a ``dedup``
    policy, records whose id is in the window are taken out first
    (``dedup_windows``): the producer still gets success. ``strict``: a
    producer's batch, refused for a bad ``kc-dedup-id`` (a batch the broker
    moves — a due delayed record — is stored, its bad id ignored).
    ``ids_ahead``: the ids of ``view``'s records, read in a worker thread
    (``split_ahead``; strict)."""
    try:
        duplicate = part.log.producers.check(header)
    except SequenceError as e:
        code = getattr(ErrorCode, e.error)
        return _fail(code, str(e))
    if duplicate is not None:
        return AppendResult(ErrorCode.none, duplicate.base_offset)
    ids: list[bytes | None] = []
    if dedup is not None:
        try:
            view, header, ids = dedup_windows.take_duplicates(part, view, header, dedup, now_ms,
                                                              strict, ids_ahead)
        except HeaderError as e:
            return _fail(ErrorCode.invalid_record, str(e))
        except wbatch.BatchError as e:
            return _fail(ErrorCode.corrupt_message, str(e))
    append_time = -1
    if log_append:
        view = memoryview(wbatch.with_log_append_time(view, now_ms))
        header = wbatch.parse_header(view)
        append_time = now_ms
    written = write(view, header, now_ms)
    if dedup is not None:
        dedup_windows.stored(part, ids, now_ms, written)
    part.notify_append()
    return AppendResult(ErrorCode.none, written.base_offset, append_time)


def append_internal(part: Partition, view: memoryview, topic_configs: dict[str, object],
                    broker_defaults: dict[str, object], now_ms: int,
                    write: Callable[[memoryview, BatchHeader, int], BatchHeader]
                    ) -> AppendResult:
    """A batch the broker wrote itself (a schedule-log record, a due delayed
    record): validated and checked for duplicates like a producer's, but its
    headers are not read again and its timestamps are not bounded."""
    try:
        header = wbatch.validate(view)
    except wbatch.BatchError as e:
        return _fail(ErrorCode.corrupt_message, str(e))
    log_append = effective("message.timestamp.type", topic_configs, broker_defaults)[0] == (
        "LogAppendTime")
    return store(part, view, header, log_append, now_ms, write,
                 dedup_windows.policy(topic_configs, broker_defaults))
