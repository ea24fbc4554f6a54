"""Reading a partition's log for its share-partitions (KIP-932).

Theory of operation
-------------------
A share-partition's machine (``group.share_partition``) learns records as it
offers them: ``records_from`` walks the log from the machine's read offset in
whole batches below the high watermark (or last stable offset), reading only
their headers (``log.header_walk``), and yields (offset, message group) per
record. A batch whose every offset holds a record and whose records need not
be looked at (no message groups, no view filter) is never read: its offsets
are counted out. A view's batch is learnt from the kept offsets of its
rebuilt batch in the view's cache (``views``: the same cache its Fetch
readers use, so a batch is filtered once for both), a keyed read's from its
records' headers (``wire.record_scan``: only ``kc-group`` and the filter's),
kept for the last ``DECODED_BATCHES`` batches, since consecutive
acquisitions take records of the same batches. Records of aborted
transactions (read_committed) and those a view's filter does not match are
left out: gaps, archived unseen.

Work on the event loop is bounded as a view's Fetch is: before an
acquisition, ``readable_end`` walks the headers of the batches it may look
at and stops the read before the first one not cached that is large (more
than ``views.INLINE_RECORDS`` records or ``INLINE_BYTES`` bytes: a 1 MB
batch of 10,000 records took ~70 ms to filter) or beyond the budget
(``views.WORK_RECORDS``, ``WORK_BYTES``); the host's ``warm`` first has those
read and looked at in a worker thread (``warm``, which drops a batch that is
no longer the one seen: truncated, cleaned or deleted meanwhile), and the
acquisition then reads up to where the cache reaches — never past a batch it
did not look at, so no record there is taken for a gap.

``batches_for`` then serves the whole log batches holding the acquired
offsets; for a view their rebuilt form from the cache (only the headers of
the source's batches are read).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kcompat.broker.loop.offload import run_cpu
from kcompat.broker.storage.views import (
    WORK_BYTES,
    WORK_RECORDS,
    CacheKey,
    Reader,
    Rebuilt,
    ViewReader,
    file_reader,
    goes_cold,
    rebuild_batch,
)
from kcompat.ext.view_filter import Filter
from kcompat.group.share_partition import AcquiredRecords, SharePartition
from kcompat.log import header_walk
from kcompat.log.partition_log import FileSlice
from kcompat.log.store import StoredFile
from kcompat.wire import batch as wbatch
from kcompat.wire import record_scan

if TYPE_CHECKING:
    from kcompat.broker.storage.partition import Partition

GROUP_HEADER = "kc-group"  # the message group of kc.share.ordering=message-group
_GROUP_NAMES = frozenset((GROUP_HEADER,))
DECODED_BATCHES = 64  # batches whose records' offsets and groups are kept decoded
COLD_BATCHES = 64  # batches one acquisition hands to the worker thread at most
WALK_BYTES = 1 << 30  # a located range is walked by its headers: no read limit


class ShareReads:
    """The log reads of the share-partitions, with their batch cache."""

    def __init__(self, views: ViewReader) -> None:
        self.views = views
        self._decoded: OrderedDict[tuple[str, int, int, int, bool, str | None],
                                  list[tuple[int, bytes | None]]] = OrderedDict()

    def records_from(self, part: Partition, start: int, end: int, upper: int, keyed: bool,
                     committed: bool = False, flt: Filter | None = None
                     ) -> Iterator[tuple[int, bytes | None]]:
        """(offset, message group) of every record in [start, end) — read
        from whole batches below ``upper`` (a batch boundary: the high
        watermark or last stable offset), so none in that range is missed;
        the group is header ``kc-group``, else the key, when ``keyed``. With
        ``committed`` (``share.isolation.level=read_committed``) the records
        of aborted transactions are left out: gaps, archived unseen; so are
        the records a filtered view's ``flt`` does not match. Only batch
        headers are read for batches whose records are counted out or
        cached; ``end`` comes from ``readable_end`` so no batch looked at
        here is a large one not cached."""
        for f, pos, header in self._looked_at(part, start, end, upper, committed):
            if flt is None and not keyed and (
                    header.records_count == header.last_offset_delta + 1):
                # every offset of the batch holds a record: no need to read it
                for offset in range(max(start, header.base_offset),
                                    min(end, header.next_offset)):
                    yield offset, None
                if header.next_offset >= end:
                    return
                continue
            for offset, group in self._batch_records(part, f, pos, header, keyed, flt):
                if offset >= end:
                    return
                if offset >= start:
                    yield offset, group

    def plan(self, machine: SharePartition, part: Partition, meta: Any, committed: bool,
             cold: list[ColdBatch]
             ) -> tuple[int, int, int, Filter | None, tuple[str, str] | None]:
        """(start, end, upper, the view's filter, the view (name, filter))
        of what ``machine`` may read of ``part`` now (``meta``: the topic's
        metadata); ``end`` stops before a batch left ``cold``."""
        upper = part.last_stable_offset if committed else part.high_watermark
        machine.advance_log_start(part.log.log_start_offset)
        end = min(upper, machine.read_limit_offset())
        start = machine.read_offset
        view = (meta.name, str(meta.configs["kc.view.filter"])) if (
            meta is not None and meta.view_of is not None) else None
        flt = self.views.compiled(view[1]) if view else None
        if start < end:
            end = self.readable_end(part, start, end, upper,
                                    machine.config.ordering_message_group, committed, flt, cold)
        return start, end, upper, flt, view

    def byte_end(self, part: Partition, first: int, committed: bool, limit_bytes: int,
                 min_one: bool, cap_records: int) -> int | None:
        """Where a fetch starting at ``first`` whose byte limit is
        ``limit_bytes`` stops: after the last whole batch within the limit
        (at least one with ``min_one``, Kafka's soft limit); None when the
        limit does not bind before the log's end or ``cap_records`` records
        (what the acquisition can take at most). Batch headers only."""
        upper = part.last_stable_offset if committed else part.high_watermark
        if first >= upper:
            return None
        used = records = 0
        end = first
        for _f, _pos, header in self._looked_at(part, first, upper, upper, committed):
            if used + header.size > limit_bytes and not (min_one and end == first):
                return end
            used += header.size
            records += header.records_count
            end = header.next_offset
            if records >= cap_records:
                return None
        return None

    def soft_end(self, part: Partition, first: int, max_records: int, committed: bool
                 ) -> int | None:
        """ShareAcquireMode batch_optimized (ShareFetch v1's only mode, v2's
        default; KIP-1206): an acquisition from ``first`` whose record limit
        is ``max_records`` runs to the end of the log batch holding offset
        ``first + max_records - 1``, as Kafka's does (batches of 10, limit 7:
        10). That end, or None when it adds nothing. Headers only."""
        if max_records <= 0:
            return None
        offset = first + max_records - 1
        upper = part.last_stable_offset if committed else part.high_watermark
        for _f, _pos, header in self._looked_at(part, offset, offset + 1, upper, committed):
            if header.base_offset <= offset < header.next_offset:
                return header.next_offset if header.next_offset - first > max_records else None
        return None

    def readable_end(self, part: Partition, start: int, end: int, upper: int, keyed: bool,
                     committed: bool, flt: Filter | None, cold: list[ColdBatch]) -> int:
        """How far ``records_from`` may read now: the base offset of the
        first batch in [start, end) whose records would be looked at in
        full on the loop beyond ``views.WORK_RECORDS`` records, or of more
        than ``views.INLINE_RECORDS`` records or ``INLINE_BYTES`` bytes,
        else ``end``; that batch and the batches not cached after it go to
        ``cold``, for ``warm`` (a worker thread)."""
        if flt is None and not keyed:
            return end
        budget = [WORK_RECORDS, WORK_BYTES]
        cut = end
        for f, pos, header in self._looked_at(part, start, end, upper, committed):
            if header.base_offset >= end or len(cold) >= COLD_BATCHES:
                break
            if (flt is None and header.records_count == header.last_offset_delta + 1
                    and not keyed) or self._cached(part, header, keyed, flt):
                continue
            if cut == end and not goes_cold(header, budget):
                budget[0] -= header.records_count
                budget[1] -= header.size
                continue
            cut = min(cut, header.base_offset)
            cold.append((part.topic, part.index, header, keyed, flt,
                         file_reader(f, pos, header.size)))
        return cut

    async def warm(self, cold: list[ColdBatch]) -> None:
        """Read and look at the ``cold`` batches in a worker thread, into
        the caches (a batch no longer there as it was seen is left out)."""
        done = await run_cpu(lambda: [_look(*c) for c in cold])
        for (topic, index, header, keyed, flt, _read), result in zip(cold, done, strict=True):
            if result is None:
                continue
            rebuilt, found = result
            if rebuilt is not None and flt is not None:
                self.views.store(_view_key(flt, topic, index, header), rebuilt)
            if found is not None:
                self._keep((topic, index, header.base_offset, header.crc, keyed,
                            flt.text if flt is not None else None), found)

    def _looked_at(self, part: Partition, start: int, end: int, upper: int, committed: bool
                   ) -> Iterator[tuple[StoredFile, int, wbatch.BatchHeader]]:
        """(file, position, header) of the data batches from the one holding
        ``start`` below ``upper`` whose records may be offered (not those of
        aborted transactions), reading their headers only."""
        aborted = part.log.aborted_transactions(start, upper) if committed else []
        offset = start
        while offset < min(end, upper):
            where = part.log.locate(offset, WALK_BYTES, upper)
            if where is None:
                return
            walked = False
            for pos, header in header_walk.headers(where.file, where.position, where.length):
                walked = True
                offset = header.next_offset
                if header.is_control:
                    continue
                if aborted and header.is_transactional and any(
                        a.producer_id == header.producer_id
                        and a.first_offset <= header.base_offset <= a.last_offset
                        for a in aborted):
                    continue
                yield where.file, pos, header
                if offset >= end:
                    return
            if not walked:
                return

    def _cached(self, part: Partition, header: wbatch.BatchHeader, keyed: bool,
                flt: Filter | None) -> bool:
        if keyed:
            return (part.topic, part.index, header.base_offset, header.crc, True,
                    flt.text if flt is not None else None) in self._decoded
        assert flt is not None
        return self.views.cached(_view_key(flt, part.topic, part.index, header)) is not None

    def _batch_records(self, part: Partition, f: StoredFile, pos: int,
                       header: wbatch.BatchHeader, keyed: bool,
                       flt: Filter | None = None) -> list[tuple[int, bytes | None]]:
        """(offset, message group) of a batch's records (those ``flt``
        matches): a view's from the kept offsets of its cached rebuilt batch,
        a keyed read's from its records' headers, kept while the batch is
        among the last few read (consecutive acquisitions take records of
        the same batches); a batch not cached is read here."""
        base = header.base_offset
        if not keyed and flt is not None:
            key = _view_key(flt, part.topic, part.index, header)
            rebuilt = self.views.cached(key)
            if rebuilt is None:
                rebuilt = self.views.rebuild(key, flt, memoryview(f.pread(header.size, pos)))
            return _kept_offsets(header, rebuilt)
        # the CRC tells a batch from another one at its offset after a truncation
        cache_key = (part.topic, part.index, base, header.crc, keyed,
                     flt.text if flt is not None else None)
        found = self._decoded.get(cache_key)
        if found is not None:
            self._decoded.move_to_end(cache_key)
            return found
        found = _scan(memoryview(f.pread(header.size, pos)), keyed, flt)
        self._keep(cache_key, found)
        return found

    def _keep(self, cache_key: tuple[str, int, int, int, bool, str | None],
              found: list[tuple[int, bytes | None]]) -> None:
        self._decoded[cache_key] = found
        while len(self._decoded) > DECODED_BATCHES:
            self._decoded.popitem(last=False)

    def batches_for(self, part: Partition, ranges: list[AcquiredRecords],
                    view: tuple[str, str] | None = None) -> bytes:
        """The whole log batches holding the acquired offsets, in offset
        order; for a filtered ``view`` (name, filter) with the records it
        does not match taken out (``views``: the rebuilt batches cached when
        the records were learnt, only their headers read here)."""
        out: list[bytes] = []
        upper = part.high_watermark
        done = -1  # the batches served end here: a range within them is served
        for r in sorted(ranges, key=lambda a: a.first_offset):
            offset = max(r.first_offset, done)
            while offset <= r.last_offset:
                where = part.log.locate(offset, 1, upper)  # the batch holding offset
                if where is None:
                    break
                header = wbatch.parse_header(where.file.pread(wbatch.HEADER_SIZE,
                                                              where.position))
                if view is None:
                    out.append(where.file.pread(header.size, where.position))
                else:
                    out.append(self._view_batch(part, view, where, header))
                offset = done = header.next_offset
        return b"".join(out)

    def _view_batch(self, part: Partition, view: tuple[str, str], where: FileSlice,
                    header: wbatch.BatchHeader) -> bytes:
        flt = self.views.compiled(view[1])
        key = _view_key(flt, part.topic, part.index, header)
        rebuilt = self.views.cached(key)
        if rebuilt is None:  # evicted since it was learnt: filtered again
            rebuilt = self.views.rebuild(key, flt, memoryview(
                where.file.pread(header.size, where.position)))
        self.views.count(view[0], rebuilt)
        return rebuilt[0]


# a batch left for ``ShareReads.warm``: topic, partition, its header, keyed, the
# view's filter, what reads its bytes
ColdBatch = tuple[str, int, wbatch.BatchHeader, bool, "Filter | None", Reader]


def _view_key(flt: Filter, topic: str, index: int, header: wbatch.BatchHeader) -> CacheKey:
    return (flt.text, topic, index, header.base_offset, header.crc)


def _kept_offsets(header: wbatch.BatchHeader, rebuilt: Rebuilt
                  ) -> list[tuple[int, bytes | None]]:
    base, deltas = header.base_offset, rebuilt[3]
    if deltas is None:
        return [(o, None) for o in range(base, header.next_offset)]
    return [(base + d, None) for d in deltas]


def _scan(whole: memoryview, keyed: bool, flt: Filter | None) -> list[tuple[int, bytes | None]]:
    """(offset, message group) of the records of ``whole`` that ``flt``
    matches, reading only the headers the filter and the message group
    need (``record_scan``, no Record objects)."""
    wanted = (flt.header_names if flt is not None else frozenset()) | (
        _GROUP_NAMES if keyed else frozenset())
    header, _payload, records = record_scan.scan(whole, wanted, with_key=keyed)
    base = header.base_offset
    found: list[tuple[int, bytes | None]] = []
    for record in records:
        if flt is not None and not flt.matches(record.headers):
            continue
        group = None
        if keyed:
            group = next((v for k, v in record.headers if k == GROUP_HEADER),
                         None) or record.key
        found.append((base + record.offset_delta, group))
    return found


def _look(topic: str, index: int, header: wbatch.BatchHeader, keyed: bool,
          flt: Filter | None, read: Reader
          ) -> tuple[Rebuilt | None, list[tuple[int, bytes | None]] | None] | None:
    """In the worker thread: a cold batch read, rebuilt for a view and
    scanned for a keyed read; None if it is no longer the batch seen."""
    try:
        whole = memoryview(read())
        if len(whole) != header.size or len(whole) < wbatch.HEADER_SIZE:
            return None
        now = wbatch.parse_header(whole)
        if (now.base_offset, now.crc) != (header.base_offset, header.crc):
            return None
        rebuilt = rebuild_batch(flt, whole) if flt is not None else None
        return rebuilt, (_scan(whole, keyed, flt) if keyed else None)
    except (OSError, ValueError):
        return None
