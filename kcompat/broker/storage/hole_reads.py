"""Fetch answers over batches that hold no record: every client keeps moving.

Theory of operation
-------------------
Delayed records, retried records and deduplicated copies are taken out of
their produced batch, which is stored with holes (``ext.holes``): a batch
whose records all went is stored holding none, with its offsets, producer id
and sequence range. Apache Kafka's log holds such batches only after
compaction (the cleaner keeps a producer's last batch, emptied), a few at a
time; clients step over one by its last offset delta (the Java consumer's
``batch.nextOffset()``, librdkafka's ``LastOffset + 1``, KAFKA-5443). Here they
come in runs, and librdkafka takes a partition answer that gives it no
message and no control batch — record-less batches only, or those followed
by a batch cut at the size limit — for a message too large to fetch: it
doubles its partition fetch size, up to 1 GiB, then reports
MSG_SIZE_TOO_LARGE for every such answer (``rdkafka_msgset_reader.c``,
``rd_kafka_msgset_reader_run``). An empty answer (no bytes) it passes over.

So ``HoleReads.lead`` looks at where a partition's located answer starts:

* The first batch holds records, or is a control batch: the answer stays as
  located (one header read; zero-copy as before).
* Otherwise the following headers are walked (fields read straight from
  windows of ``WINDOW_BYTES``, no object per batch), across segments, below
  the read's limit (high watermark or last stable offset). The answer starts
  at the first batch with records (or control batch), whole (at least that
  batch, else the partition's byte limit): what Kafka answers from a log
  whose cleaner had removed the empty batches — a gap in offsets, which
  every client steps over (compacted topics have them).
* No such batch within ``WALK_HEADERS`` headers, or record-less batches up to
  the limit (the tail of a topic whose recent records were all delayed):
  the answer is empty — the consumer stays where it is, its long poll waits
  for news — and a note for that run (per log, keyed by the run's first
  offset) keeps when it was first read and how far it has been walked, so
  the next read resumes there: a tail read woken by every append walks only
  what was appended, a long run is walked ``WALK_HEADERS`` a read. Once the
  run was first read ``TAIL_HOLD_S`` ago (a delivery usually lands after it
  meanwhile), it is answered as stored, to every reader at it, so every
  consumer's position gets past it (the Java consumer and Spark expect reads
  up to the high watermark to end there); librdkafka doubles its fetch size
  once for that, far from the ten doublings its 1 MiB default allows before
  it reports an error.

Filtered views (``views``) walk their own rebuilt batches (empty where the
filter kept nothing) and keep their runs in the same notes, keyed by filter
and fetch offset, with the same hold (``HoleReads.walked``).

Resuming is safe: the walked batches lie below the high watermark, which no
truncation goes under, and a log start moved past them makes ``locate``
refuse (the answer is then as located).

librdkafka sets its partition fetch size once per partition and never resets
it, so these doublings add up over a consumer's life: a partition that only
gets record-less batches for long stretches (delays much longer than
``TAIL_HOLD_S`` and nothing else produced) still reaches the error after ten
released tails (~50 s of them). Kafka 4.4 itself answers the stored bytes
from the batch holding the fetch offset, empty batches included.

Bounded work: the common path reads nothing more (the first header is the one
``PartitionLog.locate`` read to find the batch: ``FileSlice.first``); the walk reads ``WALK_HEADERS`` headers at most per partition read
(4,096 record-less batches: ~4 ms on a loaded 2-core machine); nothing is
kept per batch, at most ``NOTES_MAX`` notes per log (the oldest go first).
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from kcompat.log.partition_log import FileSlice, OffsetOutOfRange, PartitionLog
from kcompat.wire.batch import ATTR_CONTROL, HEADER_SIZE, LOG_OVERHEAD

#: record-less batches looked at, at most, past the start of one partition's answer
WALK_HEADERS = 4096
#: how long a run of record-less batches at the end of what may be read is held back
TAIL_HOLD_S = 5.0
WINDOW_BYTES = 64 << 10  # bytes read at once while walking (~1,000 empty batches)
NOTES_MAX = 64  # runs remembered per log (one per reading position, roughly)
WHOLE = 1 << 62  # a byte limit no segment reaches: the located range to its end
# of a batch header: base offset, batch length, attributes, last offset delta, records
_FIELDS = struct.Struct(">qi9xhi30xi")
assert _FIELDS.size == HEADER_SIZE
# a run's note: [when a read first reached an end of it (None: not yet), the
# offset its walk has reached (all record-less below it), its last batch's bytes]
Note = list[Any]


def _moves(fields: tuple[int, ...]) -> bool:
    """A batch a client reads something from: records, or a control batch."""
    return bool(fields[4] or fields[2] & ATTR_CONTROL)


class HoleReads:
    """Where each partition answer of a Fetch starts (module docstring)."""

    def __init__(self) -> None:
        # per log: where a record-less run not passed yet was read from -> its note
        self._notes: weakref.WeakKeyDictionary[PartitionLog, dict[Hashable, Note]] = (
            weakref.WeakKeyDictionary())
        self.held = 0  # answers held back at a record-less run
        self.skipped_batches = 0  # record-less batches an answer started past

    def lead(self, log: PartitionLog, where: FileSlice, max_bytes: int, upper: int,
             clock: Callable[[], float]) -> FileSlice | None:
        """The range to answer instead of ``where`` (located below ``upper``
        with ``max_bytes``), or None for an empty answer; ``clock`` (seconds)
        is read only when no batch with records was found."""
        if where.first is not None and (where.first.records_count or where.first.is_control):
            return where  # the common path: the header ``locate`` read on its way
        try:
            head = where.file.pread(HEADER_SIZE, where.position)
        except OSError:
            return where
        if len(head) < HEADER_SIZE:
            return where
        first = _FIELDS.unpack_from(head)
        if _moves(first):
            return where  # the common path: the header ``locate`` read
        start = first[0]
        note = self.note(log, start)
        offset = int(note[1]) if note is not None else start  # walked before: resume
        walked = 0
        while walked < WALK_HEADERS:
            try:
                span = log.locate(offset, WHOLE, upper)
            except (OSError, OffsetOutOfRange):
                return where
            if span is None:
                break  # record-less up to the limit: the tail
            found, offset, walked = _walk(span, offset, walked)
            if found is not None:
                self.skipped_batches += walked
                position, size = found
                end = span.position + span.length
                return FileSlice(span.file, position, min(end - position, max(max_bytes, size)))
        return None if self.walked(log, start, offset, clock) else where

    def note(self, log: PartitionLog, key: Hashable) -> Note | None:
        """The note of the record-less run read from ``key`` (its first
        offset; for a view, the filter and the offset: ``views``)."""
        notes = self._notes.get(log)
        return notes.get(key) if notes is not None else None

    def walked(self, log: PartitionLog, key: Hashable, offset: int,
               clock: Callable[[], float] | None = None, last: bytes = b"") -> bool:
        """Note that the run read from ``key`` is record-less up to ``offset``
        (``last``: the bytes of its last batch, for a reader that answers
        them). With ``clock`` the walk reached an end (the read's limit, or
        its bound): True while the run is held back, less than
        ``TAIL_HOLD_S`` after a read first reached an end of it."""
        notes = self._notes.setdefault(log, {})
        note = notes.get(key)
        if note is None:
            note = notes[key] = [None, offset, last]
            while len(notes) > NOTES_MAX:
                del notes[next(iter(notes))]
        note[1] = offset
        if last:
            note[2] = last
        if clock is None:
            return False
        now_s = clock()
        if note[0] is None:
            note[0] = now_s
        if now_s - note[0] >= TAIL_HOLD_S:
            return False  # as stored: every reader at this run passes it from now on
        self.held += 1
        return True


def _walk(span: FileSlice, offset: int,
          walked: int) -> tuple[tuple[int, int] | None, int, int]:
    """Walk ``span`` (whole batches) from its start: ((position, size) of the
    first batch a client reads something from, or None), the offset after the
    record-less batches passed, the count walked so far."""
    position, end = span.position, span.position + span.length
    unpack = _FIELDS.unpack_from
    while end - position >= HEADER_SIZE and walked < WALK_HEADERS:
        buf = span.file.pread(min(WINDOW_BYTES, end - position), position)
        at = 0
        while len(buf) - at >= HEADER_SIZE and walked < WALK_HEADERS:
            fields = unpack(buf, at)
            size = fields[1] + LOG_OVERHEAD
            if size < HEADER_SIZE:
                return None, offset, WALK_HEADERS  # not a batch: stop walking
            if _moves(fields):
                return (position + at, size), offset, walked
            offset = fields[0] + fields[3] + 1
            walked += 1
            at += size
        if at == 0:
            return None, offset, WALK_HEADERS  # shorter than the range: truncated meanwhile
        position += at
    return None, offset, walked
