"""The pending delayed records of one partition: the schedule's index.

Theory of operation
-------------------
A delayed record is written once to its partition's schedule log (a replicated
RecordBatch v2 log, hosted like the coordinators) and stays there; this index
knows, per pending record, only its *entry* — the schedule-log offset that
holds it — its due time and its optional ``kc-schedule-id``. It is rebuilt by
replaying the schedule log in order, on every replica, so a replica that
takes over holds the same index (DESIGN §5):

* ``add(entry, due_ms, schedule_id)`` — a record was scheduled;
* ``cancel(schedule_id)`` — cancelled until due (False if unknown or already
  due and taken);
* ``delivered(entry)`` — its re-append into the partition is committed.

``due(now_ms, limit)`` lists entries whose time has come, earliest first (ties
by entry, i.e. schedule order): the leader re-appends them and then records
``delivered``. An entry stays pending until then, so a leader that fails
between the two re-delivers from the same index after failover; the
re-append itself must be idempotent (rule 3: it carries the entry as its
producer sequence).

A schedule id is scoped by the record's target (its topic-partition; one
schedule log serves several). It names at most one pending record there:
scheduling a second record with an id that is still pending replaces
nothing — both stay, and a cancellation takes the earlier one (first come,
first cancelled), as a queue user would expect from ids reused after
delivery.

Pure and deterministic: no clock, no I/O. Memory: a heap of (due, entry)
pairs plus a dict per pending entry; the far-future part of a large schedule
is the host's to page out (not done here yet).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

Target = tuple[str, int]  # topic, partition


@dataclass(frozen=True, slots=True)
class Pending:
    entry: int
    due_ms: int
    schedule_id: str | None
    target: Target | None = None
    offset: int = -1  # where the record was produced (its hole), -1 if unknown


class Schedule:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int]] = []  # (due, entry); stale pairs skipped lazily
        self._pending: dict[int, Pending] = {}
        self._by_id: dict[tuple[Target | None, str], deque[int]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, entry: int) -> bool:
        return entry in self._pending

    def add(self, entry: int, due_ms: int, schedule_id: str | None = None,
            target: Target | None = None, offset: int = -1) -> None:
        if entry in self._pending:
            return  # a replayed record: already known
        self._pending[entry] = Pending(entry, due_ms, schedule_id, target, offset)
        heapq.heappush(self._heap, (due_ms, entry))
        if schedule_id is not None:
            self._by_id.setdefault((target, schedule_id), deque()).append(entry)

    def get(self, entry: int) -> Pending | None:
        return self._pending.get(entry)

    def cancel(self, schedule_id: str, target: Target | None = None) -> Pending | None:
        """Drop the earliest pending record of ``target`` named ``schedule_id``;
        None if none."""
        key = (target, schedule_id)
        entries = self._by_id.get(key)
        while entries:
            entry = entries.popleft()
            found = self._pending.pop(entry, None)
            if found is not None:
                if not entries:
                    del self._by_id[key]
                return found
        self._by_id.pop(key, None)
        return None

    def delivered(self, entry: int) -> Pending | None:
        """Take ``entry`` out (its delivery started, or it was dropped)."""
        found = self._pending.pop(entry, None)
        if found is not None and found.schedule_id is not None:
            key = (found.target, found.schedule_id)
            entries = self._by_id.get(key)
            if entries is not None and entry in entries:
                entries.remove(entry)
                if not entries:
                    del self._by_id[key]
        return found

    def due(self, now_ms: int, limit: int = 1000) -> list[Pending]:
        """Up to ``limit`` pending records due at ``now_ms``, earliest first.
        They stay pending until ``delivered``."""
        heap = self._heap
        out: list[Pending] = []
        frontier = [(heap[0], 0)] if heap else []  # walk the heap in order, not popping
        while frontier and len(out) < limit:
            (due_ms, entry), i = heapq.heappop(frontier)
            if due_ms > now_ms:
                break
            pending = self._pending.get(entry)
            if pending is not None:  # else delivered or cancelled: skipped
                out.append(pending)
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))
        return out

    def next_due_ms(self) -> int | None:
        """When the earliest pending record is due (the host's timer)."""
        heap = self._heap
        while heap and heap[0][1] not in self._pending:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pending(self) -> list[Pending]:
        """Every pending record, earliest due first (``kcompat scheduled list``)."""
        return sorted(self._pending.values(), key=lambda p: (p.due_ms, p.entry))
