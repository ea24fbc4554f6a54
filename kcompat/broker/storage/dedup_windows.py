"""Deduplication windows at a partition's leader (docs/extensions.md; ``ext.dedup`` is the core).

Theory of operation
-------------------
A topic with ``kc.dedup.window.ms`` > 0 has a ``DedupIndex`` per partition,
held by the partition's *leader* only (``Partition.dedup``). The produce path
(``append.store``) runs, after the idempotent-producer check and without an
await until the write: ``take_duplicates`` (the batch's record ids, the
duplicates among them taken out as holes — rule 4 — and counted), the write,
then ``stored`` (the ids kept, at the append time). A retried batch is
answered from producer state and never reaches the index; two batches of one
partition never interleave, so no duplicate slips between check and add.

Replicated state without a log of its own. Every stored record carries its
id, so the partition log *is* the replicated dedup state: a leader builds
its index by replaying its own log the first time it appends in a leader
epoch (``_index``: a new epoch, a changed policy, a restart). Raft's leader
completeness makes that log hold every batch that is or may still become
committed, so no id inside its window is missed — the argument of
``ext.dedup`` — provided the replay never dates a batch *earlier* than its
append. The log holds no broker clock for a CreateTime batch, so the replay
dates each batch by the mtime of its segment file (no batch of a segment was
written after it; a follower writes after its leader), or by the batch's
LogAppendTime when the topic uses it and it is earlier. After a failover or
restart an id is therefore kept *at least* its window and at most its window
plus the age of its segment's last write: never forgotten early, sometimes
remembered late (documented in docs/extensions.md terms as "the window survives
restart and failover"). Segments whose mtime lies a whole window in the past
are skipped: everything in them has expired.

Transactions: a transactional batch's ids enter the index at its append
(a copy arriving while the transaction is open is a duplicate) and are kept
per producer until its marker; an ABORT marker (``marker``, called where
the marker is written; the replay does the same with the markers in the
log) takes them out again, so the producer's next attempt is stored.

Followers keep nothing (``expire_idle``, run with the retention checks,
drops the index of a leadership that ended, and expires the ids of an idle
leader's window, which otherwise only an append would); a replay costs one
scan of the records written within the window (once per leadership), done
by ``ready`` in turns of ``REPLAY_TURN_S`` before the appends that need it
(a produce, a due delayed record) enter their no-await section: other tasks,
heartbeats and votes among them, run between the turns, and the appends of
that partition wait for the index (about 1 s per 200k ids here). ``kc.dedup.max.entries`` bounds the
index; ids evicted inside their window are counted (``evictions``) and
logged as a warning.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import trio

from kcompat.broker.config.topic_config import effective
from kcompat.broker.storage.partition import Partition
from kcompat.ext.dedup import BY_CONTENT, DEDUP_ID, DedupIndex, record_id
from kcompat.ext.delay import HeaderError
from kcompat.wire import record_scan
from kcompat.wire.batch import BatchHeader, parse_header
from kcompat.wire.record_scan import RawRecord
from kcompat.wire.records import marker_aborts

log = logging.getLogger("kcompat.dedup")
OpenIds = dict[int, list[bytes]]  # producer id -> ids its open transaction stored
REPLAY_TURN_S = 0.02  # of a replay between two checkpoints (``ready``)


@dataclass(frozen=True, slots=True)
class Policy:
    window_ms: int
    by: str
    max_entries: int
    log_append_time: bool


@dataclass(eq=False)
class PartitionDedup:
    """A leader's index and the counters the metrics read."""

    policy: Policy | None = None
    epoch: int = -1
    index: DedupIndex | None = None
    duplicates: int = 0  # records dropped as duplicates (kept across rebuilds)
    rebuilds: int = 0
    open_txns: OpenIds = field(default_factory=dict)
    building: trio.Event | None = None  # a replay in turns under way (``ready``)
    _evicted_before: int = field(default=0)

    @property
    def evictions(self) -> int:
        return self._evicted_before + (self.index.evictions if self.index else 0)

    @property
    def ids(self) -> int:
        return len(self.index) if self.index else 0


def policy(topic_configs: dict[str, Any], broker_defaults: dict[str, Any]) -> Policy | None:
    """The topic's dedup policy, or None when its window is 0 (off)."""
    window = int(topic_configs.get("kc.dedup.window.ms", 0) or 0)
    if window <= 0:
        return None
    by = str(effective("kc.dedup.by", topic_configs, broker_defaults)[0])
    max_entries = int(effective("kc.dedup.max.entries", topic_configs, broker_defaults)[0])
    log_append = effective("message.timestamp.type", topic_configs,
                           broker_defaults)[0] == "LogAppendTime"
    return Policy(window, by, max_entries, log_append)


def _index(part: Partition, pol: Policy, now_ms: int) -> DedupIndex:
    state = _state(part)
    if not _current(state, pol, part):
        _install(state, pol, part, *replay(part, pol, now_ms))
    assert state.index is not None
    return state.index


def _state(part: Partition) -> PartitionDedup:
    state: PartitionDedup | None = part.dedup
    if state is None:
        state = part.dedup = PartitionDedup()
    return state


def _current(state: PartitionDedup, pol: Policy, part: Partition) -> bool:
    return state.index is not None and state.policy == pol and state.epoch == part.leader_epoch


def _install(state: PartitionDedup, pol: Policy, part: Partition, index: DedupIndex,
             open_txns: OpenIds) -> None:
    if state.index is not None:
        state._evicted_before += state.index.evictions
    state.index, state.open_txns = index, open_txns
    state.policy, state.epoch = pol, part.leader_epoch
    state.rebuilds += 1


async def ready(part: Partition, topic_configs: dict[str, Any],
                broker_defaults: dict[str, Any], now_ms: int) -> None:
    """Build the leader's index before an append needs it, the replay cut
    into turns of ``REPLAY_TURN_S`` (other tasks run between them); appends
    of the partition wait for it here, before their no-await section."""
    pol = policy(topic_configs, broker_defaults)
    if pol is None:
        return
    state = _state(part)
    while not _current(state, pol, part) and state.building is not None:
        await state.building.wait()  # another append is building it
    if _current(state, pol, part):
        return
    state.building = building = trio.Event()
    try:
        epoch = part.leader_epoch
        rebuild = _Replay(part, pol, now_ms)
        deadline = time.monotonic() + REPLAY_TURN_S
        for _ in rebuild.steps():
            if time.monotonic() >= deadline:
                await trio.sleep(0)
                deadline = time.monotonic() + REPLAY_TURN_S
        # installed unless the leadership moved on, or an append built it meanwhile
        if part.leader_epoch == epoch and not _current(state, pol, part):
            _install(state, pol, part, rebuild.index, rebuild.open_txns)
    finally:
        state.building = None
        building.set()


def replay(part: Partition, pol: Policy, now_ms: int) -> tuple[DedupIndex, OpenIds]:
    """The index of ``part``'s log as its leader needs it, and the ids of the
    transactions still open in it (see the module), in one go."""
    rebuild = _Replay(part, pol, now_ms)
    for _ in rebuild.steps():
        pass
    return rebuild.index, rebuild.open_txns


class _Replay:
    """A replay of the log into a new index, a batch a step."""

    def __init__(self, part: Partition, pol: Policy, now_ms: int) -> None:
        self.part, self.pol, self.now_ms = part, pol, now_ms
        self.index, self.open_txns = DedupIndex(pol.window_ms, pol.max_entries), OpenIds()

    def steps(self) -> Iterator[None]:
        pol, index, open_txns = self.pol, self.index, self.open_txns
        plog = self.part.log
        segments = [(base, min(written, self.now_ms))
                    for base, written in plog.segment_written_ms()]
        horizon = self.now_ms - pol.window_ms
        live = [i for i, (_base, written) in enumerate(segments) if written > horizon]
        if not live:
            return
        bases = [base for base, _ in segments]
        start = max(segments[live[0]][0], plog.log_start_offset)
        for batch, header in plog.batches(start, plog.log_end_offset):
            if header.is_control:
                _ended(index, open_txns, header.producer_id, not marker_aborts(batch))
                continue
            written = segments[bisect_right(bases, header.base_offset) - 1][1]
            if pol.log_append_time and 0 <= header.max_timestamp < written:
                written = header.max_timestamp
            ids = _ids(pol, batch, strict=False)[2]
            index.add(ids, written, header.base_offset)
            if header.is_transactional:
                open_txns.setdefault(header.producer_id, []).extend(i for i in ids if i)
            yield


def _ended(index: DedupIndex, open_txns: OpenIds, producer_id: int, committed: bool) -> None:
    ids = open_txns.pop(producer_id, None)
    if ids and not committed:
        index.forget(ids)


_ID_HEADER = frozenset((DEDUP_ID,))
_NO_HEADER: frozenset[str] = frozenset()


def _ids(pol: Policy, batch: memoryview | bytes, strict: bool = True
         ) -> tuple[bytes, list[RawRecord], list[bytes | None]]:
    """The scanned payload, records and record ids of a batch (``ext.dedup``),
    scanning only what the id needs. A bad ``kc-dedup-id`` raises
    ``HeaderError`` when ``strict`` (a producer's batch); otherwise (the log,
    written before dedup was on; a due delayed record) its record has no id:
    never a duplicate."""
    content = pol.by == BY_CONTENT
    _h, payload, records = record_scan.scan(batch, _NO_HEADER if content else _ID_HEADER,
                                            with_body=content)
    ident = record_id if strict else _lenient_id
    return payload, records, [ident(pol.by, r.key, r.value, r.headers) for r in records]


def _lenient_id(by: str, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes | None]]) -> bytes | None:
    try:
        return record_id(by, key, value, headers)
    except HeaderError:
        return None


@dataclass(frozen=True, slots=True)
class ScannedIds:
    """``_ids`` of a batch read ahead, in a worker thread (``scan_ids``): for
    ``kc.dedup.by`` ``by``, the scan, or what it raised (raised again where
    ``take_duplicates`` would have)."""

    by: str
    scanned: tuple[bytes, list[RawRecord], list[bytes | None]] | None = None
    error: Exception | None = None


def scan_ids(pol: Policy, batch: memoryview | bytes) -> ScannedIds:
    """The ids of a producer's batch (strict), read ahead of its append: the
    per-record part of the dedup check, which needs no index. Pure."""
    return ScannedIds(pol.by, _ids(pol, batch, strict=True))


def take_duplicates(part: Partition, view: memoryview, header: BatchHeader, pol: Policy,
                    now_ms: int, strict: bool = True, ahead: ScannedIds | None = None
                    ) -> tuple[memoryview, BatchHeader, list[bytes | None]]:
    """The batch to store (duplicates taken out as holes) and the ids of its
    records. Raises ``HeaderError`` for a bad ``kc-dedup-id`` when ``strict``
    (nothing stored). ``ahead``: ``scan_ids`` of ``view`` (strict), used if
    read by the same ``kc.dedup.by``."""
    index = _index(part, pol, now_ms)
    if ahead is not None and ahead.by == pol.by and strict:
        if ahead.error is not None:
            raise ahead.error
        assert ahead.scanned is not None
        payload, records, ids = ahead.scanned
    else:
        payload, records, ids = _ids(pol, view, strict)
    duplicate = index.check(ids, now_ms)
    dropped = sum(duplicate)
    if not dropped:
        return view, header, ids
    state = part.dedup
    assert state is not None
    state.duplicates += dropped
    kept = [r for r, dup in zip(records, duplicate, strict=True) if not dup]
    hole = record_scan.splice(view, header, payload, kept)
    return (memoryview(hole), parse_header(hole),
            [i for i, dup in zip(ids, duplicate, strict=True) if not dup])


def stored(part: Partition, ids: list[bytes | None], append_ms: int,
           header: BatchHeader) -> None:
    """The ids of a batch just written (``header``: as written)."""
    state = part.dedup
    if state is None or state.index is None:
        return
    evicted = state.index.evictions
    state.index.add(ids, append_ms, header.base_offset)
    if header.is_transactional:
        state.open_txns.setdefault(header.producer_id, []).extend(i for i in ids if i)
    if state.index.evictions > evicted:
        log.warning("%s-%d: %d dedup ids forgotten inside their window: raise "
                    "kc.dedup.max.entries (%d)", part.topic, part.index,
                    state.index.evictions - evicted, state.index.max_entries)


def expire_idle(part: Partition, now_ms: int) -> None:
    """Housekeeping: free the index of a leadership that ended; forget the ids
    whose window has passed in a partition nobody appends to."""
    state: PartitionDedup | None = part.dedup
    if state is None or state.index is None:
        return
    if state.epoch != part.leader_epoch:  # the next leadership replays its log
        state._evicted_before += state.index.evictions
        state.index, state.open_txns = None, {}
        return
    state.index.add((), now_ms)  # moves the clock: what check() no longer counts goes


def marker(part: Partition | None, producer_id: int, committed: bool) -> None:
    """A transaction marker was written to ``part`` by its leader."""
    if part is None or part.dedup is None:
        return
    state: PartitionDedup = part.dedup
    if state.index is None or state.epoch != part.leader_epoch:
        return  # the next append replays the log, this marker included
    _ended(state.index, state.open_txns, producer_id, committed)
