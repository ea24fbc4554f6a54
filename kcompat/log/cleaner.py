"""Log compaction: Kafka's log cleaner, for one partition log at a time.

Theory of operation
-------------------
A topic with ``cleanup.policy`` containing ``compact`` keeps, in the part of
its log the cleaner has reached, only the latest record of every key. Every
replica cleans its own log by the same rules (as Kafka's replicas do), so
each converges on the same records.

*What may be cleaned* (``plan``): whole non-active segments below the *first
uncleanable offset* — the lowest of the active segment's base, the high
watermark (the Raft commit index: nothing a new leader could truncate), the
last stable offset (no open transaction is decided) and the first segment
holding a record newer than ``min.compaction.lag.ms``. A pass is due when the
*dirty* part (bytes after the previous pass's end) is at least
``min.cleanable.dirty.ratio`` of the cleanable bytes, when the oldest dirty
segment is older than ``max.compaction.lag.ms``, or when a tombstone or
marker kept by an earlier pass has outlived ``delete.retention.ms``.

*A pass* (``clean``, run in a worker thread over file handles opened by
``plan``) reads the cleanable range twice. First it maps each key (a 16-byte
BLAKE2b digest) to its last offset. Then it rewrites every segment that
loses something: a record is kept if it has a key, is not part of an aborted
transaction (the aborted-transaction index) and is the latest for its key; a
tombstone (null value) and a transaction marker are kept until
``delete.retention.ms`` after the first pass that saw them (KIP-534's delete
horizon, kept here in the checkpoint rather than in the batch), and a marker
while any batch of its transaction is left (an empty one too: a replay of
producer state would open the transaction again). Kept records keep their bytes
(``record_scan.splice``): offsets, timestamps and the batch's producer
fields stay, so a batch that loses records leaves holes. A batch that loses
all of them goes, except the first batch of a leader epoch (so the epoch
cache and the Raft log's terms are the same after a restart or on a copy)
and the last batch of a producer (its idempotence state), which stay empty.
Offsets below the first uncleanable one may thus have gaps; readers and
replicas skip them as Kafka's do. A segment left empty is deleted, except
the first (it holds the log start).

*Crash safety.* New segments are written and fsynced in a scratch directory
(``cleaner.tmp``, deleted by recovery). ``install`` (on the broker's loop
thread, after checking the segments are still the log's) removes each group's
first old segment's index files and renames the group's new ``.log`` over
that segment's — the one atomic step — then, after one directory sync for
the whole pass, removes the rest of the group and moves the new indexes in.
A crash before a rename leaves the old segments; after it, the new one, with
its indexes rebuilt by recovery if they had not arrived, and the rest of its
group removed by ``recover_swap`` (the ``cleaner-swap`` manifest written
before the first rename names the groups). The checkpoint (``cleaner-checkpoint``:
the end offset and time of each pass) is written last; losing it only makes
the next pass clean again and keep tombstones longer.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kcompat.log.config import INT32_MAX, LogConfig
from kcompat.log.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    atomic_write,
    offset_path,
)
from kcompat.log.segment import LogSegment
from kcompat.log.store import FileStore, StoredFile
from kcompat.log.txn_index import AbortedTxn
from kcompat.wire.batch import HEADER_SIZE, BatchHeader, batch_length_at, parse_header
from kcompat.wire.record_scan import RawRecord, scan, splice
from kcompat.wire.records import RecordError

SCRATCH_DIR = "cleaner.tmp"
CHECKPOINT_FILE = "cleaner-checkpoint"
SWAP_FILE = "cleaner-swap"  # the groups of a swap in progress
READ_CHUNK = 1 << 20


@dataclass
class Checkpoint:
    """The passes so far: (end offset, time) oldest first, and when the oldest
    tombstone or marker a pass kept may go (-1: none kept)."""

    passes: list[tuple[int, int]] = field(default_factory=list)
    next_delete_ms: int = -1

    @property
    def cleaned_to(self) -> int:
        return max((end for end, _ in self.passes), default=0)

    def first_seen_ms(self, offset: int) -> int | None:
        """When a pass first covered ``offset`` (None: no pass yet)."""
        i = bisect_right(self.passes, offset, key=lambda p: p[0])  # per batch: no list built
        return self.passes[i][1] if i < len(self.passes) else None

    def add(self, end: int, now_ms: int, retention_ms: int) -> None:
        """Record a pass; passes a whole ``retention_ms`` old fold into one
        (every offset they cover has outlived the horizon)."""
        if end > self.cleaned_to:
            self.passes.append((end, now_ms))
        old = [p for p in self.passes if p[1] <= now_ms - retention_ms]
        if len(old) > 1:
            self.passes = [(old[-1][0], old[-1][1])] + self.passes[len(old):]

    def to_bytes(self) -> bytes:
        return json.dumps({"passes": self.passes, "next_delete_ms": self.next_delete_ms}).encode()

    @classmethod
    def load(cls, directory: Path, store: FileStore) -> Checkpoint:
        try:
            doc = json.loads(store.read(directory / CHECKPOINT_FILE))
            passes = [(int(e), int(t)) for e, t in doc["passes"]]
            return cls(sorted(passes), int(doc.get("next_delete_ms", -1)))
        except (OSError, ValueError, KeyError, TypeError):
            return cls()

    def save(self, directory: Path, store: FileStore) -> None:
        atomic_write(directory / CHECKPOINT_FILE, self.to_bytes(), store)


@dataclass
class Plan:
    """One pass over ``segments`` (non-active, wholly below ``end``)."""

    directory: Path
    config: LogConfig
    store: FileStore
    segments: list[LogSegment]
    readers: list[StoredFile]  # own handles on the segments' files, opened on the loop
    end: int
    checkpoint: Checkpoint
    epoch_starts: frozenset[int]  # batches that must stay: first of a leader epoch
    producer_lasts: frozenset[int]  # ... and last batch of a producer
    aborted: dict[int, list[tuple[int, int]]]  # producer id -> aborted (first, last)
    dirty_bytes: int
    total_bytes: int
    now_ms: int
    max_keys: int = 1 << 20  # a pass maps at most about so many keys (then cleans less)
    stop: bool = False  # set by the runtime: the broker is stopping, give up the pass


@dataclass
class Rewrite:
    olds: list[LogSegment]  # consecutive segments cleaned into one
    new: LogSegment | None  # None: every batch went and the segments are deleted


@dataclass
class Result:
    plan: Plan
    rewrites: list[Rewrite]
    end: int = 0  # the pass cleaned below this offset (a segment boundary)
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    keeps_deletes: bool = False  # a tombstone or marker stayed only for its horizon


def first_uncleanable(segments: list[LogSegment], config: LogConfig, high_watermark: int,
                      first_unstable: int | None, now_ms: int) -> int:
    end = min(segments[-1].base_offset, high_watermark)
    if first_unstable is not None:
        end = min(end, first_unstable)
    if config.min_compaction_lag_ms > 0:
        for segment in segments[:-1]:
            if segment.largest_timestamp_ms() > now_ms - config.min_compaction_lag_ms:
                end = min(end, segment.base_offset)
                break
    return end


def cleanable(segments: list[LogSegment], end: int) -> list[LogSegment]:
    """The non-active segments wholly below ``end``."""
    out = []
    for segment, after in zip(segments, segments[1:], strict=False):
        if after.base_offset > end:
            break
        out.append(segment)
    return out


def due(config: LogConfig, segments: list[LogSegment], checkpoint: Checkpoint,
        now_ms: int) -> tuple[bool, int, int]:
    """(due, dirty bytes, total bytes) of a pass over ``segments``."""
    total = sum(s.size_bytes for s in segments)
    dirty_segments = [s for s in segments if s.next_offset > checkpoint.cleaned_to]
    dirty = sum(s.size_bytes for s in dirty_segments)
    if total == 0:
        return False, 0, 0
    if 0 <= checkpoint.next_delete_ms <= now_ms:
        return True, dirty, total
    if dirty == 0:
        return False, dirty, total
    if dirty >= config.min_cleanable_dirty_ratio * total:
        return True, dirty, total
    oldest = dirty_segments[0]
    first_ts = oldest.first_batch_timestamp if oldest.first_batch_timestamp >= 0 \
        else oldest.created_ms
    return now_ms - first_ts > config.max_compaction_lag_ms, dirty, total


def aborted_by_producer(aborted: list[AbortedTxn]) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for a in aborted:
        out.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
    return out


def _is_aborted(plan: Plan, header: BatchHeader) -> bool:
    if not header.is_transactional:
        return False
    return any(first <= header.base_offset <= last
               for first, last in plan.aborted.get(header.producer_id, ()))


class PassStopped(Exception):
    """The runtime asked a running pass to stop (``Plan.stop``)."""


def _batches(reader: StoredFile, size: int,
             stop: Callable[[], bool]) -> Iterator[tuple[bytes, BatchHeader]]:
    """Every whole batch of a segment file, read a chunk at a time."""
    pos = 0
    while size - pos >= HEADER_SIZE:
        if stop():
            raise PassStopped
        chunk = reader.pread(min(READ_CHUNK, size - pos), pos)
        off = 0
        while len(chunk) - off >= HEADER_SIZE:
            length = batch_length_at(chunk, off)
            if off + length > len(chunk):
                break
            batch = chunk[off:off + length]
            yield batch, parse_header(batch)
            off += length
        if off == 0:  # one batch larger than a chunk
            length = batch_length_at(chunk, 0)
            batch = reader.pread(length, pos)
            yield batch, parse_header(batch)
            off = length
        pos += off


def _digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


def _records(batch: bytes) -> list[RawRecord] | None:
    try:
        return scan(batch, with_key=True)[2]
    except RecordError:
        return None  # kept whole: the cleaner never destroys what it cannot read


def _map_keys(plan: Plan, result: Result) -> tuple[dict[bytes, int], int]:
    """Key digest -> last offset over the dirty segments, oldest first, whole
    segments while the map holds fewer than ``max_keys``; returns the map and
    how many segments the pass may clean (all up to the last one mapped)."""
    latest: dict[bytes, int] = {}
    cleaned_to = plan.checkpoint.cleaned_to
    count = 0
    for segment, reader in zip(plan.segments, plan.readers, strict=True):
        if segment.next_offset > cleaned_to:
            if count and len(latest) >= plan.max_keys:
                break
            for batch, header in _batches(reader, segment.size_bytes, lambda: plan.stop):
                if header.is_control or _is_aborted(plan, header):
                    continue
                for record in _records(batch) or ():
                    if record.key is not None:
                        latest[_digest(record.key)] = header.base_offset + record.offset_delta
            result.bytes_read += segment.size_bytes
        count += 1
    return latest, count


def _groups(plan: Plan, count: int) -> list[list[LogSegment]]:
    """The first ``count`` segments in runs that fit one segment together (by
    their present size and offset span), as Kafka's cleaner groups them: a
    compacted log does not keep one small file per segment it ever rolled."""
    groups: list[list[LogSegment]] = []
    size = 0
    for segment in plan.segments[:count]:
        if groups and size + segment.size_bytes <= plan.config.segment_bytes and \
                segment.next_offset - 1 - groups[-1][0].base_offset <= INT32_MAX:
            groups[-1].append(segment)
            size += segment.size_bytes
        else:
            groups.append([segment])
            size = segment.size_bytes
    return groups


def clean(plan: Plan) -> Result:
    """One pass (see the module); runs in a worker thread and touches nothing
    shared but the scratch directory. Segments before the checkpoint's end
    hold one record per key already, so only the dirty ones are mapped."""
    result = Result(plan, [])
    latest, count = _map_keys(plan, result)
    result.end = plan.segments[count].base_offset if count < len(plan.segments) else plan.end
    readers = {id(s): r for s, r in zip(plan.segments, plan.readers, strict=True)}
    filter_ = _Filter(plan, latest, result)
    for group in _groups(plan, count):
        out: list[bytes] = []
        changed = len(group) > 1
        for segment in group:
            if segment.next_offset <= plan.checkpoint.cleaned_to:
                result.bytes_read += segment.size_bytes  # mapped ones were counted then
            for batch, header in _batches(readers[id(segment)], segment.size_bytes,
                                          lambda: plan.stop):
                kept = filter_.batch(batch, header)
                changed |= kept is not batch
                if kept is not None:
                    out.append(kept)
        if changed:
            result.rewrites.append(Rewrite(group, _write(plan, group, out)))
            result.bytes_written += sum(len(b) for b in out)
    return result


class _Filter:
    """What stays of each batch, in log order (the rules of the module)."""

    def __init__(self, plan: Plan, latest: dict[bytes, int], result: Result) -> None:
        self.plan = plan
        self.latest = latest
        self.result = result
        self.horizon = plan.now_ms - plan.config.delete_retention_ms
        self.txn_left: dict[int, bool] = {}  # producer id -> its open transaction kept records

    def batch(self, batch: bytes, header: BatchHeader) -> bytes | None:
        """``batch`` itself when it stays whole, a spliced copy, or None."""
        plan, result = self.plan, self.result
        seen = plan.checkpoint.first_seen_ms(header.base_offset)
        past_horizon = seen is not None and seen <= self.horizon
        must_stay = (header.base_offset in plan.epoch_starts
                     or header.base_offset in plan.producer_lasts)
        if header.is_control:
            removable = past_horizon and not self.txn_left.get(header.producer_id, False)
            self.txn_left[header.producer_id] = False
            if removable and not must_stay:
                result.records_removed += header.records_count
                return None
            result.keeps_deletes |= not removable
            return batch
        aborted = _is_aborted(plan, header)
        records = None if aborted else _records(batch)
        if records is None and not aborted:
            return batch  # unreadable: kept as it is
        kept = []
        for record in records or ():
            if record.key is None:
                continue  # a keyless record has no place in a compacted log
            offset = header.base_offset + record.offset_delta
            if self.latest.get(_digest(record.key), -1) > offset:
                continue
            if record.tombstone:
                if past_horizon:
                    continue
                result.keeps_deletes = True
            kept.append(record)
        if len(kept) == header.records_count:
            out: bytes | None = batch
        elif not kept and not must_stay:
            out = None
        else:
            out = splice(batch, header, scan(batch)[1] if kept else b"", kept)
        result.records_removed += header.records_count - len(kept)
        if header.is_transactional and out is not None:
            # even empty, a transactional batch opens its transaction again when
            # producer state is rebuilt from the log: its marker must stay
            self.txn_left[header.producer_id] = True
        return out


def _write(plan: Plan, group: list[LogSegment], batches: list[bytes]) -> LogSegment | None:
    first = group[0]
    if not batches and first is not plan.segments[0]:
        return None
    scratch = plan.directory / SCRATCH_DIR
    plan.store.make_dirs(scratch)
    new = LogSegment.create(scratch, first.base_offset, plan.config, first.created_ms, plan.store)
    for batch in batches:
        new.append([batch], parse_header(batch))
    new.fsync()
    new.close()
    return new


def install(directory: Path, segments: list[LogSegment], result: Result,
            store: FileStore) -> list[LogSegment] | None:
    """The log's new segment list with ``result`` swapped in (see the module),
    or None (nothing changed) if the log moved on since ``plan``."""
    plan = result.plan
    position = {id(s): i for i, s in enumerate(segments)}
    olds = [s for r in result.rewrites for s in r.olds]
    if any(position.get(id(s), len(segments) - 1) == len(segments) - 1 for s in olds):
        discard(directory, store)  # retention, truncation or a new leader's log: not ours now
        return None
    merged = [(r.olds[0].base_offset, [s.base_offset for s in r.olds[1:]])
              for r in result.rewrites if r.new is not None and len(r.olds) > 1]
    if merged:
        atomic_write(directory / SWAP_FILE, json.dumps(merged).encode(), store)
    scratch = directory / SCRATCH_DIR
    out: list[LogSegment | None] = list(segments)
    swapped = [r for r in result.rewrites if r.new is not None]
    for rewrite in result.rewrites:
        for old in rewrite.olds:
            old.close()
        if rewrite.new is None:  # all its batches went: nothing of it is needed
            for old in rewrite.olds:
                _remove_segment(directory, old.base_offset, store)
                out[position[id(old)]] = None
    for rewrite in swapped:  # the atomic step of each group: its new log in place
        base = rewrite.olds[0].base_offset
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            store.remove(offset_path(directory, base, suffix))
        store.rename(offset_path(scratch, base, LOG_SUFFIX), offset_path(directory, base, LOG_SUFFIX))
    store.sync_dir(directory)  # before the rest of any group goes (one sync for the pass)
    for rewrite in swapped:
        base = rewrite.olds[0].base_offset
        for old in rewrite.olds[1:]:
            _remove_segment(directory, old.base_offset, store)
            out[position[id(old)]] = None
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            store.rename(offset_path(scratch, base, suffix), offset_path(directory, base, suffix))
    store.sync_dir(directory)
    for rewrite in swapped:
        first = rewrite.olds[0]
        next_base = segments[position[id(rewrite.olds[-1])] + 1].base_offset
        reopened, ready = LogSegment.open_existing(directory, first.base_offset, plan.config,
                                                   first.created_ms, next_base,
                                                   trust_indexes=True, store=store)
        if not ready:
            reopened.recover(first.base_offset, lambda _h: None, gaps=True)
        out[position[id(first)]] = reopened
    store.remove(directory / SWAP_FILE)
    discard(directory, store)
    return [s for s in out if s is not None]


def _remove_segment(directory: Path, base: int, store: FileStore) -> None:
    """The ``.log`` first: index files without one are leftovers recovery removes."""
    store.remove(offset_path(directory, base, LOG_SUFFIX))
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        store.remove(offset_path(directory, base, suffix))


def recover_swap(directory: Path, store: FileStore) -> None:
    """Finish or forget an interrupted swap (recovery, before segments open):
    a merged segment whose new ``.log`` left the scratch directory replaced
    the first of its group, so the rest of the group goes; one still in the
    scratch directory never did, so the old segments stand."""
    try:
        merged = json.loads(store.read(directory / SWAP_FILE))
    except (OSError, ValueError):
        merged = []
    scratch = directory / SCRATCH_DIR
    for base, others in merged:
        if not store.exists(offset_path(scratch, int(base), LOG_SUFFIX)):
            for other in others:
                _remove_segment(directory, int(other), store)
    store.remove(directory / SWAP_FILE)
    discard(directory, store)


def discard(directory: Path, store: FileStore) -> None:
    """Remove the scratch directory (an abandoned pass, or recovery)."""
    scratch = directory / SCRATCH_DIR
    if store.exists(scratch):
        store.remove_tree(scratch)
