"""Deduplication windows: record ids and the per-partition index (docs/extensions.md).

Theory of operation
-------------------
A topic with ``kc.dedup.window.ms`` > 0 stores a record only if its *id* was
not stored in the same partition within the window; a duplicate becomes a
hole in its batch (rule 4) and its producer gets success.

Record ids (``record_id``), by ``kc.dedup.by``:

* ``header`` — the bytes of header ``kc-dedup-id``. A record without it is
  never a duplicate. An empty, null or over-long value (``DEDUP_ID_MAX_BYTES``)
  or the header given twice raises ``HeaderError`` naming the header and the
  value: the produce path answers INVALID_RECORD and stores nothing (rule 5).
* ``content`` — a 16-byte BLAKE2b digest of the key and the value, each
  length-prefixed (int64, -1 for null), so no two (key, value) pairs meet by
  concatenation and a null key or value differs from an empty one.

``DedupIndex`` (one topic-partition) maps id -> the append time of its stored
copy, in insertion order (an ``OrderedDict``: O(1) amortised per id):

* ``check(ids, now_ms)`` — which records of an incoming batch are duplicates:
  an id stored less than ``window_ms`` before ``now_ms`` (or the clock, if
  later; see below), or an id seen earlier in the same batch (the first copy
  is kept, later copies are duplicates). Read-only.
* ``add(ids, append_ms, base_offset)`` — the ids of the records actually
  stored in a batch, with its append time. The window runs from the *first
  stored copy*, as in SQS: a dropped duplicate does not extend it; once it
  has passed, the next copy is stored again and opens a new window (an id
  stored twice inside its window — a log written while dedup was off — keeps
  the later time: ids are kept longer, never shorter).
  Forgetting happens here only: the index's clock (the largest append time
  added) expires ids with ``stored + window_ms <= clock``, oldest first; then,
  above ``max_entries``, the oldest ids are *evicted* and counted in
  ``evictions``. An evicted id is forgotten inside its window, so a later
  copy is let through: the broker warns when the counter moves (raise
  ``kc.dedup.max.entries``).

Replicated state (rule 2; docs/architecture.md, Replication). The index is never written anywhere of
its own: the partition log holds every stored record, hence its id, so a
leader builds its index by ``add``-ing the stored batches of its log in
order (``broker.dedup_windows``). Expiry and eviction happen only in ``add``
and depend only on the ids and times added, and ``forget`` follows abort
markers, which are in the log too.

Why no duplicate passes across failover:

1. The leader decides at append time with its index, which holds every
   batch of its log: the committed ones and its own appended-but-uncommitted
   ones. The host runs ``check``, the append and ``add`` for one partition
   without another append in between (two concurrent batches would both
   pass); it does so after the idempotent-producer check, so a retried batch
   is answered from producer state and never reaches the index.
2. A new leader's log is the committed prefix plus its own tail (Raft
   leader completeness; the truncated suffix of a deposed leader is gone
   from every log that will ever commit). It rebuilds its index from that
   log, so the index holds every id that is, or may still become, stored in
   the partition.
3. An id whose batch was truncated away was never committed: its producer
   had no success and retries, and the retry is stored — once. An id whose
   batch survived in the new leader's tail is a duplicate there, so the
   retry becomes a hole and gets success: the record is stored once either
   way.

A rebuild must never date a batch earlier than its append (an id would be
forgotten inside its window): the log holds no broker clock for a CreateTime
batch, so the host dates it from above (``broker.dedup_windows``). ``check``
measures at the later of the broker's ``now_ms`` and the index's clock, so
time never goes back in a partition.

A change of ``kc.dedup.by``, ``kc.dedup.window.ms`` or ``kc.dedup.max.entries``
is applied by a fresh rebuild from the log (ids of the other kind never match).

Transactions: the ids of a transactional batch count from its append, as its
offsets do — the outcome is not known then (a copy arriving while the
transaction is open is a duplicate). ``forget`` takes out the ids of a
transaction that aborted, so a copy sent again afterwards is stored; the
host keeps the ids of each open transaction per producer and calls it at
the abort marker (``broker.dedup_windows``).

Memory (CPython 3.11, tracemalloc, 1M content ids of 16 bytes added in
batches of 100, one append time per batch): 140 bytes per id — about 49 for
the digest object, 91 for the ordered dict — so a full window of 1M ids
costs about 140 MB of heap (a little more after allocator rounding). Header
ids cost their length beyond 16.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Iterable

from kcompat.ext.delay import HeaderError

DEDUP_ID = "kc-dedup-id"
DEDUP_ID_MAX_BYTES = 256
DIGEST_BYTES = 16
BY_HEADER = "header"
BY_CONTENT = "content"
DEDUP_BY = (BY_HEADER, BY_CONTENT)
MAX_ENTRIES_DEFAULT = 100_000

Header = tuple[str, bytes | None]

_LENGTH = struct.Struct(">q")
_NO_CLOCK = -(1 << 63)


def header_id(headers: Iterable[Header]) -> bytes | None:
    """The ``kc-dedup-id`` of a record; None without it. Raises ``HeaderError``."""
    found: bytes | None = None
    seen = False
    for name, value in headers:
        if name != DEDUP_ID:
            continue
        if seen:
            raise HeaderError(DEDUP_ID, value, "given more than once")
        seen = True
        if value is None:
            raise HeaderError(DEDUP_ID, value, "has no value")
        if not value:
            raise HeaderError(DEDUP_ID, value, "must not be empty")
        if len(value) > DEDUP_ID_MAX_BYTES:
            raise HeaderError(DEDUP_ID, value[:64] + b"...",
                              f"is longer than {DEDUP_ID_MAX_BYTES} bytes ({len(value)})")
        found = bytes(value)
    return found


def content_id(key: bytes | None, value: bytes | None) -> bytes:
    """A 16-byte digest of the length-prefixed key and value."""
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for part in (key, value):
        if part is None:
            digest.update(_LENGTH.pack(-1))
        else:
            digest.update(_LENGTH.pack(len(part)))
            digest.update(part)
    return digest.digest()


def record_id(by: str, key: bytes | None, value: bytes | None,
              headers: Iterable[Header]) -> bytes | None:
    """The id of one record under ``kc.dedup.by`` = ``by`` (see the module)."""
    if by == BY_HEADER:
        return header_id(headers)
    if by == BY_CONTENT:
        return content_id(key, value)
    raise ValueError(f"kc.dedup.by={by!r}: expected one of {', '.join(DEDUP_BY)}")


class DedupIndex:
    """The ids stored in one topic-partition within the window (see the module)."""

    __slots__ = ("window_ms", "max_entries", "clock_ms", "last_offset", "evictions", "_stored")

    def __init__(self, window_ms: int, max_entries: int = MAX_ENTRIES_DEFAULT) -> None:
        if window_ms <= 0 or max_entries <= 0:
            raise ValueError(f"window_ms={window_ms}, max_entries={max_entries}: must be > 0")
        self.window_ms = window_ms
        self.max_entries = max_entries
        self.clock_ms = _NO_CLOCK  # the largest append time added
        self.last_offset = -1  # base offset of the last batch added
        self.evictions = 0  # ids forgotten inside their window (max_entries)
        self._stored: OrderedDict[bytes, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._stored)

    def stored_ms(self, id_: bytes) -> int | None:
        """When the kept copy of ``id_`` was stored (it may have expired)."""
        return self._stored.get(id_)

    def entries(self) -> list[tuple[bytes, int]]:
        """(id, stored time), oldest first."""
        return list(self._stored.items())

    def check(self, ids: Iterable[bytes | None], now_ms: int) -> list[bool]:
        """For each record of an incoming batch: is it a duplicate?"""
        now_ms = max(now_ms, self.clock_ms)  # time never goes back in a partition
        out: list[bool] = []
        in_batch: set[bytes] = set()
        for id_ in ids:
            if id_ is None:
                out.append(False)
                continue
            stored = self._stored.get(id_)
            out.append(id_ in in_batch
                       or (stored is not None and now_ms - stored < self.window_ms))
            in_batch.add(id_)
        return out

    def add(self, ids: Iterable[bytes | None], append_ms: int, base_offset: int = -1) -> bool:
        """The ids of the records stored in a batch appended at ``append_ms``
        (None entries are skipped). False for a batch at or below
        ``last_offset`` (a replay of what is already known)."""
        if base_offset >= 0:
            if base_offset <= self.last_offset:
                return False
            self.last_offset = base_offset
        if append_ms > self.clock_ms:
            self.clock_ms = append_ms
            self._expire()
        stored = self._stored
        for id_ in ids:
            if id_ is None:
                continue
            first = stored.get(id_)
            if first is None:
                stored[id_] = append_ms
            else:  # its window had passed: a new one from this copy (never moved back)
                stored[id_] = max(first, append_ms)
                stored.move_to_end(id_)
        self._evict()
        return True

    def forget(self, ids: Iterable[bytes | None]) -> None:
        """Take ``ids`` out (their stored copies were aborted)."""
        for id_ in ids:
            if id_ is not None:
                self._stored.pop(id_, None)

    def _expire(self) -> None:
        stored, horizon = self._stored, self.clock_ms - self.window_ms
        while stored:
            id_, at = next(iter(stored.items()))
            if at > horizon:
                return  # ids behind a later one (leader clocks disagreed) wait for it
            stored.popitem(last=False)

    def _evict(self) -> None:
        stored, horizon = self._stored, self.clock_ms - self.window_ms
        while len(stored) > self.max_entries:
            _, at = stored.popitem(last=False)
            if at > horizon:
                self.evictions += 1
