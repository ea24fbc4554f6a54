"""The near form of a schedule: the due keys of promoted entries, in sorted runs.

Theory of operation
-------------------
A promoted entry (``schedule``: due soon, its row at hand) is found by its
*key*, one int ``due_ms << 64 | entry`` — ordered as (due, entry), the order
of delivery. A target's keys are kept in sorted *runs* (a list of keys and a
read position), never one key at a time:

* ``add(target, keys)`` — a sorted run of new keys (a promoted chunk, sorted
  at C speed; the records a batch schedules into a promoted slot). It merges
  into the target's last run while that has no more than twice as many keys
  left and both fit ``MERGE_MAX`` (one C sort of two sorted runs: a linear
  merge), so a target holds about log2(keys / chunk) + keys / ``MERGE_MAX``
  runs, and a merge is one short step (~2 ms at most);
* ``pop_due(target, now_ms, limit, live)`` — the earliest ``limit`` keys due
  by ``now_ms`` whose entry is still ``live`` (pending): a threshold from the
  runs' ``limit``-th keys bounds what each run can give, each run gives its
  keys up to it as one slice (``bisect``), the slices are merged by one sort,
  what is beyond ``limit`` goes back as a run. A key whose entry was taken or
  cancelled meanwhile is dropped on the way (what was delivered leaves
  nothing behind to walk past twice);
* ``earliest(target, live)`` — the least live key's due time (the heads of the
  runs, dead heads skipped for good).

Python work is per run and per call, not per key: a delivery of 2,000 keys
costs a few dozen bisects and slices and one sort, where a heap cost a pop
per key (and a push per key promoted).

Pure: no clock, no I/O.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Container, Hashable
from itertools import chain, compress, repeat
from operator import and_

KEY_SHIFT = 64
ENTRY_MASK = (1 << KEY_SHIFT) - 1
MERGE_MAX = 65_536  # keys in a merged run, at most (a merge: one C sort, ~2 ms)


def key_of(due_ms: int, entry: int) -> int:
    return due_ms << KEY_SHIFT | entry




class _Run:
    __slots__ = ("keys", "at")

    def __init__(self, keys: list[int]) -> None:
        self.keys = keys  # sorted
        self.at = 0  # keys before it are taken


class NearKeys:
    """The sorted runs of due keys, per target (see the module)."""

    def __init__(self) -> None:
        self._runs: dict[Hashable, list[_Run]] = {}
        self.sorts = 0  # sorts done (merges and gathers): work counted by tests

    def targets(self) -> list[Hashable]:
        return list(self._runs)

    def add(self, target: Hashable, keys: list[int]) -> None:
        """A sorted run of new ``keys`` of ``target`` (this object may keep it)."""
        if not keys:
            return
        runs = self._runs.get(target)
        if runs is None:
            runs = self._runs[target] = []
        while runs:
            last = runs[-1]
            left = len(last.keys) - last.at
            if left > 2 * len(keys) or left + len(keys) > MERGE_MAX:
                break
            merged = last.keys[last.at:] if last.at else last.keys
            merged += keys  # two sorted runs: the sort merges them in one linear pass
            merged.sort()
            self.sorts += 1
            keys = merged
            runs.pop()
        runs.append(_Run(keys))

    def pop_due(self, target: Hashable, now_ms: int, limit: int,
                live: Container[int]) -> tuple[list[int], list[int]]:
        """Up to ``limit`` keys of ``target`` due by ``now_ms`` whose entry is
        in ``live``, earliest first, taken out (dead ones dropped); and
        their entries."""
        runs = self._runs.get(target)
        out: list[int] = []
        entries: list[int] = []
        bound = ((now_ms + 1) << KEY_SHIFT) - 1  # the greatest key due
        while runs and len(out) < limit:
            want = limit - len(out)
            threshold = bound  # no run gives more than ``want`` keys up to it
            for run in runs:
                j = run.at + want - 1
                if j < len(run.keys) and run.keys[j] < threshold:
                    threshold = run.keys[j]
            parts = []
            for run in runs:
                hi = bisect_right(run.keys, threshold, run.at)
                if hi > run.at:
                    parts.append(run.keys[run.at:hi])
                    run.at = hi
            if not parts:
                break
            runs[:] = [run for run in runs if run.at < len(run.keys)]
            if len(parts) == 1:
                keys = parts[0]
            else:
                keys = sorted(chain.from_iterable(parts))
                self.sorts += 1
            if len(keys) > want:
                self.add(target, keys[want:])
                del keys[want:]
            found = list(map(and_, keys, repeat(ENTRY_MASK)))
            alive = list(map(live.__contains__, found))
            out += compress(keys, alive)
            entries += compress(found, alive)
        if runs is not None and not runs:
            del self._runs[target]
        return out, entries

    def earliest(self, target: Hashable, live: Container[int]) -> int | None:
        """The due time of ``target``'s earliest key whose entry is ``live``
        (dead keys at the runs' heads are dropped); None if none."""
        runs = self._runs.get(target)
        if runs is None:
            return None
        best = None
        mask = ENTRY_MASK
        for run in runs:
            keys, at = run.keys, run.at
            while at < len(keys) and keys[at] & mask not in live:
                at += 1
            run.at = at
            if at < len(keys) and (best is None or keys[at] < best):
                best = keys[at]
        runs[:] = [run for run in runs if run.at < len(run.keys)]
        if not runs:
            del self._runs[target]
        return None if best is None else best >> KEY_SHIFT

    def drop(self, target: Hashable) -> None:
        self._runs.pop(target, None)

    def listing(self) -> dict[Hashable, list[tuple[int, int]]]:
        """Every key not taken yet (dead ones included), as sorted (due,
        entry) per target: tests compare schedules by it."""
        return {target: sorted((k >> KEY_SHIFT, k & ENTRY_MASK)
                               for run in runs for k in run.keys[run.at:])
                for target, runs in self._runs.items()}

    def runs(self, target: Hashable) -> int:
        return len(self._runs.get(target, ()))
