"""The schedule log's state machine: adds, duplicates of retried produces,
cancellation, deliveries in flight, replay."""

from __future__ import annotations

from kcompat.ext.delay import SCHEDULED_OFFSET
from kcompat.ext.schedule_log import (
    ScheduleLog,
    add_record,
    cancel_record,
    delivered_form,
    done_record,
    drop_record,
    out_record,
)
from kcompat.wire.records import Record, RecordInput

T = ("orders", 2)


class Log:
    """A schedule log: records get consecutive offsets, batches are applied."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.batches: list[list[Record]] = []

    def write(self, *inputs: RecordInput) -> list[Record]:
        batch = [Record(len(self.records) + i, ts, k, v, tuple(h))
                 for i, (k, v, h, ts) in enumerate(inputs)]
        self.records += batch
        self.batches.append(batch)
        return batch

    def replay(self) -> ScheduleLog:
        machine = ScheduleLog()
        for batch in self.batches:
            machine.apply_batch(batch)
        return machine


def _adds(offsets: list[int], due: int, src: tuple[int, int, int], sid: str | None = None
          ) -> list[RecordInput]:
    return [add_record(Record(o, 5, b"k%d" % o, b"v", (("h", b"1"),)), T, due, sid, src,
                       (("h", b"1"), (SCHEDULED_OFFSET, b"%d" % o))) for o in offsets]


def test_a_retried_produce_is_scheduled_once_and_a_new_one_is_not_lost() -> None:
    log, m = Log(), ScheduleLog()
    m.apply_batch(log.write(*_adds([10, 11], 100, (7, 0, 0))))
    m.apply_batch(log.write(*_adds([10, 11], 100, (7, 0, 0))))  # the retry
    assert len(m) == 2
    m.apply_batch(log.write(*_adds([12], 100, (7, 0, 2))))  # the next batch
    m.apply_batch(log.write(*_adds([13], 100, (-1, -1, -1))))  # not idempotent
    m.apply_batch(log.write(*_adds([13], 100, (-1, -1, -1))))  # at least once, as Kafka
    assert len(m) == 5
    assert len(log.replay()) == 5


def test_cancel_is_scoped_to_its_partition() -> None:
    log, m = Log(), ScheduleLog()
    m.apply_batch(log.write(*_adds([1], 100, (-1, -1, -1), sid="job")))
    other = add_record(Record(1, 5, None, b"x"), ("orders", 3), 100, "job", (-1, -1, -1), ())
    m.apply_batch(log.write(other))
    m.apply_batch(log.write(cancel_record(T[0], T[1], 9, "job", (-1, -1, -1), 50)))
    assert m.pending_by_target == {("orders", 3): 1}
    assert [p.target for p in m.schedule.pending()] == [("orders", 3)]


def test_a_delivery_fixes_its_entries_and_sequence_until_done() -> None:
    log, m = Log(), ScheduleLog()
    m.apply_batch(log.write(*_adds([10, 11, 12], 100, (7, 0, 0), sid=None)))
    assert m.due_targets(99) == [] and m.due_targets(100) == [T]
    entries = [p.entry for p in m.schedule.due(100, 2, T)]
    assert entries == [0, 1]
    m.apply_batch(log.write(out_record(T, entries, 100)))
    flight = m.inflight[T]
    assert flight.seq == 0 and [p.offset for p in flight.entries] == [10, 11]
    assert m.due_targets(100) == []  # one delivery per target at a time
    m.apply_batch(log.write(done_record(T, 0, 101)))
    assert T not in m.inflight
    assert m.due_targets(100) == [T]
    rest = [p.entry for p in m.schedule.due(100, 10, T)]
    m.apply_batch(log.write(out_record(T, rest, 102)))
    assert m.inflight[T].seq == 2  # sequences continue per target
    replayed = log.replay()  # a follower (or a new leader) holds the same flight
    assert replayed.inflight == m.inflight and replayed.next_seq == m.next_seq


def test_a_delivery_stored_while_its_done_waits_counts_as_delivered() -> None:
    """The leader holds a stored delivery's ``done`` back until its next
    ``out``; meanwhile its records are neither waiting nor overdue."""
    log, m = Log(), ScheduleLog()
    m.apply_batch(log.write(*_adds([10, 11], 100, (7, 0, 0))))
    m.apply_batch(log.write(*_adds([12], 200, (7, 0, 2))))
    m.apply_batch(log.write(out_record(T, [p.entry for p in m.schedule.due(100, 2, T)], 100)))
    assert m.waiting_by_target() == {T: 3} and m.earliest_due_ms() == 100  # in flight
    assert [flight for _p, flight in m.listing()] == [True, True, False]
    m.stored.add(T)  # appended to the target; its done not committed yet
    assert m.waiting_by_target() == {T: 1} and m.earliest_due_ms() == 200
    assert [(p.offset, flight) for p, flight in m.listing()] == [(12, False)]
    assert len(m) == 3  # the machine's own state is unchanged: still in flight
    m.apply_batch(log.write(done_record(T, 0, 201),
                            out_record(T, [p.entry for p in m.schedule.due(200, 2, T)], 201)))
    assert T not in m.stored and m.waiting_by_target() == {T: 1}  # the next delivery's
    assert m.earliest_due_ms() == 200
    assert log.replay().waiting_by_target() == {T: 1}  # a replica never marks one


def test_a_cancel_before_the_out_record_wins_and_the_rest_is_delivered() -> None:
    log, m = Log(), ScheduleLog()
    m.apply_batch(log.write(*_adds([10], 100, (-1, -1, -1), sid="a")))
    m.apply_batch(log.write(*_adds([11], 100, (-1, -1, -1), sid="b")))
    planned = [p.entry for p in m.schedule.due(100, 10, T)]
    m.apply_batch(log.write(cancel_record(T[0], T[1], 20, "a", (-1, -1, -1), 100)))
    m.apply_batch(log.write(out_record(T, planned, 100)))
    assert [p.offset for p in m.inflight[T].entries] == [11]
    # too late now: the record is on its way
    m.apply_batch(log.write(cancel_record(T[0], T[1], 21, "b", (-1, -1, -1), 100)))
    assert [p.offset for p in m.inflight[T].entries] == [11]


def test_drop_forgets_a_deleted_partition() -> None:
    log, m = Log(), ScheduleLog()
    m.apply_batch(log.write(*_adds([10, 11], 100, (-1, -1, -1))))
    m.apply_batch(log.write(out_record(T, [0], 100)))
    m.apply_batch(log.write(drop_record(T, 100)))
    assert len(m) == 0 and m.pending_by_target == {} and m.inflight == {}


def test_the_delivered_form_keeps_the_record_and_names_its_hole() -> None:
    log = Log()
    (stored,) = log.write(*_adds([42], 100, (-1, -1, -1)))
    key, value, headers, ts = delivered_form(stored)
    assert (key, value, ts) == (b"k42", b"v", 5)
    assert headers == (("h", b"1"), (SCHEDULED_OFFSET, b"42"))


def test_a_transactions_records_wait_for_its_marker() -> None:
    m = ScheduleLog()
    log = Log()
    m.hold(7, log.write(*_adds([10, 11], 100, (7, 0, 0))))
    m.hold(8, log.write(*_adds([20], 100, (8, 0, 0))))
    assert len(m) == 0  # nothing scheduled before the outcome
    m.end_txn(8, commit=False)
    m.end_txn(7, commit=True)
    assert sorted(p.offset for p in m.schedule.pending()) == [10, 11]
    m.end_txn(7, commit=True)  # a second marker: nothing left to apply
    assert len(m) == 2 and m.held == {}


def test_a_follower_that_never_asks_what_is_due_holds_the_same_schedule() -> None:
    """The leader promotes far-future slots as they come due, a follower
    keeps them compact: after any sequence of adds, cancels and deliveries
    both must hold the same records (the follower may take over any time),
    and the same deliveries in the same order."""
    from random import Random

    from kcompat.ext.schedule import SLOT_MS

    for seed in range(60):
        rng = Random(seed)
        log, leader, follower = Log(), ScheduleLog(), ScheduleLog()
        now, hole = 1_000_000, 0
        for _ in range(120):
            roll = rng.random()
            if roll < 0.5:
                hole += 1
                due = now + rng.randrange(-SLOT_MS, 5 * SLOT_MS)
                sid = rng.choice([None, "a", "b"])
                batch = log.write(add_record(Record(hole, 5, None, b"v"), T, due, sid,
                                             (-1, -1, -1), ()))
            elif roll < 0.6:
                batch = log.write(cancel_record(T[0], T[1], -1, rng.choice("ab"),
                                                (-1, -1, -1), now))
            elif roll < 0.8 and T not in leader.inflight:
                now += rng.randrange(3 * SLOT_MS)
                due = (leader.schedule.due(now, rng.randint(1, 4), T)
                       if T in leader.due_targets(now) else [])
                if not due:
                    continue
                # with their due times (the follower takes them from its far
                # slots: ``take_all``), or as entries only (an older leader's)
                batch = log.write(out_record(T, due if seed % 2 else [p.entry for p in due],
                                             now))
            elif T in leader.inflight:
                batch = log.write(done_record(T, leader.inflight[T].seq, now))
            else:
                continue
            leader.apply_batch(batch)
            follower.apply_batch(batch)
            assert leader.listing() == follower.listing()
            assert leader.inflight == follower.inflight and len(leader) == len(follower)
        assert leader.pending_by_target == follower.pending_by_target


def test_records_the_broker_did_not_write_are_ignored() -> None:
    m = ScheduleLog()
    junk = [Record(0, 1, None, b"x", (("kc-internal", b'{"op": "add"}'),)),
            Record(1, 1, None, b"x", (("kc-internal", b'{"op": "out", "t": 1}'),)),
            Record(2, 1, None, b"x", (("kc-internal", b"not json"),)),
            Record(3, 1, None, b"x", ())]
    m.apply_batch(junk)
    assert len(m) == 0 and m.inflight == {}
