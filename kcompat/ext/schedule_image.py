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

from kcompat.ext.schedule import CELLS, ROW, SLOT_MS, ScheduleImage


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
        if slot not in by_slot and image.cancelled.isdisjoint(cells[1::CELLS]):
            out.extend(cells)  # in entry order already
            continue
        rows = [tuple(cells[i:i + CELLS]) for i in range(0, len(cells), CELLS)
                if cells[i + 1] not in image.cancelled]
        rows += by_slot.get(slot, [])
        rows.sort(key=lambda r: r[1])
        for row in rows:
            out.extend(row)
    return out, {e: i for e, i in ids.items() if e not in image.cancelled}

