"""The earliest due time the leader reports is the true one.

``DelayService.overdue_s`` (the ``kcompat_delayed_delivery_overdue_seconds``
gauge, and the lateness backpressure weighs) is now minus
``ScheduleLog.earliest_due_ms``. A backlog like the 1M soak's, in small: records of
six targets scheduled in ``adds`` batches with delays of 5-60 s, some
with schedule ids and cancelled, promotion held to a few hundred entries a
turn (a loaded node), so that slots of more than ``PROMOTE_CHUNK`` entries
are partly promoted when they begin, and deliveries planned, cut short
(a delivery batch's byte budget), put in flight and committed in turns as
the service does; some pending records copied forward (``move``). After
every step the earliest due time reported must be the earliest due time
among the records still pending or in flight — or at most one slot
(``SLOT_MS``) below it, and never above it (see ``Schedule.next_due_ms``).
This soak holds with the slot's least due time too (the keys handed out,
deliveries in flight, cancellations and copies forward never leave an old
due time behind); the two tests after it pin the partly promoted slot, which
answered its least due time, delivered long before (they fail so).
"""

from __future__ import annotations

import heapq
import json
import random

from kcompat.ext.schedule import BLOCK, PROMOTE_CHUNK, SLOT_MS, Pending, Schedule
from kcompat.ext.schedule_log import (
    ScheduleLog,
    add_record,
    done_record,
    out_record,
    snapshot_batches,
)
from kcompat.wire.batch import parse_header
from kcompat.wire.records import Record, encode_batch
from tests.unit.ext.test_schedule_snapshot import StoredLog

TARGETS = [("soak-delayed", p) for p in range(6)]
T0 = TARGETS[0]
STEP_MS = 100
PROMOTE_SHARE = 300  # entries promoted a turn: a loaded node
DELIVERY_BATCH = 2_000


def _op(doc: dict[str, object]) -> bytes:
    return json.dumps(doc).encode()


class _Soak:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.slog = ScheduleLog()
        self.offset = 0
        self.hole = {t: 0 for t in TARGETS}
        self.truth: dict[int, int] = {}  # entry -> due: pending or in flight
        self.dues: list[tuple[int, int]] = []  # heap of (due, entry), some gone from truth
        self.ids: dict[tuple[tuple[str, int], str], list[int]] = {}  # id -> entries, in order
        self.next_id = 0
        self.largest_slot = 0

    def _write(self, op: dict[str, object]) -> int:
        at = self.offset
        self.slog.apply_op(at, _op(op))
        self.offset += 1
        return at

    def produce(self, now: int, n: int) -> None:
        """A produced batch of ``n`` records per target, some with ids, and
        cancellations of records scheduled earlier."""
        for target in TARGETS:
            dues = [now + self.rng.randint(5_000, 60_000) for _ in range(n)]
            ids = []
            for i in range(n):
                if self.rng.random() < 0.05:
                    ids.append([i, f"id-{self.next_id}"])
                    self.next_id += 1
            cancels = []
            for key, entries in list(self.ids.items()):
                if key[0] == target and entries and self.rng.random() < 0.2:
                    cancels.append([self.hole[target] + n, key[1]])
                    break
            holes = list(range(self.hole[target], self.hole[target] + n + len(cancels)))
            self.hole[target] += n + len(cancels)
            first = self.offset + 1
            self._write({"op": "adds", "t": target[0], "p": target[1], "src": [-1, -1, -1],
                         "o": holes[:n], "due": dues, "pos": list(range(n)), "ids": ids,
                         "c": cancels})
            self.offset += n
            for i, due in enumerate(dues):
                self.truth[first + i] = due
                heapq.heappush(self.dues, (due, first + i))
            for i, sid in ids:
                self.ids.setdefault((target, sid), []).append(first + i)
            for _hole, sid in cancels:  # the earliest pending one of that id
                entries = self.ids[(target, sid)]
                while entries and entries[0] not in self.truth:
                    entries.pop(0)
                if entries:
                    self.truth.pop(entries.pop(0))
        for cells in self.slog.schedule._far.values():
            self.largest_slot = max(self.largest_slot, len(cells) // 5)

    def turn(self, now: int) -> None:
        """One turn of the leader's loop: promote a share, finish what is in
        flight, plan and start new deliveries (cut short at random)."""
        slog = self.slog
        for target in [*slog.inflight, *slog.due_targets(now, PROMOTE_SHARE)]:
            delivery = slog.inflight.get(target)
            if delivery is not None:
                if self.rng.random() < 0.7:  # committed this turn, else still sending
                    self._write({"op": "done", "t": target[0], "p": target[1],
                                 "seq": delivery.seq})
                    for p in delivery.entries:
                        self.truth.pop(p.entry, None)
                continue
            entries = slog.schedule.due(now, DELIVERY_BATCH, target)
            if not entries:
                continue
            cut = self.rng.randint(1, len(entries))  # what fits the byte budget
            chosen = entries[:cut]
            self._write({"op": "out", "t": target[0], "p": target[1], "at": now,
                         "e": [p.entry for p in chosen], "u": [p.due_ms for p in chosen]})

    def move_some(self, now: int) -> None:
        """A compaction copies a few pending records forward."""
        pending = self.slog.schedule.pending()
        for p in self.rng.sample(pending, min(20, len(pending))):
            assert p.target is not None
            self._write({"op": "move", "e": p.entry, "u": p.due_ms, "t": p.target[0],
                         "p": p.target[1], "at": now})

    def check(self, now: int) -> None:
        reported = self.slog.earliest_due_ms()
        if not self.truth:
            assert reported is None
            return
        while self.dues[0][1] not in self.truth:
            heapq.heappop(self.dues)
        true = self.dues[0][0]
        assert reported is not None, (now, true)
        assert true - SLOT_MS <= reported <= true, (now, reported, true, true - reported)


def _listed(slog: ScheduleLog) -> dict[int, int]:
    return {p.entry: p.due_ms for p, _flight in slog.listing()}


def test_the_earliest_due_reported_is_the_earliest_pending_through_a_soak() -> None:
    soak = _Soak(31)
    now = 1_000_000_000
    for step in range(900):  # 90 s: 60 s producing, then the drain
        if step < 600:
            soak.produce(now, 10)
        soak.turn(now)
        soak.check(now)
        if step % 100 == 50:
            soak.move_some(now)
            soak.check(now)
            assert _listed(soak.slog) == soak.truth
        now += STEP_MS
    assert soak.largest_slot > PROMOTE_CHUNK  # a slot promoted over many turns
    while soak.truth:
        soak.turn(now)
        soak.check(now)
        now += STEP_MS
    assert soak.slog.earliest_due_ms() is None
    assert len(soak.slog) == 0


def test_the_earliest_due_ignores_handed_out_entries_that_were_taken() -> None:
    slog = ScheduleLog()
    t = TARGETS[0]
    slog.apply_op(0, _op({"op": "adds", "t": t[0], "p": t[1], "src": [-1, -1, -1],
                          "o": [0, 1, 2], "due": [1_000, 2_000, 3_000], "pos": [0, 1, 2],
                          "ids": [[0, "a"]]}))
    handed = slog.schedule.due(5_000, 10, t)
    assert [p.entry for p in handed] == [1, 2, 3]
    slog.apply_op(4, _op({"op": "cancel", "t": t[0], "p": t[1], "o": 9, "id": "a",
                          "src": [-1, -1, -1]}))
    slog.apply_op(5, _op({"op": "out", "t": t[0], "p": t[1], "at": 5_000, "e": [2],
                          "u": [2_000]}))
    assert slog.earliest_due_ms() == 2_000  # in flight
    slog.apply_op(6, _op({"op": "done", "t": t[0], "p": t[1], "seq": 0}))
    assert slog.earliest_due_ms() == 3_000
    assert [Pending._make(p) for p in [(3, 3_000, None, t, 2, -1)]] == \
        [p for p, _ in slog.listing()]


def test_a_slot_partly_promoted_reports_the_earliest_of_what_is_left() -> None:
    """A slot of 5,000 records due over its ten seconds in log order (the
    earliest first): once its first 2,000 are promoted and delivered, the
    earliest pending record is the 2,001st, not the slot's first (the
    gauge read the slot's least due time, delivered long ago)."""
    schedule = Schedule()
    start = 100 * SLOT_MS
    n = 5 * PROMOTE_CHUNK // 2
    dues = [start + i * SLOT_MS // n for i in range(n)]
    schedule.add_run(0, dues, T0, list(range(n)), [-1] * n, {})
    assert schedule.next_due_ms() == start
    now = start + SLOT_MS // 2
    assert not schedule.promote(now, limit=PROMOTE_CHUNK)  # the rest not yet
    for entry in range(PROMOTE_CHUNK):  # promoted, then delivered
        assert schedule.delivered(entry) is not None
    assert schedule.next_due_ms() == dues[PROMOTE_CHUNK]
    # added to its end meanwhile (a record produced with a short delay): counted
    schedule.add(n, start + 1, None, T0)
    assert schedule.next_due_ms() == start + 1
    assert schedule.delivered(n) is None  # still far: taken as a replica takes it
    assert schedule.take(n, start + 1) is not None
    # a taken far entry is still counted until promoted: one slot early at most
    assert dues[PROMOTE_CHUNK] - SLOT_MS <= schedule.next_due_ms() <= dues[PROMOTE_CHUNK]
    assert schedule.promote(now, limit=None)
    assert schedule.next_due_ms() == dues[PROMOTE_CHUNK]


def test_block_minima_follow_runs_and_single_adds() -> None:
    """Entries added one by one and in runs, across block boundaries: the
    rest of a slot promoted in uneven steps is known exactly at each step."""
    rng = random.Random(7)
    schedule = Schedule()
    start = 50 * SLOT_MS
    entry, dues = 0, []
    while len(dues) < 3 * BLOCK + 100:
        k = rng.choice([1, 1, 7, 300, BLOCK])
        run = [start + rng.randrange(SLOT_MS) for _ in range(k)]
        if k == 1:
            schedule.add(entry, run[0], None, T0)
        else:
            schedule.add_run(entry, run, T0, [-1] * k, [-1] * k, {})
        entry += k
        dues += run
    done = 0
    while done < len(dues) - PROMOTE_CHUNK:
        step = rng.randint(1, 700)
        schedule.promote(start, limit=step)
        for promoted in range(done, done + step):  # delivered
            assert schedule.delivered(promoted) is not None
        done += step
        assert schedule.next_due_ms() == min(dues[done:]), done


def test_far_entries_taken_or_cancelled_leave_no_old_due_time_behind() -> None:
    """A restarted leader (or a replica) holds its snapshot's entries far and
    re-applies the deliveries written after it: ``take`` finds them in the
    far form. A slot whose every entry was delivered so, or cancelled, must
    not answer its old least due time (it read minutes early: the restart's
    overdue gauge), nor one whose rest was."""
    schedule = Schedule()
    first, second, third = 100 * SLOT_MS, 101 * SLOT_MS, 102 * SLOT_MS
    n = 2 * PROMOTE_CHUNK
    dues = [first + i for i in range(n)] + [second + 5 + i for i in range(n)]
    schedule.add_run(0, dues, T0, list(range(2 * n)), [-1] * (2 * n),
                     {i: f"id-{i}" for i in range(n, 2 * n, 2)})
    schedule.add_run(2 * n, [third + 7] * n, T0, [-1] * n, [-1] * n, {})
    assert schedule.next_due_ms() == first
    for i in range(n):  # the first slot, delivered after the snapshot
        assert schedule.take(i, dues[i]) is not None
    assert schedule.next_due_ms() == second + 5
    for i in range(n, 2 * n, 2):  # half the second slot cancelled, half taken
        assert schedule.cancel(f"id-{i}", T0) is not None
        assert schedule.take(i + 1, dues[i + 1]) is not None
    assert schedule.next_due_ms() == third + 7
    assert len(schedule) == n
    assert [p.due_ms for p in schedule.due(third + 7, 3, T0)] == [third + 7] * 3


def test_a_leader_rebuilt_from_a_snapshot_reports_the_earliest_still_pending() -> None:
    """The restart path whole: 6,000 records over two slots, a snapshot, then
    the first slot delivered (``out`` and ``done``); a machine rebuilt from
    the snapshot re-applies those deliveries to entries it holds far, and
    must report the second slot's earliest, as the machine that lived
    through it does (it reported the first slot's, delivered long before)."""
    log, full = StoredLog(), ScheduleLog()

    def put(batch: bytes) -> None:
        log.write(batch)
        view = memoryview(log.batches[-1])
        full.feed(view, parse_header(view))

    first, second = 100 * SLOT_MS, 101 * SLOT_MS
    n = 3_000
    dues = [first + i % SLOT_MS for i in range(n)] + [second + 9 + i for i in range(n)]
    for start in range(0, 2 * n, 500):
        put(encode_batch([add_record(Record(o, 0, b"k%d" % o, b"v", ()), T0, dues[o], None,
                                     (-1, -1, -1), ()) for o in range(start, start + 500)]))
    low = log.end
    for batch in snapshot_batches(full.capture(log.end), second)[0]:
        put(batch)
    now = first + SLOT_MS
    while (due := full.schedule.due(now, 1_000, T0)):
        put(encode_batch([out_record(T0, due, now)]))
        put(encode_batch([done_record(T0, full.inflight[T0].seq, now)]))
    assert full.earliest_due_ms() == second + 9
    rebuilt = ScheduleLog(fresh_from=low, reread=log.reread)
    for view, header in log.from_(low):
        rebuilt.feed(view, header)
    assert rebuilt.fresh_from is None and len(rebuilt) == n
    assert rebuilt.earliest_due_ms() == second + 9
