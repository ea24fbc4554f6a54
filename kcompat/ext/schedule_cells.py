"""The far form of a schedule's entries: int64 cells, and building them in bulk.

Theory of operation
-------------------
A far entry (``schedule``: due in a time slot not reached yet) is ``CELLS``
int64 in its slot's array: due time, entry, offset, target id, where.
``slot_runs`` groups a batch's due times by slot and ``run_cells`` makes the
cells of a slot's entries from the batch's columns, so ``Schedule.add_run``
appends a slot at a time: when the batch shares one slot (records produced
with one delay) by array slices alone, C speed; else grouped an entry at a
time (a dict step each: cheaper than any sort).

A C-speed pass (``map``, ``min``, a set's ``intersection``) never gives the
GIL up: a worker thread that passes over a whole schedule (a snapshot) does
it ``GIL_RUN`` entries at a time, so the loop never waits for it long.

Pure: values in, values out.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import floordiv, itemgetter

SLOT_MS = 10_000
CELLS = 5  # int64 per far entry: due, entry, offset, target id, where
# entries per C-speed pass of a worker thread over a schedule (a snapshot): one
# ``min(map(...))`` over 110k entries held the GIL 18 ms, and the loop, back from
# a read, waited it out; between passes of this many (~1 ms) the GIL changes hands
GIL_RUN = 8_192


def slot_runs(dues: Sequence[int]) -> Iterable[tuple[int, Sequence[int]]]:
    """The slots of ``dues``, each with the indices of its dues in index
    order: one range (no Python step per due) when they share a slot, as a
    batch of records with the same delay does; else grouped a due at a time."""
    first, last = min(dues) // SLOT_MS, max(dues) // SLOT_MS
    if first == last:
        return [(first, range(len(dues)))]
    by_slot: dict[int, list[int]] = {}
    for i, slot in enumerate(map(floordiv, dues, repeat(SLOT_MS))):
        found = by_slot.get(slot)
        if found is None:
            by_slot[slot] = [i]
        else:
            found.append(i)
    return by_slot.items()


def run_cells(first_entry: int, rows: Sequence[int], dues: Sequence[int],
              offsets: Sequence[int], wheres: Sequence[int], tid: int) -> array[int]:
    """The far cells of the entries ``first_entry + i`` for ``i`` in ``rows``
    (a range: array slices; indices: ``itemgetter``, C speed), of target
    id ``tid``."""
    k = len(rows)
    if k == 1:
        i = rows[0]
        return array("q", (dues[i], first_entry + i, offsets[i], tid, wheres[i]))
    entries = range(first_entry, first_entry + len(dues))
    if isinstance(rows, range):
        columns = [values[rows.start:rows.stop] for values in (dues, entries, offsets, wheres)]
    else:
        pick = itemgetter(*rows)
        columns = [pick(values) for values in (dues, entries, offsets, wheres)]
    block = array("q", bytes(8 * CELLS * k))
    block[0::CELLS], block[1::CELLS], block[2::CELLS], block[4::CELLS] = (
        column if isinstance(column, array) and column.typecode == "q" else array("q", column)
        for column in columns)
    block[3::CELLS] = array("q", [tid]) * k
    return block
