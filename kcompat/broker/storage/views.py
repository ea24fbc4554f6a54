"""Filtered views (docs/extensions.md): validation, and Fetch answers with holes.

Theory of operation
-------------------
A view is a topic whose configs are exactly ``kc.view.of=<source>`` and
``kc.view.filter=<expression>`` (``ext.view_filter``). It owns no partition:
the metadata layer gives it its source's partition count and routes its
partitions to the source's (same Raft groups, leaders and replicas;
``controller.metadata_apply``), so Metadata, ListOffsets, OffsetForLeaderEpoch,
consumer-group offsets and leadership all work as on the source, at the same
offsets. Decisions:

* Fetch reads the source's bytes and rebuilds every data batch with the
  non-matching records taken out: same base offset, ``lastOffsetDelta``,
  producer id, epoch and sequence, fewer records (rule 4, what Kafka's
  cleaner leaves; a batch with no match stays, empty, so the consumer's
  position can move past it). Control batches and the aborted transactions
  pass unchanged; a batch cut at the end of the read is dropped (the client
  would drop it). Batches are filtered by scanning their records for the
  headers the filter names and splicing the kept ones (``wire.record_scan``),
  at most ``WORK_RECORDS`` source records per Fetch on the event loop (the
  answer ends early; the rest is filtered in a worker thread, below), and
  cached (LRU, by filter, source partition, offset and CRC; ``CACHE_BYTES`` in
  all), so several groups reading one view filter once. A batch of more than
  ``INLINE_RECORDS`` records or ``INLINE_BYTES`` bytes (a producer's batch of
  1 MB holds ~10,000 small records: ~100 ms of filtering) is never read or
  filtered on the loop: the walk stops before it; if nothing was answered
  yet, ``warm`` reads and filters it and the batches not cached after it
  (``WARM_BYTES`` or the partition's limit) in a worker thread into the
  cache, and the Fetch reads again (the GIL is handed back to the loop every
  few milliseconds); an answer with records goes out at once (its wait for
  work it does not carry made the 90 % view of ``bench/ext15.py`` 2.5x
  slower), the next Fetch warms the batch. The Fetch itself reads only the
  source's batch headers (``log.header_walk``): a batch whose rebuilt form
  is cached is answered from the cache without reading its
  bytes. The thread checks that what it reads is still the batch seen (base
  offset, CRC, size: the log may have been truncated, cleaned or deleted
  meanwhile) and drops it otherwise; what is served is always located again
  after the thread, below the high watermark.
* An answer never consists of empty rebuilt batches only, short of a held
  tail. librdkafka takes a partition answer that gives it no message and no
  control batch for a message too large: it doubles its partition fetch size,
  never resetting it, then reports MSG_SIZE_TOO_LARGE for each (``hole_reads``
  has the details); with a selective filter (one match in 10,000) most
  answers were such. So ``answer`` walks the rebuilt batches (``_walk``) and
  starts the answer at the first that keeps a record at or past the fetch
  offset (the client drops those below it), or a control batch: the empty
  ones before it are an offset gap, which every client steps over as on a
  compacted topic. When the located range holds none, the walk goes on in the
  source, segment by segment below the read's limit (high watermark or last
  stable offset): the partition's byte limit applies to the bytes answered,
  and the walk is bounded by ``hole_reads.WALK_HEADERS`` headers and by the
  same work budget (cold batches end it: the answer is empty, ``warm``, read
  again). Where a walk without a record stops is noted with ``hole_reads``'
  notes (per source log, keyed by filter and fetch offset: the run is
  record-less below the noted offset, so the next read of it resumes there).
  A walk stopped by its bound is answered empty and the Fetch reads on at once
  from the note (``paused``; a loop checkpoint between reads), until its wait
  ends: a long run costs the consumer empty answers, never a doubling. A walk
  that reaches the read's limit without a record is at the run's end (a tail):
  answered empty (the consumer waits where it is, woken by appends) until
  ``hole_reads.TAIL_HOLD_S`` after a read first reached it, then as stored:
  the run's last batches walked by that read, within the byte limit (a gap
  before them), or if it walked none the run's last batch the note keeps
  (without its records: a header's worth), so the consumer's position goes
  to where the run was walked to, at the cost of one doubling; a released
  run stays released for every reader. So a consumer at the tail of a
  selective view whose source gets no match for longer than the hold still
  spends a doubling per released tail (``hole_reads``' limit, more frequent
  here). Answers cut by the work budget before any record are empty too
  (the work is cached, the client asks again from the same offset). Bounded
  work: one read looks at ``WALK_HEADERS`` headers at most (or fills the
  byte limit), filters ``WORK_RECORDS`` records on the loop at most; notes
  are ``hole_reads``' (``NOTES_MAX`` per log).
* Read-only: Produce and DeleteRecords answer INVALID_TOPIC_EXCEPTION,
  CreatePartitions INVALID_REQUEST (a view follows its source's additions).
* ``kc.view.filter`` may be altered (validated like at creation);
  ``kc.view.of`` is fixed at creation, and no other key may be set on a view.
* A view of a view, of an internal topic, or of a missing topic is refused
  (INVALID_CONFIG naming ``kc.view.of``); so is a partition count other than
  the source's (INVALID_PARTITIONS). The replication factor asked is ignored.
* Deleting the source deletes its views in the same metadata record; a
  view's consumers then get UNKNOWN_TOPIC_OR_PARTITION.
* Share groups read views too (``shares``): a share-partition of a view
  acquires only the matching records of its source partition (the others are
  gaps, archived unseen, as KIP-932 treats the offsets a compacted topic no
  longer has), learnt from the kept offsets the cache keeps with each rebuilt
  batch, and serves the rebuilt batches (``share_reads``).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.config.topic_config import VIEW_FILTER, VIEW_KEYS, VIEW_OF
from kcompat.broker.loop.offload import run_cpu
from kcompat.broker.storage.hole_reads import WALK_HEADERS, WHOLE, HoleReads
from kcompat.ext import view_filter
from kcompat.log import header_walk
from kcompat.log.partition_log import FileSlice, OffsetOutOfRange, PartitionLog
from kcompat.log.store import StoredFile
from kcompat.wire import record_scan
from kcompat.wire.batch import HEADER_SIZE, BatchError, BatchHeader, iter_headers, parse_header
from kcompat.wire.compression import CompressionError, decompress
from kcompat.wire.records import rebuild_batch as record_less_batch

CACHE_BYTES = 64 << 20  # rebuilt batches kept (by source partition, offset, CRC)
#: source records one Fetch filters at most (beyond its first batch): the
#: filtering runs on the event loop, so a cold read of a large view answers in
#: parts of a few milliseconds instead of stalling every other client
WORK_RECORDS = 1000
#: a batch not cached with more records than this is filtered in a worker
#: thread (``ViewReader.warm``), not on the loop
INLINE_RECORDS = 500
#: nor one of more bytes than this (read on the loop to be filtered there)
INLINE_BYTES = 256 << 10
#: source bytes one Fetch reads on the loop at most to filter them there
WORK_BYTES = 256 << 10
#: source bytes of batches not cached left at once for the worker thread, at
#: least (the partition's byte limit if larger)
WARM_BYTES = 1 << 20

Problem = tuple[ErrorCode, str]


def read_only(view: str, source: str) -> str:
    return (f"Topic '{view}' is a read-only view of '{source}' (kc.view.of): "
            f"write to '{source}'")


def check_new_view(overrides: dict[str, Any], partitions: int,
                   source_of: Callable[[str], Any]) -> tuple[int, Problem | None]:
    """(source partition count, None) for a valid new view, else (-1, the
    error). ``source_of(name)`` is the source's ``TopicMeta`` or None."""
    problem = check_view_configs(overrides, source_of)
    if problem is not None:
        return -1, problem
    source = source_of(str(overrides[VIEW_OF]))
    if partitions not in (-1, source.partitions):
        return -1, (ErrorCode.invalid_partitions,
                    f"A view has the partitions of its source: '{source.name}' has "
                    f"{source.partitions}, not {partitions}.")
    return source.partitions, None


def check_view_configs(overrides: dict[str, Any],
                       source_of: Callable[[str], Any]) -> Problem | None:
    """The configs of a view (parsed), checked against the image."""
    name = overrides.get(VIEW_OF)
    if not name:
        return ErrorCode.invalid_config, f"{VIEW_FILTER}: set only on a view, with {VIEW_OF}"
    if not overrides.get(VIEW_FILTER):
        return ErrorCode.invalid_config, f"{VIEW_FILTER}: a view needs a filter expression"
    extra = sorted(set(overrides) - set(VIEW_KEYS))
    if extra:
        return ErrorCode.invalid_config, (f"{extra[0]}: a view takes only {VIEW_OF} and "
                                          f"{VIEW_FILTER}; set it on the source")
    source = source_of(str(name))
    if source is None:
        return ErrorCode.invalid_config, f"{VIEW_OF}: topic '{name}' does not exist"
    if source.view_of is not None:
        return ErrorCode.invalid_config, (
            f"{VIEW_OF}: '{name}' is itself a view (of '{source.view_of}'); a view of a "
            f"view is not supported: view '{source.view_of}' with both filters joined by AND")
    if source.internal or str(name).startswith("__"):
        return ErrorCode.invalid_config, f"{VIEW_OF}: '{name}' is an internal topic"
    return None


def check_altered(old: dict[str, Any], new: dict[str, Any],
                  source_of: Callable[[str], Any]) -> Problem | None:
    """An AlterConfigs of a topic (whole new override set): a view keeps its
    source; a plain topic cannot become a view."""
    was = old.get(VIEW_OF)
    if not was:
        if any(k in new for k in VIEW_KEYS):
            return ErrorCode.invalid_config, (f"{VIEW_OF}: an existing topic cannot become a "
                                              "view; create the view as a new topic")
        return None
    if new.get(VIEW_OF) != was:
        return ErrorCode.invalid_config, (f"{VIEW_OF}: the source of view is fixed at "
                                          f"creation ('{was}')")
    return check_view_configs(new, source_of)


class ViewReader:
    """Filters fetched source bytes for views, with a cache of rebuilt batches."""

    def __init__(self, capacity_bytes: int = CACHE_BYTES) -> None:
        self._filters: dict[str, view_filter.Filter] = {}
        self._cache: OrderedDict[CacheKey, Rebuilt] = OrderedDict()
        self.capacity_bytes = capacity_bytes
        self.cached_bytes = 0
        self.matched: dict[str, int] = {}  # per view: records delivered
        self.filtered: dict[str, int] = {}  # per view: records taken out
        self.paused = 0  # reads stopped at the walk's bound before any record (read on)

    def compiled(self, text: str) -> view_filter.Filter:
        found = self._filters.get(text)
        if found is None:
            if len(self._filters) > 256:
                self._filters.clear()
            found = self._filters[text] = view_filter.parse(text)
        return found

    def filter_records(self, view: str, text: str, source: str, index: int,
                       data: bytes, budget: list[int] | None = None,
                       cold: list[Cold] | None = None) -> bytes:
        """Every batch of ``data`` read from the source, rebuilt (the empty
        ones too), or nothing if the work ends (``_walk``) before any batch
        with a record or a control batch."""
        if not data:
            return data
        buf = memoryview(data)
        batches = ((header, _bytes_reader(buf, pos, header.size))
                   for pos, header in iter_headers(data))  # a cut trailing batch is left out
        walk = self._walk(view, text, source, index, batches, budget, cold)
        if walk.cut and not walk.out:
            return b""  # empty batches only: asked again, from cached work
        return b"".join(walk.empties + walk.out)

    def answer(self, asked: Asked, log: PartitionLog, where: FileSlice, budget: list[int],
               cold: list[Cold], holes: HoleReads, clock: Callable[[], float]) -> bytes:
        """The bytes a view's consumer gets for ``asked``, ``where`` the source
        range Fetch located from its offset (module docstring): only the
        batches' headers are read (``log.header_walk``); a cached batch's
        rebuilt bytes are taken as they are, a control batch and a small batch
        not cached yet are read on the loop (within ``budget``: [records,
        bytes]), and the others are left in ``cold`` for ``warm``, which reads
        them in the worker thread. The answer starts at the first batch that
        kept a record (or a control batch): the source is read past ``where``
        for it, within ``hole_reads.WALK_HEADERS`` headers, resuming where the
        last read of the same run stopped (``holes``); a run with no record up
        to ``asked.upper`` is held back, then answered."""
        key = (asked.text, asked.offset)
        note = holes.note(log, key)
        span: FileSlice | None = where
        start = asked.offset
        if note is not None:  # record-less below note[1] for this filter: resume there
            span, start = None, int(note[1])
        walk = self._walk(asked.view, asked.text, asked.source, asked.index,
                          _source_batches(log, span, start, asked.upper), budget, cold,
                          asked.offset, asked.limit, WALK_HEADERS, eager=False)
        if walk.out:
            return b"".join(walk.out)
        if walk.offset < 0 and note is None:
            return b""  # nothing rebuilt: all left for the worker thread, or the log changed
        last = _record_less(walk.empties[-1]) if walk.empties else bytes(
            note[2] if note else b"")
        offset = walk.offset if walk.offset >= 0 else start
        if walk.cut or walk.visited >= WALK_HEADERS:  # work left: read again from here on
            holes.walked(log, key, offset, None, last)
            if not walk.cut:
                self.paused += 1  # at the walk's bound: the Fetch reads on at once
            return b""
        if holes.walked(log, key, offset, clock, last):
            return b""  # held at the end of the run: the consumer waits where it is
        # as stored: the run's last batches (a gap before them), the consumer passes it
        return b"".join(_last_within(walk.empties, asked.limit)) or last

    def _walk(self, view: str, text: str, source: str, index: int,
              batches: Iterable[tuple[BatchHeader, Reader]], budget: list[int] | None,
              cold: list[Cold] | None, since: int = -1, limit: int = 1 << 62,
              bound: int = 1 << 62, eager: bool = True) -> Walk:
        """Rebuild ``batches`` in order until ``limit`` bytes are answered
        (at least one batch past the empty ones), ``bound`` headers are looked
        at or the work ends; a batch whose kept records all lie below
        ``since`` (the fetch offset: the client drops them) counts as empty.
        ``budget`` ([records] or [records, bytes]) is the
        filtering work left in this Fetch, spent here: once it is gone the
        walk ends (after one batch). With ``cold``, a batch not cached of more
        than ``INLINE_RECORDS`` records or ``INLINE_BYTES`` bytes, or any once
        the budget is gone, ends it instead, and it and the batches not cached
        after it (``max(limit, WARM_BYTES)`` bytes at most) are added there,
        for ``warm`` — unless a batch was answered already and not ``eager``:
        a Fetch's answer does not wait for work it does not answer."""
        flt = self.compiled(text)
        walk = Walk([], [])
        gathered = 0
        for header, read in batches:
            walk.visited += 1
            if walk.cut:  # past a batch left cold: only gathering the others for the thread
                key = (text, source, index, header.base_offset, header.crc)
                if not header.is_control and key not in self._cache and cold is not None:
                    cold.append((key, flt, read))
                    gathered += header.size
                if gathered >= max(limit, WARM_BYTES) or walk.visited >= bound:
                    break
                continue
            rebuilt = None
            if header.is_control:
                data, moves = bytes(read()), True
            else:
                key = (text, source, index, header.base_offset, header.crc)
                rebuilt = self._cache.get(key)
                if rebuilt is None:
                    if cold is not None and goes_cold(header, budget):
                        if walk.out and not eager:
                            break  # answered without it: the next Fetch has it warmed
                        cold.append((key, flt, read))  # for a worker thread
                        walk.cut, gathered = True, header.size
                        continue  # the walk ends before it; the rest may be cold too
                    if budget is not None:
                        if budget[0] <= 0 and (walk.out or walk.empties):
                            walk.cut = True
                            break
                        budget[0] -= header.records_count
                        if len(budget) > 1:
                            budget[1] -= header.size
                    rebuilt = self._store(key, _rebuild(flt, memoryview(read())))
                else:
                    self._cache.move_to_end(key)
                data, moves = rebuilt[0], _reaches(header, rebuilt, since)
            if walk.out and walk.size + len(data) > limit:
                break  # the answer is full
            if rebuilt is not None:
                self.count(view, rebuilt)
            if walk.out or moves:
                walk.out.append(data)
                walk.size += len(data)
            else:
                walk.empties.append(data)
            walk.offset = header.base_offset + header.last_offset_delta + 1
            if walk.visited >= bound:
                break
        return walk

    def cached(self, key: CacheKey) -> Rebuilt | None:
        """The rebuilt batch of ``key`` if it is in the cache."""
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
        return found

    def rebuild(self, key: CacheKey, flt: view_filter.Filter, whole: memoryview) -> Rebuilt:
        """Filter ``whole`` here (a small batch) into the cache."""
        return self._store(key, _rebuild(flt, whole))

    def count(self, view: str, rebuilt: Rebuilt) -> None:
        """A rebuilt batch served to a view's consumer or share group (the
        view's counters)."""
        self.matched[view] = self.matched.get(view, 0) + rebuilt[1]
        self.filtered[view] = self.filtered.get(view, 0) + rebuilt[2]

    def store(self, key: CacheKey, rebuilt: Rebuilt) -> Rebuilt:
        """Keep ``rebuilt`` (made off the loop) unless it is there already."""
        found = self._cache.get(key)
        return found if found is not None else self._store(key, rebuilt)

    def _store(self, key: CacheKey, rebuilt: Rebuilt) -> Rebuilt:
        self._cache[key] = rebuilt
        self.cached_bytes += _cost(rebuilt)
        while self.cached_bytes > self.capacity_bytes:
            self.cached_bytes -= _cost(self._cache.popitem(last=False)[1])
        return rebuilt

    async def warm(self, cold: list[Cold]) -> None:
        """Read and filter the ``cold`` batches in a worker thread, into the
        cache; a batch no longer there as it was seen (the log truncated,
        cleaned or deleted meanwhile) is left out."""
        rebuilt = await run_cpu(
            lambda: [_read_and_rebuild(key, flt, read) for key, flt, read in cold])
        for (key, _flt, _read), done in zip(cold, rebuilt, strict=True):
            if done is not None and key not in self._cache:
                self._store(key, done)


@dataclass(frozen=True, slots=True)
class Asked:
    """What a Fetch asks of one partition of a view: its name and filter,
    the source partition, the fetch offset, the partition's byte limit and
    the offset reads stop at (high watermark or last stable offset)."""

    view: str
    text: str
    source: str
    index: int
    offset: int
    limit: int
    upper: int


@dataclass(slots=True)
class Walk:
    """What ``ViewReader._walk`` rebuilt: the batches without a record before
    the first with one (or a control batch), and those from it on."""

    empties: list[bytes]
    out: list[bytes]
    size: int = 0  # bytes in out
    cut: bool = False  # ended by a batch left for the worker thread, or the budget
    visited: int = 0  # headers looked at
    offset: int = -1  # the offset after the last batch rebuilt (-1: none)


CacheKey = tuple[str, str, int, int, int]  # filter, source, partition, base offset, CRC
# the batch, records kept, records taken out, the kept records' offset deltas
# (None: every record kept)
Rebuilt = tuple[bytes, int, int, "array[int] | None"]
Reader = Callable[[], "bytes | memoryview"]  # the bytes of one whole batch
# a batch left for ``warm``: its cache key, the filter, what reads its bytes
# (a view of immutable bytes read, or a positional read of the log file)
Cold = tuple[CacheKey, view_filter.Filter, Reader]


def _bytes_reader(buf: memoryview, pos: int, size: int) -> Reader:
    return lambda: buf[pos:pos + size]


def file_reader(f: StoredFile, pos: int, size: int) -> Reader:
    return lambda: f.pread(size, pos)


def _reaches(header: BatchHeader, rebuilt: Rebuilt, since: int) -> bool:
    """Whether ``rebuilt`` kept a record at ``since`` or past it."""
    if not rebuilt[1]:
        return False
    if header.base_offset + header.last_offset_delta < since:
        return False
    deltas = rebuilt[3]
    last = deltas[-1] if deltas is not None else header.last_offset_delta
    return header.base_offset + last >= since


def _source_batches(log: PartitionLog, where: FileSlice | None, offset: int,
                    upper: int) -> Iterator[tuple[BatchHeader, Reader]]:
    """The source's batches from ``where`` (or from ``offset`` if None), then
    on below ``upper`` segment by segment, their headers only read."""
    while True:
        if where is None:
            try:
                where = log.locate(offset, WHOLE, upper)
            except (OSError, OffsetOutOfRange):
                return
            if where is None:
                return  # the read's limit
        before = offset
        f = where.file
        for pos, header in header_walk.headers(f, where.position, where.length):
            yield header, file_reader(f, pos, header.size)
            offset = header.base_offset + header.last_offset_delta + 1
        if offset <= before:
            return  # nothing whole there (truncated meanwhile)
        where = None


def _record_less(batch: bytes) -> bytes:
    """``batch`` without its records (all below the fetch offset if any: a
    note keeps a header's worth, whatever the batch held)."""
    header = parse_header(batch)
    return batch if not header.records_count else record_less_batch(header, [])


def _last_within(batches: list[bytes], limit: int) -> list[bytes]:
    """The last of ``batches`` whose bytes add up to ``limit`` at most (the
    last one at least)."""
    size = 0
    for i in range(len(batches) - 1, -1, -1):
        size += len(batches[i])
        if size > limit and i < len(batches) - 1:
            return batches[i + 1:]
    return batches


def goes_cold(header: BatchHeader, budget: list[int] | None) -> bool:
    """A batch not cached that the loop leaves to the worker thread."""
    if header.records_count > INLINE_RECORDS or header.size > INLINE_BYTES:
        return True
    return budget is not None and (budget[0] <= 0 or (len(budget) > 1 and budget[1] <= 0))


def _cost(rebuilt: Rebuilt) -> int:
    deltas = rebuilt[3]
    return len(rebuilt[0]) + (4 * len(deltas) if deltas is not None else 0)


def rebuild_batch(flt: view_filter.Filter, whole: memoryview) -> Rebuilt:
    """``whole`` filtered by ``flt`` (any thread)."""
    return _rebuild(flt, whole)


def _read_and_rebuild(key: CacheKey, flt: view_filter.Filter, read: Reader) -> Rebuilt | None:
    """In the worker thread: the batch read and filtered, or None if what is
    read is not the batch ``key`` names any more (or cannot be read)."""
    try:
        whole = memoryview(read())
        if len(whole) < HEADER_SIZE:
            return None
        header = parse_header(whole)
        if (header.base_offset, header.crc) != key[3:] or header.size != len(whole):
            return None
    except (OSError, ValueError, BatchError):
        return None
    return _rebuild(flt, whole)


def _rebuild(flt: view_filter.Filter, whole: memoryview) -> Rebuilt:
    """``whole`` with the records ``flt`` does not match taken out: each
    record's layout read with in-line varints (``record_scan.layouts``), its
    headers read only to be matched, the kept records' bytes joined; the kept
    records' offset deltas go with it (share groups learn a view's records
    from them)."""
    try:
        header = parse_header(whole)
        payload = bytes(decompress(header.compression, whole[HEADER_SIZE:]))
        layouts = record_scan.layouts(payload, header.records_count)
        headers_at, matches = record_scan.headers_at, flt.matches
        kept = [lay for lay in layouts if matches(headers_at(payload, lay[5], lay[1])[0])]
    except (BatchError, CompressionError):  # never stored so; pass it on as it is
        return bytes(whole), 0, 0, array("i")
    if len(kept) == len(layouts):
        deltas = None if header.records_count == header.last_offset_delta + 1 else array(
            "i", [lay[3] for lay in kept])
        return bytes(whole), len(kept), 0, deltas
    return (record_scan.splice_spans(whole, header, payload, [(lay[0], lay[1]) for lay in kept]),
            len(kept), len(layouts) - len(kept), array("i", [lay[3] for lay in kept]))
