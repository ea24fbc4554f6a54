"""Snapshots of the schedule log: a machine rebuilt from the log start (a
snapshot, then what follows) holds exactly what a machine that applied the
whole history holds — whatever was written around and between the
snapshot's batches — and records copied forward keep their identity."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from kcompat.ext.schedule_adds import AddParts, adds_batch
from kcompat.ext.schedule_log import (
    SCHEDULE_TOPIC,
    ScheduleLog,
    StoredRecords,
    add_record,
    cancel_record,
    delivered_form,
    done_record,
    drop_record,
    is_snapshot_batch,
    move_record,
    out_record,
    snapshot_batches,
)
from kcompat.wire.batch import BatchHeader, parse_header
from kcompat.wire.records import (
    Record,
    RecordInput,
    encode_batch,
    encode_headers,
    encode_key_value,
    encode_marker_batch,
    record_tail,
)

TARGETS = [("orders", 0), ("orders", 1), ("audit", 0)]


class StoredLog:
    """An in-memory schedule log of stored batches with consecutive offsets."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.end = 0

    def write(self, batch: bytes) -> int:
        base = self.end
        data = bytearray(batch)
        data[0:8] = base.to_bytes(8, "big")
        header = parse_header(bytes(data))
        self.batches.append(bytes(data))
        self.end = header.next_offset
        return base

    def from_(self, start: int, end: int | None = None) -> Iterator[tuple[memoryview, BatchHeader]]:
        for data in self.batches:
            header = parse_header(data)
            if header.next_offset > start and (end is None or header.base_offset < end):
                yield memoryview(data), header

    def reread(self, machine: ScheduleLog, start: int, end: int) -> None:
        for view, header in self.from_(start, end):
            machine.feed(view, header)

    def slice_at(self, offset: int) -> object:
        for data in self.batches:
            header = parse_header(data)
            if header.base_offset <= offset < header.next_offset:
                return _Slice(data)
        raise AssertionError(f"no batch holds {offset}")


class _Slice:
    def __init__(self, data: bytes) -> None:
        self.file = self
        self.position = 0
        self.length = len(data)
        self._data = data

    def pread(self, size: int, position: int) -> bytes:
        return self._data[position:position + size]


def _state(m: ScheduleLog) -> object:
    return (sorted((p.entry, p.due_ms, p.schedule_id, p.target, p.offset, moving)
                   for p, moving in m.listing()),
            sorted(m.next_seq.items()), sorted(m.pending_by_target.items()),
            sorted((pid, [(o, op) for o, op, _w in ops]) for pid, ops in m.held.items()),
            [(k, [(b, sorted(h)) for b, h in v.items()]) for k, v in m._seen.items()],
            m.schedule.last_entry, len(m))


class World:
    """A leader writing a random schedule log; ``full`` applied all of it."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.log = StoredLog()
        self.full = ScheduleLog()
        self.now = 1_000_000
        self.hole = 0
        self.open_txn: set[int] = set()

    def put(self, batch: bytes) -> None:
        base = self.log.write(batch)
        view = memoryview(self.log.batches[-1])
        self.full.feed(view, parse_header(view))
        assert base >= 0

    def add(self, n: int, transactional: bool = False) -> None:
        """``n`` records produced together, written as one ``adds`` op (or,
        half the time, one JSON ``add`` op each, as older brokers wrote them)."""
        rng = self.rng
        pid = rng.choice([-1, 7, 8, 9]) if not transactional else 50 + rng.randrange(3)
        source = rng.choice(TARGETS)
        records: list[RecordInput] = []
        parts: list[AddParts] = []
        dues, ids, tids = [], [], []
        for i in range(n):
            self.hole += 1
            target = rng.choice(TARGETS)
            due = self.now + rng.choice([0, 500, 20_000, 90_000, 3_000_000])
            sid = rng.choice([None, None, "a", "b", "c"])
            rec = Record(self.hole, self.now, b"k%d" % self.hole, b"v%d" % self.hole,
                         (("h", b"x"),))
            records.append(add_record(rec, target, due, sid, (pid, 0, self.hole - i),
                                      rec.headers, source))
            parts.append((rec.timestamp, record_tail(encode_key_value(rec.key, rec.value), 1,
                                                     encode_headers(rec.headers))))
            dues.append(due)
            ids += [(i, sid)] if sid is not None else []
            tids.append(TARGETS.index(target))
        holes = list(range(self.hole - n + 1, self.hole + 1))
        txn = {"producer_id": pid, "producer_epoch": 0, "transactional": True}
        if rng.random() < 0.5:
            others = [t for t in TARGETS if t != source]
            batch = adds_batch(source, (pid, 0, self.hole - n + 1), parts, holes, dues, ids=ids,
                               targets=others, target_of=[
                                   0 if TARGETS[t] == source else others.index(TARGETS[t]) + 1
                                   for t in tids], timestamp=self.now,
                               **(txn if transactional else {}))
        else:
            batch = encode_batch(records, **(txn if transactional else {}))  # type: ignore[arg-type]
        if rng.random() < 0.1 and records and pid >= 0 and not transactional:  # a retry
            self.put(batch)
        if transactional:
            self.open_txn.add(pid)
        self.put(batch)

    def step(self) -> None:
        rng, m = self.rng, self.full
        self.now += rng.choice([0, 100, 1_000, 15_000])
        roll = rng.random()
        if roll < 0.35:
            self.add(rng.randint(1, 6), transactional=rng.random() < 0.15)
        elif roll < 0.45:
            target = rng.choice(TARGETS)
            self.put(encode_batch([cancel_record(target[0], target[1], 0, rng.choice("abc"),
                                                 (-1, -1, -1), self.now)]))
        elif roll < 0.65:
            for target in m.due_targets(self.now):
                if target is not None and target not in m.inflight:
                    due = m.schedule.due(self.now, rng.randint(1, 5), target)
                    self.put(encode_batch([out_record(target, due, self.now)]))
                    break
        elif roll < 0.8 and m.inflight:
            target = rng.choice(sorted(m.inflight))
            self.put(encode_batch([done_record(target, m.inflight[target].seq, self.now)]))
        elif roll < 0.9:
            pending = m.schedule.pending()
            if pending:  # copy some forward, as the leader does before a snapshot
                stored = StoredRecords(self.log.slice_at)  # type: ignore[arg-type]
                chosen = rng.sample(pending, min(len(pending), rng.randint(1, 4)))
                self.put(encode_batch([move_record(stored.record(p), p, self.now)
                                       for p in chosen]))
        elif roll < 0.95 and self.open_txn:
            pid = rng.choice(sorted(self.open_txn))
            self.open_txn.discard(pid)
            self.put(encode_marker_batch(rng.random() < 0.7, producer_id=pid, producer_epoch=0,
                                         coordinator_epoch=0, timestamp=self.now))
        elif roll < 0.97:
            target = rng.choice(TARGETS)
            self.put(encode_batch([drop_record(target, self.now)]))

    def snapshot(self, interleave: int) -> int:
        """Write a snapshot of ``full`` with ``interleave`` steps written while
        its batches go out; the log start it allows."""
        capture = self.full.capture(self.log.end)
        batches, low = snapshot_batches(capture, self.now)
        for batch in batches:
            for _ in range(self.rng.randint(0, interleave)):
                self.step()
            self.put(batch)
        return low


@pytest.mark.parametrize("seed", range(40))
def test_a_machine_rebuilt_from_the_log_start_holds_what_the_whole_history_gives(
        seed: int) -> None:
    world = World(seed)
    for _ in range(world.rng.randint(20, 120)):
        world.step()
    low = world.snapshot(interleave=3)
    for _ in range(world.rng.randint(0, 40)):
        world.step()
    rebuilt = ScheduleLog(fresh_from=low, reread=world.log.reread)
    for view, header in world.log.from_(low):
        rebuilt.feed(view, header)
    assert rebuilt.fresh_from is None, "the snapshot was installed"
    assert _state(rebuilt) == _state(world.full)
    # and it goes on alike: it is the same machine
    for _ in range(40):
        seen = len(world.log.batches)
        world.step()
        for data in world.log.batches[seen:]:
            rebuilt.feed(memoryview(data), parse_header(data))
    assert _state(rebuilt) == _state(world.full)
    # every pending record still reads back from what the log keeps
    kept = StoredLog()
    for data in world.log.batches:
        if parse_header(data).next_offset > low:
            kept.batches.append(data)
    stored = StoredRecords(kept.slice_at)  # type: ignore[arg-type]
    for pending, _moving in rebuilt.listing():
        record = stored.record(pending)
        assert record.key == b"k%d" % pending.offset


def test_a_snapshot_taken_below_the_log_start_is_not_used() -> None:
    world = World(3)
    for _ in range(60):
        world.step()
    world.snapshot(interleave=0)
    after = world.log.end
    for _ in range(30):
        world.step()
    low = world.snapshot(interleave=0)
    assert low >= 0
    rebuilt = ScheduleLog(fresh_from=after, reread=world.log.reread)
    for view, header in world.log.from_(after):
        rebuilt.feed(view, header)
    assert rebuilt.snapshot_at >= after
    assert _state(rebuilt) == _state(world.full)


def test_a_moved_record_is_delivered_as_it_was_produced() -> None:
    world = World(1)
    world.add(3)
    stored = StoredRecords(world.log.slice_at)  # type: ignore[arg-type]
    pending = world.full.schedule.pending()
    originals = {p.entry: delivered_form(stored.record(p)) for p in pending}
    world.put(encode_batch([move_record(stored.record(p), p, world.now) for p in pending]))
    moved = world.full.schedule.pending()
    assert [p.entry for p in moved] == [p.entry for p in pending]
    assert all(p.base > p.entry for p in moved), "read from the copies"
    fresh = StoredRecords(world.log.slice_at)  # type: ignore[arg-type]
    assert {p.entry: delivered_form(fresh.record(p)) for p in moved} == originals


def test_a_move_of_a_record_no_longer_pending_changes_nothing() -> None:
    world = World(2)
    world.add(2)
    stored = StoredRecords(world.log.slice_at)  # type: ignore[arg-type]
    first = world.full.schedule.pending()[0]
    record = stored.record(first)
    target = first.target
    assert target is not None
    world.now = first.due_ms
    world.put(encode_batch([out_record(target, [first], world.now)]))
    before = _state(world.full)
    world.put(encode_batch([move_record(record, first, world.now)]))
    assert _state(world.full) == before
    assert world.full.inflight[target].entries[0].where == first.where


def test_snapshot_batches_are_marked_in_their_header() -> None:
    world = World(4)
    for _ in range(30):
        world.step()
    batches, _low = snapshot_batches(world.full.capture(world.log.end), world.now)
    assert all(is_snapshot_batch(parse_header(b)) for b in batches)
    assert not any(is_snapshot_batch(parse_header(b)) for b in world.log.batches)
    assert SCHEDULE_TOPIC == "__kc_schedule"
