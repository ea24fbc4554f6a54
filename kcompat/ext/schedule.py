"""The pending delayed records of a schedule log: its index.

Theory of operation
-------------------
A delayed record is written once to a schedule log (a replicated RecordBatch
v2 log, hosted like the coordinators) and stays there; this index knows, per
pending record, only its *entry* — the schedule-log offset that holds it —,
its due time, its target partition, the offset of its hole and its optional
``kc-schedule-id``. It is rebuilt by replaying the schedule log in order, on
every replica, so a replica that takes over holds the same index (docs/architecture.md, Replication):

* ``add(entry, due_ms, schedule_id, target, offset)`` — a record was
  scheduled (entries grow with the log; an entry not above the last one added
  is a replay and ignored);
* ``cancel(schedule_id, target)`` — cancelled until due (None if unknown or
  already taken);
* ``delivered(entry)`` — taken out: its delivery started (or it was dropped).

``due(now_ms, limit, target)`` lists entries whose time has come, earliest
first (ties by entry, i.e. schedule order): the leader moves them and then
records their delivery. An entry stays pending until then; its key leaves
its target's sorted runs when handed out — a slice of each run, never a pop
per key (``schedule_near``; what is delivered leaves nothing behind to walk
past) — and goes back at the next ``due`` of that target if its delivery
did not start. The leader's ``out`` record takes its entries back out with
``take_all``: a dict pop per entry at C speed, no Python step per entry.

A schedule id is scoped by the record's target (its topic-partition; one
schedule log serves several). It names at most one pending record there:
scheduling a second record with an id that is still pending replaces
nothing — both stay, and a cancellation takes the earlier one (first come,
first cancelled), as a queue user would expect from ids reused after
delivery.

Each entry also knows *where* its record's bytes are (``locate``: the
schedule-log batch holding it and the record's position in it), so the leader
decodes just the records it moves, never a whole stored batch per record.

Memory (the far future stays compact): an entry due in a time slot
(``SLOT_MS``) not reached yet is five int64 in its slot's array — 40 bytes;
a schedule id, if any, is kept beside it. A slot is *promoted* when a
``due`` call comes within ``PROMOTE_AHEAD_MS`` of its start: its entries become
rows (``ROW``: entry, due time, target id, offset and where packed in bytes,
a schedule id beside; bytes in a dict keyed by ints, which the garbage
collector never tracks, so a large near future adds nothing to a full
collection — tuples, which it untracks only once it has looked at them,
kept the dict holding them tracked) and a sorted run of due keys per target
(``schedule_near``), the fast form for the records about to move, made
``Pending`` only when handed out (unpacked as one buffer, C speed) — rows,
keys and their sort made from the slot's array slices at C speed, no Python
step per entry but for one cancelled while far or with a schedule id —
``PROMOTE_CHUNK`` at most per call, so a slot holding a million records (all due the same second)
is promoted over many turns of the loop, never in one step. A follower,
which never asks what is due, keeps everything compact: ``take_all`` finds
the entries its leader delivered in the far form too — a slot's entries
indexed by a dict made at C speed the first time the slot is taken from
(the slot whose turn has come: it is all taken in the end), their cells read
a column at a time by one ``itemgetter`` and made ``Pending`` by ``map``, no
Python step per entry (2.9 us a record against 10.1 us for a binary search
each, ``take`` still does that) — promotion is the leader's private business
and replicas agree on what is pending however much each promoted.

The earliest due time (``next_due_ms``: the leader's timer, and the overdue
gauge and backpressure count from it) is exact over promoted entries (the
runs, and the keys handed out whose delivery has not started). A far slot
keeps the least due time of each ``BLOCK`` entries in log order, so for a
large slot partly promoted when it begins, the earliest of what is left of
it costs ~``BLOCK`` + entries / ``BLOCK`` compares (C speed), never a walk of the
slot — not the whole slot's least, which was promoted and delivered long
before. Each far slot counts its entries cancelled or taken (``take``: a
replica, or a restarted leader re-applying the deliveries written after its
snapshot) while far; a slot left with none alive is dropped at once (its
entries leave the cancelled set at C speed; ``_drop_if_dead``, on a
follower too, which never asks what is due), so it never answers a due time
long past — the restart's overdue gauge read minutes — and a follower's
memory follows what is pending, not what was ever delivered. A dead entry in a slot
with live ones still counts in its block, so the answer is a lower bound: at
most ``SLOT_MS`` below the true earliest (both lie in that slot). A small
first slot (``PROMOTE_CHUNK`` entries at most) is promoted whole to answer.

A restart fills the far form in bulk, a slot's run at a time: ``load``
takes a snapshot's cells (ordered by slot, then entry: ``schedule_image``)
as array slices, each slot's run found by binary search on the due column,
and ``add_run`` appends a batch of records due in one slot (one delay) by
slices too — C speed, Python work per slot, per ``BLOCK`` and per schedule
id, not per entry (a batch spread over many slots is grouped an entry at a
time).

Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

import heapq
import struct
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import compress, repeat
from operator import itemgetter, lshift, or_
from typing import NamedTuple

# the far form's layout lives in ``schedule_cells``; callers find it here too
from kcompat.ext.schedule_cells import CELLS as CELLS
from kcompat.ext.schedule_cells import SLOT_MS as SLOT_MS
from kcompat.ext.schedule_cells import run_cells, slot_runs
from kcompat.ext.schedule_near import KEY_SHIFT, NearKeys

Target = tuple[str, int]  # topic, partition
# a promoted entry: its entry, due time, target id, offset and where, packed in
# bytes (an object the garbage collector never tracks: see ``Schedule._pending``)
ROW = struct.Struct("<5q")
Row = bytes
PROMOTE_CHUNK = 2_000  # entries promoted per call at most (a part of a turn: ~2.5 ms)
# a slot is promoted from this long before it begins: in log order, so all of it
# must be by then (its earliest records may be among its last); the near form
# costs little (rows the garbage collector does not track)
PROMOTE_AHEAD_MS = 8_000
# a slot this close to its start (or begun) is promoted at the host's full pace
# (``urgent``); before that, a few thousand entries a turn (the delay service's
# calm turns): half the lead each, so that a slot of a million records all due in
# one second is near by the time it begins even on a loaded node
PROMOTE_URGENT_MS = 4_000
# far entries indexed per ``take_all`` at most (a dict made at C speed: ~3 ms)
INDEX_CHUNK = 32_768
# a far slot keeps the least due time of each run of this many entries (in log order):
# what is left of a slot partly promoted is known by ~BLOCK + entries / BLOCK compares
BLOCK = 1_024


class Pending(NamedTuple):
    entry: int
    due_ms: int
    schedule_id: str | None
    target: Target | None = None
    offset: int = -1  # where the record was produced (its hole), -1 if unknown
    # where its bytes are in the schedule log (``locate``), -1 if unknown
    where: int = -1

    @property
    def base(self) -> int:
        """The offset of the schedule-log batch holding its record (its own
        entry when not located): the log must keep it."""
        return self.entry if self.where == -1 else self.entry - (self.where >> 32)


def locate(entry: int, base_offset: int, position: int) -> int:
    """``Pending.where`` of the record of ``entry``, the record that starts
    at ``position`` of the records of the schedule-log batch at ``base_offset``
    (a record copied forward lies past its entry: then negative, never -1)."""
    return (entry - base_offset) << 32 | position


def located(pending: Pending) -> tuple[int, int]:
    """(base offset of its batch, position in the batch's records) of a
    located entry."""
    return pending.entry - (pending.where >> 32), pending.where & 0xFFFF_FFFF


# a row of ``Pending``'s fields made ``Pending`` at C speed (its ``_make`` is a Python call)
_pending_of: Callable[[tuple[object, ...]], Pending] = partial(tuple.__new__, Pending)


class Schedule:
    def __init__(self) -> None:
        # target -> its promoted entries' due keys, in sorted runs (``schedule_near``)
        self._near = NearKeys()
        # promoted entries, as rows of packed ints (``ROW``; the schedule id
        # beside, in ``_near_ids``), made ``Pending`` on the way out. Bytes and
        # ints are never tracked by the garbage collector, so neither is this
        # dict: a dict of a million row tuples was walked by every full
        # collection — the tuples untracked once examined, but each new row
        # tracked the dict again — 60-130 ms a collection (bench/gc_pause.py)
        self._pending: dict[int, Row] = {}
        self._near_ids: dict[int, str] = {}  # promoted entry -> its schedule id
        # target -> the keys ``due`` took out last (sorted), and their entries: a
        # pending one (its delivery not started) goes back at the next ``due`` of it
        self._handed: dict[Target | None, tuple[list[int], list[int]]] = {}
        self._far: dict[int, array[int]] = {}  # slot -> (due, entry, offset, tid, where)*
        self._far_min: dict[int, int] = {}  # slot -> its smallest due
        self._far_blocks: dict[int, array[int]] = {}  # slot -> smallest due per BLOCK entries
        self._slots: list[int] = []  # heap of the far slots
        self._far_ids: dict[int, str] = {}  # far entry -> its schedule id
        self._cancelled: set[int] = set()  # far entries cancelled before promotion
        self._far_dead: dict[int, int] = {}  # slot -> its cancelled entries not promoted yet
        self._targets: list[Target | None] = []
        self._target_ids: dict[Target | None, int] = {}
        # (target, id) -> its pending entries in schedule order (O(1) removal), each
        # with its slot (a far one's cancellation is counted there): a plain dict
        # of ints while it holds one (most ids name one record; the collector
        # never tracks it), an OrderedDict from the second on (``_name``)
        self._by_id: dict[tuple[Target | None, str], dict[int, int]] = {}
        self._count = 0
        self._last = -1
        self._promoted_until = -(1 << 62)  # slots up to this one are near
        self._far_pos: dict[int, int] = {}  # slot -> cells promoted so far (partly promoted)
        # slot -> (cells indexed, entry -> its cells' index) of far slots taken from in batches
        self._far_at: dict[int, tuple[int, dict[int, int]]] = {}

    def __len__(self) -> int:
        return self._count

    def add(self, entry: int, due_ms: int, schedule_id: str | None = None,
            target: Target | None = None, offset: int = -1, where: int = -1) -> bool:
        """False for a replayed entry (already known)."""
        if entry <= self._last:
            return False
        self._last = entry
        self._count += 1
        if schedule_id is not None:
            self._name((target, schedule_id), entry, due_ms // SLOT_MS)
        slot = due_ms // SLOT_MS
        if slot <= self._promoted_until:
            self._near_rows([entry], [due_ms], [self._tid(target)], [offset], [where],
                            () if schedule_id is None else ((entry, schedule_id),))
            return True
        self._far_slot(due_ms).extend((due_ms, entry, offset, self._tid(target), where))
        if schedule_id is not None:
            self._far_ids[entry] = schedule_id
        return True

    def _name(self, key: tuple[Target | None, str], entry: int, slot: int) -> None:
        """``entry`` (due in ``slot``) is named by ``key`` (after the ones it names)."""
        entries = self._by_id.get(key)
        if entries is None:
            self._by_id[key] = {entry: slot}
            return
        if type(entries) is dict:  # a second one: the order of first removal kept in O(1)
            entries = self._by_id[key] = OrderedDict(entries)
        entries[entry] = slot

    def _tid(self, target: Target | None) -> int:
        tid = self._target_ids.get(target)
        if tid is None:
            tid = self._target_ids[target] = len(self._targets)
            self._targets.append(target)
        return tid

    def _far_slot(self, due_ms: int) -> array[int]:
        """The cells of the far slot of ``due_ms`` (made if new), its earliest
        due time kept."""
        slot = due_ms // SLOT_MS
        cells = self._far.get(slot)
        if cells is None:
            cells = self._far[slot] = array("q")
            self._far_min[slot], self._far_blocks[slot] = due_ms, array("q")
            heapq.heappush(self._slots, slot)
        elif due_ms < self._far_min[slot]:
            self._far_min[slot] = due_ms
        blocks = self._far_blocks[slot]
        if len(cells) // CELLS == len(blocks) * BLOCK:  # the next entry starts a block
            blocks.append(due_ms)
        elif due_ms < blocks[-1]:
            blocks[-1] = due_ms
        return cells

    def add_run(self, first_entry: int, dues: Sequence[int], target: Target | None,
                offsets: Sequence[int], wheres: Sequence[int],
                ids: dict[int, str]) -> int:
        """``add`` of the consecutive entries from ``first_entry`` (the i-th:
        ``dues[i]``, ``offsets[i]``, ``wheres[i]``, schedule id ``ids.get(i)``)
        of one ``target``, as many calls of ``add`` would; how many were added.
        Far entries are appended a slot at a time (``slot_runs``), their
        cells interleaved by array slices: when they share a slot, as a
        batch of records with one delay does, no Python step per entry."""
        n = len(dues)
        if first_entry <= self._last:  # a replay, in part at least
            return sum(self.add(first_entry + i, due, ids.get(i), target, offsets[i],
                                wheres[i]) for i, due in enumerate(dues))
        if not n:
            return 0
        tid = self._tid(target)
        self._last = first_entry + n - 1
        self._count += n
        for i, schedule_id in ids.items():  # in entry order, as ``add`` keeps them
            self._name((target, schedule_id), first_entry + i, dues[i] // SLOT_MS)
        for slot, rows in slot_runs(dues):
            if slot <= self._promoted_until:
                self._near_rows([first_entry + i for i in rows], [dues[i] for i in rows],
                                [tid] * len(rows), [offsets[i] for i in rows],
                                [wheres[i] for i in rows],
                                [(first_entry + i, ids[i]) for i in rows if i in ids])
            else:
                self._extend_far(slot, run_cells(first_entry, rows, dues, offsets, wheres,
                                                  tid))
        for i, schedule_id in ids.items():
            if dues[i] // SLOT_MS > self._promoted_until:
                self._far_ids[first_entry + i] = schedule_id
        return n

    def _extend_far(self, slot: int, block: array[int], least: int | None = None) -> None:
        """Append the cells ``block`` (entries of ``slot`` after those it
        holds, in log order; an array this schedule may keep; ``least``: their
        least due time, if known) to far ``slot``, made if new: its least due
        time and its blocks' kept — one pass over the new due times at most
        (array slices: C speed)."""
        cells = self._far.get(slot)
        first = 0 if cells is None else len(cells) // CELLS
        end = first + len(block) // CELLS
        b = first // BLOCK
        if b == (end - 1) // BLOCK:  # within one block
            least = min(block[0::CELLS]) if least is None else least
            mins = [least]
        else:  # the least of the new entries in each block they reach
            mins = [min(block[(max(at, first) - first) * CELLS:
                              (min(at + BLOCK, end) - first) * CELLS:CELLS])
                    for at in range(b * BLOCK, end, BLOCK)]
            least = min(mins)
        if cells is None:
            self._far[slot], self._far_min[slot] = block, least
            self._far_blocks[slot] = array("q", mins)
            heapq.heappush(self._slots, slot)
            return
        cells.extend(block)
        if least < self._far_min[slot]:
            self._far_min[slot] = least
        blocks = self._far_blocks[slot]
        if b < len(blocks):  # the last block goes on
            blocks[b] = min(blocks[b], mins[0])
            mins = mins[1:]
        blocks.extend(mins)

    def _rest_min(self, slot: int) -> int:
        """The least due time of the entries of far ``slot`` not promoted yet
        (cancelled or taken ones included: a lower bound): the rest of the block
        promotion is in, then the blocks after it — ~``BLOCK`` + entries /
        ``BLOCK`` compares at C speed, however large the slot."""
        pos = self._far_pos.get(slot, 0) // CELLS
        if not pos:
            return self._far_min[slot]
        cells, b = self._far[slot], pos // BLOCK  # pos < entries: else the slot is gone
        end = min(len(cells) // CELLS, (b + 1) * BLOCK)
        return min(cells[pos * CELLS:end * CELLS:CELLS] + self._far_blocks[slot][b + 1:])

    def _promote_first(self, limit: int | None) -> int:
        """Promote the first far slot's entries, ``limit`` at most; how many
        were looked at. Columns are taken by array slices and the rows and
        keys made from them at C speed (``_near_rows``); Python work per
        entry only for one cancelled while far or with a schedule id."""
        slot = self._slots[0]
        cells = self._far[slot]
        start = self._far_pos.get(slot, 0)
        end = len(cells) if limit is None else min(len(cells), start + limit * CELLS)
        chunk = cells[start:end]
        entries = chunk[1::CELLS]
        columns = [chunk[0::CELLS], chunk[2::CELLS], chunk[3::CELLS], chunk[4::CELLS]]
        cancelled = self._cancelled
        if cancelled and not cancelled.isdisjoint(entries):  # leave those out
            keep = [i for i, entry in enumerate(entries) if entry not in cancelled]
            dead = len(entries) - len(keep)
            cancelled.difference_update(entries)
            self._far_dead[slot] = self._far_dead.get(slot, dead) - dead
            entries = array("q", [entries[i] for i in keep])
            columns = [array("q", [column[i] for i in keep]) for column in columns]
        dues, offsets, tids, wheres = columns
        ids = self._far_ids
        named: list[tuple[int, str]] = []
        if ids and not ids.keys().isdisjoint(entries):
            named = [(entry, ids.pop(entry)) for entry in entries if entry in ids]
        self._near_rows(entries, dues, tids, offsets, wheres, named)
        if end < len(cells):
            self._far_pos[slot] = end
        else:
            self._retire_first()
        return (end - start) // CELLS

    def _near_rows(self, entries: Sequence[int], dues: Sequence[int], tids: Sequence[int],
                   offsets: Sequence[int], wheres: Sequence[int],
                   named: Iterable[tuple[int, str]] = ()) -> None:
        """The entries (their columns, and (entry, schedule id) of those
        named) become near: pending rows, packed at C speed, and their keys a
        run per target, sorted at C speed."""
        if not entries:
            return
        self._pending.update(zip(entries, map(ROW.pack, entries, dues, tids, offsets, wheres),
                                 strict=True))
        self._near_ids.update(named)
        keys = list(map(or_, map(lshift, dues, repeat(KEY_SHIFT)), entries))  # ``key_of``
        if min(tids) == max(tids):
            by_tid = {tids[0]: keys}
        else:
            by_tid = {}
            for tid, key in zip(tids, keys, strict=True):
                found = by_tid.get(tid)
                if found is None:
                    by_tid[tid] = [key]
                else:
                    found.append(key)
        for tid, run in by_tid.items():
            run.sort()
            self._near.add(self._targets[tid], run)

    def _made(self, rows: Sequence[Row], taken: bool = False) -> list[Pending]:
        """The ``Pending`` of promoted rows (``taken``: out of ``_pending``,
        their schedule ids forgotten), at C speed: the rows unpacked as one
        buffer, their columns mapped, the tuples made ``Pending`` by
        ``tuple.__new__`` — no Python call per row."""
        if not rows:
            return []
        entries, dues, tids, offsets, wheres = zip(*ROW.iter_unpack(b"".join(rows)),
                                                   strict=True)
        ids = self._near_ids
        named = (repeat(None) if not ids else
                 map(ids.pop if taken else ids.get, entries, repeat(None)))
        return list(map(_pending_of, zip(entries, dues, named,
                                         map(self._targets.__getitem__, tids), offsets,
                                         wheres, strict=False)))

    def _retire_first(self) -> None:
        """The first far slot is done with: promoted, or what is left of it
        all cancelled (then forgotten at C speed)."""
        slot = heapq.heappop(self._slots)
        self._promoted_until = max(self._promoted_until, slot)
        self._forget_slot(slot)

    def _forget_slot(self, slot: int) -> None:
        """Far ``slot`` (out of the heap) is gone: its cells, and its
        cancelled or taken entries out of the cancelled set (C speed)."""
        if self._far_dead.pop(slot, 0):
            cells = self._far[slot]
            self._cancelled.difference_update(cells[self._far_pos.get(slot, 0) + 1::CELLS])
        del self._far[slot], self._far_min[slot], self._far_blocks[slot]
        self._far_pos.pop(slot, None)
        self._far_at.pop(slot, None)

    def _drop_if_dead(self, slot: int) -> None:
        """Forget far ``slot`` once every entry left of it is cancelled or
        taken: a follower, which never promotes, takes each slot's entries out
        as its leader delivers them, and kept them all (and their index) —
        memory that grew with every record ever delivered."""
        cells = self._far.get(slot)
        if cells is None or len(cells) - self._far_pos.get(slot, 0) > \
                CELLS * self._far_dead.get(slot, 0):
            return
        if self._slots[0] == slot:  # most often: a follower drains the earliest slot
            heapq.heappop(self._slots)
        else:
            self._slots.remove(slot)
            heapq.heapify(self._slots)
        self._forget_slot(slot)

    def _kill_far(self, entry: int, slot: int) -> None:
        """Far ``entry`` of ``slot`` is cancelled (or taken): forgotten when
        its slot is promoted, and counted until then."""
        self._cancelled.add(entry)
        self._far_dead[slot] = self._far_dead.get(slot, 0) + 1

    def promote(self, now_ms: int, limit: int | None = PROMOTE_CHUNK) -> bool:
        """Far slots that have begun by ``now_ms`` become near: what is due
        then is at hand for ``due`` (the logical content does not change) —
        ``limit`` entries per call at most, so a slot of a million records is
        promoted over many turns; True once none is left."""
        left = limit
        while self._slots and self._slots[0] * SLOT_MS <= now_ms + PROMOTE_AHEAD_MS:
            if left is not None and left <= 0:
                return False
            first = self._slots[0]
            if len(self._far[first]) - self._far_pos.get(first, 0) <= \
                    CELLS * self._far_dead.get(first, 0):  # all cancelled or taken
                self._retire_first()
                left = None if left is None else left - 1
                continue
            done = self._promote_first(left)
            if left is not None:
                left -= max(done, 1)
        return True

    def urgent(self, now_ms: int) -> bool:
        """The first slot not promoted whole begins within ``PROMOTE_URGENT_MS``
        of ``now_ms`` (or has begun): what is left of it must be near soon."""
        return bool(self._slots) and self._slots[0] * SLOT_MS <= now_ms + PROMOTE_URGENT_MS

    def promoting(self, now_ms: int) -> bool:
        """A slot that begins by ``now_ms`` (or soon after) is not promoted
        whole yet: call ``due`` again."""
        return bool(self._slots) and self._slots[0] * SLOT_MS <= now_ms + PROMOTE_AHEAD_MS

    def take(self, entry: int, due_ms: int) -> Pending | None:
        """Take ``entry`` (due at ``due_ms``) out, promoted or not: a
        replica applying a delivery that its leader planned need not promote
        what the leader did. None if it is not pending."""
        if entry in self._pending:
            return self.delivered(entry)
        found = self._take_one(due_ms // SLOT_MS, entry)
        if found is None:
            return None
        self._drop_if_dead(due_ms // SLOT_MS)
        self._count -= 1
        self._forget_id(found)
        return found

    def take_all(self, entries: Sequence[int], dues: Sequence[int]) -> list[Pending]:
        """``take`` of each of ``entries`` (due at ``dues``), those pending
        only, in order: the promoted ones (a leader's, all of them) at C
        speed — a dict pop and a row made ``Pending`` —, the others one by one."""
        rows: list[Row | None] = list(map(self._pending.pop, entries, repeat(None)))
        if None in rows:  # some not promoted (a follower, a replay), or not pending
            taken = self._take_far(entries, dues, rows)
        else:
            taken = self._made(rows, taken=True)  # type: ignore[arg-type]
        self._count -= len(taken)
        if self._by_id:
            for p in taken:
                if p.schedule_id is not None:
                    self._forget_id(p)
        return taken

    def _take_far(self, entries: Sequence[int], dues: Sequence[int],
                  rows: list[Row | None]) -> list[Pending]:
        """``take_all`` of entries some of whose rows (those taken out of
        ``_pending``) are None: those are taken from their far slots
        (``_take_slot``, a slot at a time); what is pending of them all, in
        order. A follower's out record (every row None) due within one slot,
        as most are, is taken whole at C speed."""
        if rows.count(None) == len(rows) and int(min(dues)) // SLOT_MS == int(max(dues)) // SLOT_MS:
            return list(filter(None, self._take_slot(int(dues[0]) // SLOT_MS,
                                                     list(map(int, entries)))))  # None: not pending
        by_slot: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            if row is None:
                by_slot.setdefault(int(dues[i]) // SLOT_MS, []).append(i)
        far: dict[int, Pending | None] = {}
        for slot, indices in by_slot.items():
            far.update(zip(indices, self._take_slot(slot, [int(entries[i]) for i in indices]),
                           strict=True))
        made = iter(self._made([row for row in rows if row is not None], taken=True))
        taken = [next(made) if row is not None else far[i] for i, row in enumerate(rows)]
        return list(filter(None, taken))

    def _take_slot(self, slot: int, wanted: list[int]) -> list[Pending | None]:
        """Take far entries ``wanted`` of ``slot`` out: the ``Pending`` of
        each, None for one not pending. Their cells are found by a dict of
        the slot's entries (``_cells_at``) and read a column at a time by one
        ``itemgetter`` (on views of the cells shifted by a field), and made
        ``Pending`` by ``map``: no Python step per entry, unless one is
        missing, cancelled or named twice (a replay: then one at a time)."""
        cells = self._far.get(slot)
        if cells is None:
            return [None] * len(wanted)
        at = list(map(self._cells_at(slot, cells).get, wanted, repeat(-1)))  # each one's cells
        cancelled = self._cancelled
        if (len(wanted) == 1 or min(at) < self._far_pos.get(slot, 0)
                or not cancelled.isdisjoint(wanted) or len(set(wanted)) < len(wanted)):
            # one (``itemgetter`` of one gives no tuple), or not there (or not indexed
            # yet), promoted, cancelled, twice
            one_by_one = [self._take_one(slot, entry) for entry in wanted]
            self._drop_if_dead(slot)
            return one_by_one
        read = itemgetter(*at)
        with memoryview(cells) as view:  # view[k:][c] is cells[c + k]
            dues, offsets, tids, wheres = read(cells), read(view[2:]), read(view[3:]), read(view[4:])
        ids = self._far_ids
        named = map(ids.pop, wanted, repeat(None)) if ids else repeat(None)
        made: list[Pending | None] = list(map(_pending_of, zip(
            wanted, dues, named, map(self._targets.__getitem__, tids), offsets, wheres,
            strict=False)))
        cancelled.update(wanted)
        self._far_dead[slot] = self._far_dead.get(slot, 0) + len(wanted)
        self._drop_if_dead(slot)
        return made

    def _take_one(self, slot: int, entry: int) -> Pending | None:
        """``_take_slot`` of one entry (``take`` of a far one)."""
        c = self._far_index(entry, slot * SLOT_MS)
        if c < 0:
            return None
        cells = self._far[slot]
        found = Pending(entry, cells[c], self._far_ids.pop(entry, None),
                        self._targets[cells[c + 3]], cells[c + 2], cells[c + 4])
        self._kill_far(entry, slot)
        return found

    def _cells_at(self, slot: int, cells: array[int]) -> dict[int, int]:
        """Far ``slot``'s entries -> the index of their cells, for taking
        many: a dict of the entry column made at C speed, ``INDEX_CHUNK``
        entries more per call (in log order), so a slot of a million is not
        indexed in one step (what is not indexed yet is searched for). Kept
        until the slot goes (``_retire_first``): what a follower takes from it,
        it takes from the slot whose turn has come, all of it in the end."""
        indexed, at = self._far_at.get(slot, (0, {}))
        if indexed < len(cells):
            end = min(len(cells), indexed + INDEX_CHUNK * CELLS)
            at.update(zip(cells[indexed + 1:end:CELLS], range(indexed, end, CELLS), strict=True))
            self._far_at[slot] = (end, at)
        return at

    @staticmethod
    def _entry_column(cells: array[int], start: int) -> memoryview:
        """The entry column of a far slot's cells from cell ``start`` on: a
        strided view (no copy) to search with ``bisect`` at C speed. Use it
        in a ``with``: while it lives, the array cannot grow."""
        return memoryview(cells)[start + 1::CELLS]

    def cancel(self, schedule_id: str, target: Target | None = None) -> Pending | None:
        """Drop the earliest pending record of ``target`` named ``schedule_id``;
        None if none (a record still in the compact form comes back with due
        time -1: only its entry, id and target are at hand)."""
        key = (target, schedule_id)
        entries = self._by_id.get(key)
        found: Pending | None = None
        if entries:
            entry, slot = (entries.popitem(last=False) if isinstance(entries, OrderedDict)
                           else entries.popitem())  # a plain one holds one entry
            row = self._pending.pop(entry, None)
            found = None if row is None else self._made((row,), taken=True)[0]
            if found is None:  # still far
                self._kill_far(entry, slot)
                self._far_ids.pop(entry, None)
                self._drop_if_dead(slot)
                found = Pending(entry, -1, schedule_id, target)
            self._count -= 1
        if not entries:
            self._by_id.pop(key, None)
        return found

    def delivered(self, entry: int) -> Pending | None:
        """Take a due (promoted) ``entry`` out: its delivery started."""
        row = self._pending.pop(entry, None)
        if row is None:
            return None
        found = self._made((row,), taken=True)[0]
        self._count -= 1
        self._forget_id(found)
        return found

    def _forget_id(self, found: Pending) -> None:
        if found.schedule_id is not None:
            key = (found.target, found.schedule_id)
            entries = self._by_id.get(key)
            if entries is not None and entries.pop(found.entry, None) is not None:
                if not entries:
                    del self._by_id[key]

    def due(self, now_ms: int, limit: int = 1000, target: object = ...) -> list[Pending]:
        """Up to ``limit`` pending records due at ``now_ms`` (of ``target``
        only, if given), earliest first. They stay pending until ``delivered``;
        their keys are taken out of the target's runs (a slice of each:
        ``NearKeys.pop_due``) and those still pending go back at the next call."""
        self.promote(now_ms)
        targets = [target] if target is not ... else list(self._near_targets())
        out: list[Pending] = []
        pending = self._pending
        for t in targets:
            self._give_back(t)  # type: ignore[arg-type]
            keys, entries = self._near.pop_due(t, now_ms, limit, pending)
            if keys:
                self._handed[t] = keys, entries  # type: ignore[index]
                out += self._made(list(map(pending.__getitem__, entries)))
        if len(targets) > 1:
            out.sort(key=lambda p: (p.due_ms, p.entry))
        return out[:limit]

    def _give_back(self, target: Target | None) -> None:
        """Put back the keys last handed out for ``target`` that are still
        pending (their delivery did not start): a run of their own."""
        handed = self._handed.pop(target, None)
        if handed:
            keys, entries = handed
            self._near.add(target, list(compress(keys, map(self._pending.__contains__,
                                                           entries))))

    def _handed_due(self, target: Target | None) -> int | None:
        """The earliest due time of the keys handed out for ``target`` that
        are still pending (None, and forgotten, when none is)."""
        handed = self._handed.get(target)
        if not handed:
            return None
        keys, entries = handed
        first = next(compress(keys, map(self._pending.__contains__, entries)), None)
        if first is None:
            del self._handed[target]
            return None
        return first >> KEY_SHIFT  # sorted: the first one pending is the earliest

    def _near_targets(self) -> dict[Target | None, None]:
        """The targets with promoted entries (handed out or not), in order."""
        return dict.fromkeys([*self._near.targets(), *self._handed])  # type: ignore[list-item]

    def _near_due(self) -> dict[Target | None, int]:
        """The earliest due time of each target's promoted entries (handed
        out or not)."""
        out = {}
        for target in self._near_targets():
            least = self.earliest_due(target)
            if least is not None:
                out[target] = least
        return out

    def earliest_due(self, target: Target | None) -> int | None:
        """The earliest due time of ``target``'s promoted entries (handed
        out or not); None if it has none."""
        least = self._near.earliest(target, self._pending)
        handed = self._handed_due(target)
        if handed is not None and (least is None or handed < least):
            least = handed
        return least

    def drop_target(self, target: Target | None) -> int:
        """Forget every pending record of ``target`` (it was deleted); how many."""
        tid = self._target_ids.get(target)
        dropped = [] if tid is None else [
            entry for entry, row in self._pending.items() if ROW.unpack(row)[2] == tid]
        for entry in dropped:
            self.delivered(entry)
        if tid is not None:
            for slot, cells in self._far.items():
                for i in range(self._far_pos.get(slot, 0), len(cells), CELLS):
                    entry = cells[i + 1]
                    if cells[i + 3] == tid and entry not in self._cancelled:
                        self._kill_far(entry, slot)
                        self._far_ids.pop(entry, None)
                        dropped.append(entry)
                        self._count -= 1
        self._by_id = {k: v for k, v in self._by_id.items() if k[0] != target}
        self._near.drop(target)
        self._handed.pop(target, None)
        return len(dropped)

    def due_targets(self, now_ms: int, promote_limit: int = PROMOTE_CHUNK,
                    linger_ms: int = 0) -> list[Target | None]:
        """Targets with a record due at ``now_ms`` — for ``linger_ms`` at
        least — (then ``due`` by target), ``promote_limit`` entries promoted
        first at most."""
        self.promote(now_ms, promote_limit)
        return [target for target, due in self._near_due().items()
                if due <= now_ms - linger_ms]

    def next_due_ms(self) -> int | None:
        """When the earliest pending record is due, or a little before: the
        host's timer, and what ``overdue`` gauges count from. Exact over the
        promoted entries; for a large first slot not promoted whole, the least
        due time of what is left of it (``_rest_min``), which may be an entry
        cancelled or taken while far — so at most one slot (``SLOT_MS``) early
        while that slot holds a live entry (see the module)."""
        while True:
            near = min(self._near_due().values(), default=None)
            if not self._slots:
                return near
            first = self._slots[0]
            left = (len(self._far[first]) - self._far_pos.get(first, 0)) // CELLS
            if left <= self._far_dead.get(first, 0):  # all of it cancelled or taken
                self._retire_first()
                continue
            far = self._rest_min(first)  # of what is left of it, if partly promoted
            if near is not None and near < far:
                return near
            if left > PROMOTE_CHUNK:  # a large slot: its earliest, maybe cancelled
                return far if near is None else min(near, far)
            self._promote_first(None)  # it may hold the earliest (or only cancelled ones)

    def relocate(self, entry: int, due_ms: int, where: int) -> bool:
        """``entry`` (due at ``due_ms``) is now read from ``where``: its record
        was copied forward (the schedule log compacts, ``schedule_log``).
        False when it is no longer pending (taken, cancelled or dropped)."""
        row = self._pending.get(entry)
        if row is not None:
            self._pending[entry] = ROW.pack(*ROW.unpack(row)[:4], where)
            return True
        at = self._far_index(entry, due_ms)
        if at < 0:
            return False
        self._far[due_ms // SLOT_MS][at + 4] = where
        return True

    def _far_index(self, entry: int, due_ms: int) -> int:
        """The cell index of a far ``entry`` not yet promoted, -1 if none."""
        slot = due_ms // SLOT_MS
        cells = self._far.get(slot)
        if cells is None or entry in self._cancelled:
            return -1
        # a slot's entries are in log order: binary search past the promoted ones
        start = self._far_pos.get(slot, 0)
        with self._entry_column(cells, start) as column:
            at = bisect_left(column, entry)
            found = at < len(column) and column[at] == entry
        return start + at * CELLS if found else -1

    @property
    def last_entry(self) -> int:
        """The highest entry ever added (a replay adds nothing up to it)."""
        return self._last

    def export(self) -> ScheduleImage:
        """A copy of what is pending, to write a snapshot from (``image_cells``
        orders it, off the loop): copies of arrays and dicts only, C speed."""
        far = [(slot, cells[self._far_pos.get(slot, 0):]) for slot, cells in self._far.items()]
        return ScheduleImage(far, list(self._pending.values()), dict(self._far_ids),
                             set(self._cancelled), list(self._targets), dict(self._near_ids))

    def load(self, cells: array[int], ids: dict[int, str],
             targets: list[Target | None]) -> None:
        """Add snapshot entries (``image_cells`` order: by slot, then entry;
        a target id indexes ``targets``) without replay checks: a slot's run
        of cells at a time, found by binary search on the due column (slots
        ascend) and appended as an array slice — C speed; Python work per
        entry only for one with a schedule id, and target ids are remapped
        (``map``) only when this schedule numbers the targets otherwise."""
        if len(cells) % CELLS:
            raise ValueError(f"{len(cells)} snapshot cells: not whole entries")
        local = [self._tid(target) for target in targets]
        if local != list(range(len(local))):
            cells = array("q", cells)
            cells[3::CELLS] = array("q", list(map(local.__getitem__, cells[3::CELLS])))
        dues = cells[0::CELLS]
        n, start = len(dues), 0
        while start < n:
            slot = dues[start] // SLOT_MS
            end = max(bisect_left(dues, (slot + 1) * SLOT_MS, start), start + 1)
            run = dues[start:end]
            least = min(run)
            if not slot * SLOT_MS <= least <= max(run) < (slot + 1) * SLOT_MS:
                end, least = start + 1, dues[start]  # not ordered by slot: one at a time
            self._extend_far(slot, cells[start * CELLS:end * CELLS], least)
            start = end
        self._count += n
        if ids:
            at = dict(zip(cells[1::CELLS], range(n), strict=True))
            for entry, schedule_id in ids.items():
                i = at.get(entry)
                if i is not None:
                    self._far_ids[entry] = schedule_id
                    key = (self._targets[cells[i * CELLS + 3]], schedule_id)
                    self._name(key, entry, dues[i] // SLOT_MS)

    def loaded(self, last: int) -> None:
        """Snapshot entries are all loaded: a schedule id names its entries in
        entry order again, and nothing up to ``last`` is added twice."""
        self._last = max(self._last, last)
        for key, entries in self._by_id.items():
            if list(entries) != sorted(entries):
                self._by_id[key] = OrderedDict((e, entries[e]) for e in sorted(entries))

    def pending(self) -> list[Pending]:
        """Every pending record, earliest due first (``kcompat scheduled list``)."""
        out = self._made(list(self._pending.values()))
        for slot, cells in self._far.items():
            for i in range(self._far_pos.get(slot, 0), len(cells), CELLS):
                due_ms, entry, offset, tid, where = cells[i:i + CELLS]
                if entry not in self._cancelled:
                    out.append(Pending(entry, due_ms, self._far_ids.get(entry),
                                       self._targets[tid], offset, where))
        return sorted(out, key=lambda p: (p.due_ms, p.entry))


@dataclass(slots=True)
class ScheduleImage:
    """A copy of a schedule's pending entries (``Schedule.export``)."""

    far: list[tuple[int, array[int]]]  # slot -> its cells not promoted yet (some cancelled)
    near: list[Row]  # promoted entries (``ROW``: target ids index ``targets``)
    far_ids: dict[int, str]
    cancelled: set[int]
    targets: list[Target | None]
    near_ids: dict[int, str]  # promoted entry -> its schedule id
