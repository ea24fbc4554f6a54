"""A schedule's pending entries as a snapshot holds them (``image_cells``).

Theory of operation
-------------------
``Schedule.export`` copies what is pending (``ScheduleImage``: the far
slots' cells, the promoted rows, the schedule ids, the far entries
cancelled); ``image_cells`` turns it, in a worker thread, into the form
``Schedule.load`` reads back: every pending entry as far cells ordered by
slot, then entry — so ``load`` takes a slot's run of cells at a time, and
each slot stays searchable by entry.

Pure: values in, values out.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from operator import lt

from kcompat.ext.schedule import CELLS, ROW, SLOT_MS, ScheduleImage
from kcompat.ext.schedule_cells import GIL_RUN


def image_cells(image: ScheduleImage) -> tuple[array[int], dict[int, str]]:
    """Every pending entry of ``image`` as far cells ordered by slot, then
    entry (how ``Schedule.load`` keeps each slot searchable), with target
    ids into ``image.targets``, and the schedule ids. Pure: a worker thread
    runs it."""
    by_slot: dict[int, list[tuple[int, ...]]] = {}
    for entry, due_ms, tid, offset, where in map(ROW.unpack, image.near):
        by_slot.setdefault(due_ms // SLOT_MS, []).append((due_ms, entry, offset, tid, where))
    ids = dict(image.far_ids)
    ids.update(image.near_ids)
    far = dict(image.far)
    out = array("q")
    for slot in sorted({*far, *by_slot}):
        cells = far.get(slot, array("q"))
        if slot not in by_slot and _extend_live(out, cells, image.cancelled):
            continue
        rows = [tuple(cells[i:i + CELLS]) for i in range(0, len(cells), CELLS)
                if cells[i + 1] not in image.cancelled]
        rows += by_slot.get(slot, [])
        rows.sort(key=lambda r: r[1])
        for row in rows:
            out.extend(row)
    return out, {e: i for e, i in ids.items() if e not in image.cancelled}



def _extend_live(out: array[int], cells: array[int], cancelled: set[int]) -> bool:
    """Append the cells of a slot not promoted (in entry order already) but
    those of ``cancelled`` entries, the runs between them as array slices:
    C speed however many entries the slot holds (in passes of ``GIL_RUN``), a
    Python step per cancelled one only. False, with nothing appended, if the slot's entries
    do not strictly ascend (the caller sorts them then)."""
    entries = cells[1::CELLS]
    runs = range(0, len(entries), GIL_RUN)  # passes of GIL_RUN: the GIL changes hands between
    if not all(all(map(lt, entries[i:i + GIL_RUN], entries[i + 1:i + GIL_RUN + 1]))
               for i in runs):
        return False
    found: set[int] = set()
    for i in runs:
        found.update(cancelled.intersection(entries[i:i + GIL_RUN]))
    rows = sorted(bisect_left(entries, entry) for entry in found)
    start = 0
    for row in rows:
        out.extend(cells[start * CELLS:row * CELLS])
        start = row + 1
    out.extend(cells[start * CELLS:])
    return True
