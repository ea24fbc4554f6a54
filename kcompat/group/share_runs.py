"""The in-flight window of a share-partition as runs of records, sans-IO.

Theory of operation
-------------------
``group.share_partition`` decides; this module stores. The window
``[start, read offset)`` is covered, without holes, by *runs*: ranges of
consecutive offsets in one state with one delivery count, lock holder, lock
deadline and backoff end (Kafka's in-flight batches, which it splits into
per-offset state only when an acknowledgement cuts one). An acquisition of
500 records is one run; acknowledging it with one type changes one run;
its update is one ``StateBatch``. Runs are cut where an operation's range
starts or ends (``cut``) and joined again with equal neighbours (``mend``),
so their number follows how fragmented the state is, never how many records
it holds. A record with a message-group key is a run of its own (the key is
per record).

Timers are lazy heaps of (deadline, offset): an entry is live while the run
holding its offset is still ACQUIRED with that deadline (or AVAILABLE with
that backoff end). Every run has an entry at its first offset — pushed when
the run is made, cut off another (``cut`` pushes one for the right part) or
trimmed by the log start — so expiring the run found at an entry expires
whole runs in (deadline, offset) order, as per-record entries would.

Changes are kept as dirty *ranges* (``touch``); ``state`` writes the runs
over any ranges as ``StateBatch`` es, equal neighbours joined: the same
batches a record-by-record walk would make.

Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from enum import IntEnum


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)

Fields = tuple[RecordState, int, str | None, int, int]  # as StateBatch holds them


class Run:
    """Offsets ``first`` .. ``last`` sharing their state."""

    __slots__ = ("first", "last", "state", "count", "member", "deadline", "not_before", "key")

    def __init__(self, first: int, last: int, state: RecordState, count: int = 0,
                 member: str | None = None, deadline: int = -1, not_before: int = -1,
                 key: bytes | None = None) -> None:
        self.first, self.last, self.state, self.count = first, last, state, count
        self.member, self.deadline, self.not_before, self.key = (member, deadline,
                                                                 not_before, key)

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def fields(self) -> Fields:
        return self.state, self.count, self.member, self.deadline, self.not_before

    def copy(self, first: int, last: int) -> Run:
        return Run(first, last, self.state, self.count, self.member, self.deadline,
                   self.not_before, self.key)


def _first(run: Run) -> int:
    return run.first


class Runs:
    """The runs of a window, its timer heaps and its dirty ranges."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.runs: list[Run] = []
        self.locks: list[tuple[int, int]] = []  # heap of (deadline, offset), lazy
        self.backoffs: list[tuple[int, int]] = []  # heap of (not before, offset), lazy
        self.dirty: list[tuple[int, int]] = []  # changed ranges, unordered

    @property
    def read_offset(self) -> int:
        return self.runs[-1].last + 1 if self.runs else self.start

    def index(self, offset: int) -> int:
        """The index of the run holding ``offset``; -1 if none does."""
        if not self.runs or not self.start <= offset <= self.runs[-1].last:
            return -1
        return bisect_right(self.runs, offset, key=_first) - 1

    def at(self, offset: int) -> Run | None:
        i = self.index(offset)
        return None if i < 0 else self.runs[i]

    def touch(self, first: int, last: int) -> None:
        self.dirty.append((first, last))

    # -- timers -------------------------------------------------------------------------

    def time(self, run: Run) -> None:
        """Push the timer entry of ``run`` at its first offset, if it has one."""
        if run.state is RecordState.ACQUIRED:
            heapq.heappush(self.locks, (run.deadline, run.first))
        elif run.state is RecordState.AVAILABLE and run.not_before >= 0:
            heapq.heappush(self.backoffs, (run.not_before, run.first))

    def lock_live(self, deadline: int, offset: int) -> Run | None:
        run = self.at(offset)
        if run is None or run.state is not RecordState.ACQUIRED or run.deadline != deadline:
            return None
        return run

    def backoff_live(self, not_before: int, offset: int) -> Run | None:
        run = self.at(offset)
        if run is None or run.state is not RecordState.AVAILABLE or (
                run.not_before != not_before):
            return None
        return run

    # -- shape --------------------------------------------------------------------------

    def cut(self, offset: int) -> int:
        """Make ``offset`` (in the window or the read offset) the first of a
        run; that run's index (``len(runs)`` at the read offset)."""
        i = self.index(offset)
        if i < 0:
            return len(self.runs)
        run = self.runs[i]
        if run.first == offset:
            return i
        right = run.copy(offset, run.last)
        run.last = offset - 1
        self.runs.insert(i + 1, right)
        self.time(right)
        return i + 1

    def span(self, first: int, last: int) -> tuple[int, int]:
        """Cut the runs at ``first`` and after ``last``: the index range of
        the runs that hold exactly those offsets."""
        i = self.cut(first)
        return i, self.cut(last + 1)

    def mend(self, i: int, j: int) -> None:
        """Join equal neighbours among runs ``i - 1`` .. ``j`` (keyed runs
        stay alone)."""
        lo, hi = max(i - 1, 0), min(j, len(self.runs) - 1)
        k = hi
        while k > lo:
            left, right = self.runs[k - 1], self.runs[k]
            if (left.key is None and right.key is None and left.last + 1 == right.first
                    and left.fields() == right.fields()):
                left.last = right.last
                del self.runs[k]
            k -= 1

    def append(self, run: Run) -> None:
        """A new run at the read offset, joined to the last one if equal."""
        last = self.runs[-1] if self.runs else None
        if (last is not None and run.key is None and last.key is None
                and last.fields() == run.fields()):
            last.last = run.last
        else:
            self.runs.append(run)
            self.time(run)

    def drop_terminal_prefix(self) -> None:
        k = 0
        for run in self.runs:
            if run.state not in TERMINAL:
                break
            k += 1
        if k:
            self.start = self.runs[k - 1].last + 1
            del self.runs[:k]

    def rebuild_timers(self) -> None:
        self.locks = [(r.deadline, r.first) for r in self.runs
                      if r.state is RecordState.ACQUIRED]
        self.backoffs = [(r.not_before, r.first) for r in self.runs
                         if r.state is RecordState.AVAILABLE and r.not_before >= 0]
        heapq.heapify(self.locks)
        heapq.heapify(self.backoffs)

    # -- reading ------------------------------------------------------------------------

    def pieces(self, first: int, last: int) -> Iterator[tuple[int, int, Run]]:
        """(from, to, run) of the runs over ``first`` .. ``last``, clipped."""
        i = self.index(max(first, self.start))
        if i < 0:
            return
        for run in self.runs[i:]:
            if run.first > last:
                return
            yield max(run.first, first), min(run.last, last), run

    def take_dirty(self) -> list[tuple[int, int]]:
        """The changed ranges at or past the start, sorted and joined."""
        spans = sorted(self.dirty)
        self.dirty = []
        out: list[tuple[int, int]] = []
        for first, last in spans:
            first = max(first, self.start)
            if first > last:
                continue
            if out and first <= out[-1][1] + 1:
                if last > out[-1][1]:
                    out[-1] = (out[-1][0], last)
            else:
                out.append((first, last))
        return out

    def batches(self, spans: Iterable[tuple[int, int]]
                ) -> tuple[list[tuple[int, int, Fields]], list[tuple[int, bytes]]]:
        """The runs over ``spans`` (sorted, disjoint) as (first, last,
        fields), equal neighbours joined, and the keys of their unfinished
        records."""
        out: list[tuple[int, int, Fields]] = []
        keys: list[tuple[int, bytes]] = []
        for first, last in spans:
            for a, b, run in self.pieces(first, last):
                if run.key is not None and run.state not in TERMINAL:
                    keys.append((a, run.key))
                fields = run.fields()
                if out and out[-1][1] == a - 1 and out[-1][2] == fields:
                    out[-1] = (out[-1][0], b, fields)
                else:
                    out.append((a, b, fields))
        return out, keys


def grown_by(w: Runs, tail: Run, grown: int, taken: list[list[int]]) -> None:
    """``tail`` grew by new records from ``grown``: they changed, and were taken."""
    w.touch(grown, tail.last)
    if taken and taken[-1][1] == grown - 1 and taken[-1][2] == 1:
        taken[-1][1] = tail.last
    else:
        taken.append([grown, tail.last, 1])


def type_runs(first: int, last: int, batch_first: int, types: Sequence[int]
               ) -> Iterator[tuple[int, int, int]]:
    """``first`` .. ``last`` of an acknowledgement batch starting at
    ``batch_first`` as ranges of one ack type."""
    if len(types) == 1:
        yield first, last, types[0]
        return
    a = first
    while a <= last:
        ack = types[a - batch_first]
        b = a
        while b < last and types[b + 1 - batch_first] == ack:
            b += 1
        yield a, b, ack
        a = b + 1
