"""The run-based share-partition machine against the record-by-record one it
replaced (``_share_model``): the same answers, states, updates, dead letters
and deadlines for any sequence of operations; and the work an operation does
follows the runs it touches, not the records."""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcompat.group import share_partition as new
from tests.unit.group import _share_model as old

MEMBERS = ("a", "b", "c")


def norm(value: Any) -> Any:
    """Dataclasses of either module as plain tuples (their enums are ints)."""
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return norm(list(astuple(value)))
    if isinstance(value, dict):
        return {int(k): v for k, v in value.items()}
    return int(value) if isinstance(value, int) else value


def log_of(data: st.DataObject, size: int, keyed: bool) -> list[tuple[int, bytes | None]]:
    """The records of a log of ``size`` offsets: some offsets missing (gaps),
    some with a group key."""
    present = data.draw(st.lists(st.booleans(), min_size=size, max_size=size))
    keys = data.draw(st.lists(st.sampled_from([None, b"x", b"y"]) if keyed else st.none(),
                              min_size=size, max_size=size))
    return [(o, keys[o]) for o in range(size) if present[o] or o % 7 == 0]


def ack_batches(data: st.DataObject, lo: int, hi: int) -> list[tuple[int, int, list[int]]]:
    out: list[tuple[int, int, list[int]]] = []
    at = lo + data.draw(st.integers(0, 3))
    for _ in range(data.draw(st.integers(1, 3))):
        size = data.draw(st.integers(1, 8))
        if data.draw(st.booleans()):
            types = [data.draw(st.integers(0, 4))]
        else:
            types = data.draw(st.lists(st.integers(0, 4), min_size=size, max_size=size))
        out.append((at, at + size - 1, types))
        at += size + data.draw(st.integers(0, 2))
        if at > hi + 3:
            break
    if data.draw(st.integers(0, 20)) == 0:  # malformed now and then
        out.reverse()
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_runs_answer_as_one_slot_per_record(data: st.DataObject) -> None:
    keyed = data.draw(st.booleans())
    cfg_args = dict(record_lock_duration_ms=data.draw(st.sampled_from([5, 20, 100])),
                    delivery_count_limit=data.draw(st.integers(1, 5)),
                    max_record_locks=data.draw(st.integers(1, 30)),
                    ordering_message_group=keyed,
                    redelivery_backoff_ms=data.draw(st.sampled_from([0, 0, 3])))
    start = data.draw(st.integers(0, 3))
    a = new.SharePartition(start, new.ShareConfig(**cfg_args))
    b = old.SharePartition(start, old.ShareConfig(**cfg_args))
    replica_a = new.SharePartition.restore(a.snapshot())
    replica_b = old.SharePartition.restore(b.snapshot())
    log = log_of(data, 60, keyed)
    now = 0
    for _step in range(data.draw(st.integers(1, 40))):
        now += data.draw(st.integers(0, 12))
        op = data.draw(st.sampled_from(["acquire", "acquire", "ack", "ack", "tick",
                                        "release", "log_start", "update"]))
        if op == "acquire":
            member = data.draw(st.sampled_from(MEMBERS))
            n = data.draw(st.integers(0, 12))
            end = data.draw(st.integers(0, 60))
            ra, rb = a.read_offset, b.read_offset
            got_a = a.acquire(member, n, now, ((o, k) for o, k in log if ra <= o < end), end)
            got_b = b.acquire(member, n, now, ((o, k) for o, k in log if rb <= o < end), end)
            assert norm(got_a) == norm(got_b)
        elif op == "ack":
            member = data.draw(st.sampled_from(MEMBERS))
            batches = ack_batches(data, a.start_offset, a.read_offset)
            assert a.acknowledge(member, batches, now) == b.acknowledge(member, batches, now)
        elif op == "tick":
            assert a.tick(now) == b.tick(now)
        elif op == "release":
            member = data.draw(st.sampled_from(MEMBERS))
            assert a.release_member(member, now) == b.release_member(member, now)
        elif op == "log_start":
            to = a.start_offset + data.draw(st.integers(0, 4))
            a.advance_log_start(to)
            b.advance_log_start(to)
        else:
            assert a.has_update == b.has_update
            update_a, update_b = a.take_update(), b.take_update()
            assert norm(update_a) == norm(update_b)
            replica_a.apply(update_a)
            replica_b.apply(update_b)
            assert norm(replica_a.snapshot()) == norm(replica_b.snapshot())
        assert (a.start_offset, a.read_offset, a.end_offset) == (
            b.start_offset, b.read_offset, b.end_offset)
        assert norm(a.snapshot()) == norm(b.snapshot())
        assert norm(a.take_dead_letters()) == norm(b.take_dead_letters())
        assert a.next_deadline_ms() == b.next_deadline_ms()
        assert norm(a.counts()) == norm(b.counts())
    assert norm(new.SharePartition.restore(a.snapshot()).snapshot()) == norm(
        old.SharePartition.restore(b.snapshot()).snapshot())


def test_state_entries_follow_acknowledged_batches_not_records() -> None:
    """Four members take 500 records each and acknowledge each fetch as one
    batch: the window is kept as a handful of runs, each update as one batch
    per acknowledgement (one slot per record kept 2,000 entries)."""
    sp = new.SharePartition(0, new.ShareConfig(max_record_locks=2000))
    log = [(o, None) for o in range(2000)]
    got = {m: sp.acquire(m, 500, 0, iter(log[sp.read_offset:]), 2000)
           for m in ("a", "b", "c", "d")}
    assert all(len(r) == 1 for r in got.values())
    assert sp.run_count == 4  # one per member's acquisition
    sp.take_update()
    for m in ("b", "d"):
        r = got[m][0]
        ack = new.AckType.ACCEPT
        assert sp.acknowledge(m, [(r.first_offset, r.last_offset, [int(ack)])], 1) == (
            new.ErrorCode.none)
    update = sp.take_update()
    assert len(update.batches) == 2 and sp.run_count == 4
    # c accepts all but one record, released: acknowledged runs join their neighbours
    r = got["c"][0]
    types = [int(new.AckType.ACCEPT)] * 500
    types[250] = int(new.AckType.RELEASE)
    assert sp.acknowledge("c", [(r.first_offset, r.last_offset, types)], 2) == (
        new.ErrorCode.none)
    assert sp.run_count == 4  # a's; b's and c's head; the released record; c's tail and d's
    assert len(sp.take_update().batches) == 3
    assert sp.counts()[new.RecordState.ACKNOWLEDGED] == 500 + 499 + 500
