"""Filtered views (EXTENSIONS.md): validation, and Fetch answers with holes.

Theory of operation
-------------------
A view is a topic whose configs are exactly ``kc.view.of=<source>`` and
``kc.view.filter=<expression>`` (``ext.view_filter``). It owns no partition:
the metadata layer gives it its source's partition count and routes its
partitions to the source's (same Raft groups, leaders and replicas;
``controller.metadata_apply``), so Metadata, ListOffsets, OffsetForLeaderEpoch,
consumer-group offsets and leadership all work as on the source, at the same
offsets. Decisions:

* Fetch reads the source's bytes and ``filter_records`` rebuilds every data
  batch with the non-matching records taken out: same base offset,
  ``lastOffsetDelta``, producer id, epoch and sequence, fewer records (rule 4,
  what Kafka's cleaner leaves; a batch with no match stays, empty, so the
  consumer's position moves past it). Control batches and the aborted
  transactions pass unchanged; a batch cut at the end of the read is dropped
  (the client would drop it). Batches are filtered by scanning their records
  for the headers the filter names and splicing the kept ones
  (``wire.record_scan``), at most ``WORK_RECORDS`` source records per Fetch
  on the event loop (the answer ends early; the rest is filtered in a worker
  thread, below), and cached (LRU, by filter, source partition, offset and CRC;
  ``CACHE_BYTES`` in all), so several groups reading one view filter once.
  A batch of more than ``INLINE_RECORDS`` records (a producer's batch of 1
  MB holds ~10,000 small records: ~100 ms of filtering) is never filtered on
  the loop: the Fetch's answer stops before it, ``warm`` filters it and the
  batches read after it in a worker thread into the cache, and the Fetch
  reads again (the GIL is handed back to the loop every few milliseconds). A partition
  whose answer was cut short (budget or such a batch) before any record or
  control batch is answered empty rather than as empty batches only — the
  work is cached, the client asks again from the same offset — since
  librdkafka takes a set of empty batches for a message too large to fetch
  (it doubles its fetch size, then reports MSG_SIZE_TOO_LARGE).
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
  longer has) and sends the batches through ``filter_records``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.topic_config import VIEW_FILTER, VIEW_KEYS, VIEW_OF
from kcompat.ext import view_filter
from kcompat.wire import record_scan
from kcompat.wire.batch import HEADER_SIZE, BatchError, iter_headers, parse_header
from kcompat.wire.compression import CompressionError, decompress

CACHE_BYTES = 64 << 20  # rebuilt batches kept (by source partition, offset, CRC)
#: source records one Fetch filters at most (beyond its first batch): the
#: filtering runs on the event loop, so a cold read of a large view answers in
#: parts of a few milliseconds instead of stalling every other client
WORK_RECORDS = 1000
#: a batch not cached with more records than this is filtered in a worker
#: thread (``ViewReader.warm``), not on the loop
INLINE_RECORDS = 500

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
        self._cache: OrderedDict[tuple[str, str, int, int, int], _Rebuilt] = OrderedDict()
        self.capacity_bytes = capacity_bytes
        self.cached_bytes = 0
        self.matched: dict[str, int] = {}  # per view: records delivered
        self.filtered: dict[str, int] = {}  # per view: records taken out

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
        """The bytes a view's consumer gets for ``data`` read from the source;
        ``budget`` ([records]) is the filtering work left in this Fetch,
        spent here: once it is gone the answer ends (after one batch). With
        ``cold``, a batch not cached of more than ``INLINE_RECORDS`` records,
        or any once the budget is gone, ends the answer instead, and it and
        the batches not cached after it are added there, for ``warm``."""
        if not data:
            return data
        flt = self.compiled(text)
        out: list[bytes] = []
        matched = filtered = 0
        cut = controls = False
        buf = memoryview(data)
        for pos, header in iter_headers(data):  # a cut trailing batch is left out
            whole = buf[pos:pos + header.size]
            if header.is_control:
                if not cut:
                    out.append(bytes(whole))
                    controls = True
                continue
            key = (text, source, index, header.base_offset, header.crc)
            rebuilt = self._cache.get(key)
            if cut:  # past a batch left cold: only gathering the others for the thread
                if rebuilt is None and cold is not None:
                    cold.append((key, flt, whole))
                continue
            if rebuilt is None:
                if cold is not None and (header.records_count > INLINE_RECORDS or (
                        budget is not None and budget[0] <= 0)):
                    cold.append((key, flt, whole))  # for a worker thread (no copy)
                    cut = True
                    continue  # the answer ends before it; the rest may be cold too
                if budget is not None:
                    if budget[0] <= 0 and out:
                        cut = True
                        break
                    budget[0] -= header.records_count
                rebuilt = self._store(key, _rebuild(flt, whole))
            else:
                self._cache.move_to_end(key)
            out.append(rebuilt[0])
            matched += rebuilt[1]
            filtered += rebuilt[2]
        self.matched[view] = self.matched.get(view, 0) + matched
        self.filtered[view] = self.filtered.get(view, 0) + filtered
        if cut and not matched and not controls:
            return b""  # empty batches only: asked again, from cached work
        return b"".join(out)

    def _store(self, key: tuple[str, str, int, int, int], rebuilt: _Rebuilt) -> _Rebuilt:
        self._cache[key] = rebuilt
        self.cached_bytes += len(rebuilt[0])
        while self.cached_bytes > self.capacity_bytes:
            self.cached_bytes -= len(self._cache.popitem(last=False)[1][0])
        return rebuilt

    async def warm(self, cold: list[Cold]) -> None:
        """Filter the ``cold`` batches in a worker thread, into the cache."""
        rebuilt = await trio.to_thread.run_sync(
            lambda: [_rebuild(flt, memoryview(data)) for _key, flt, data in cold])
        for (key, _flt, _data), done in zip(cold, rebuilt, strict=True):
            if key not in self._cache:
                self._store(key, done)


_Rebuilt = tuple[bytes, int, int]  # the batch, records kept, records taken out
# a batch left for ``warm``: its cache key, the filter, its bytes (a view of the
# immutable bytes read)
Cold = tuple[tuple[str, str, int, int, int], view_filter.Filter, memoryview]


def _rebuild(flt: view_filter.Filter, whole: memoryview) -> _Rebuilt:
    """``whole`` with the records ``flt`` does not match taken out: each
    record's layout read with in-line varints (``record_scan.layouts``), its
    headers read only to be matched, the kept records' bytes joined."""
    try:
        header = parse_header(whole)
        payload = bytes(decompress(header.compression, whole[HEADER_SIZE:]))
        layouts = record_scan.layouts(payload, header.records_count)
        headers_at, matches = record_scan.headers_at, flt.matches
        kept = [(lay[0], lay[1]) for lay in layouts
                if matches(headers_at(payload, lay[5], lay[1])[0])]
    except (BatchError, CompressionError):  # never stored so; pass it on as it is
        return bytes(whole), 0, 0
    if len(kept) == len(layouts):
        return bytes(whole), len(kept), 0
    return (record_scan.splice_spans(whole, header, payload, kept), len(kept),
            len(layouts) - len(kept))
