"""Share-state writes: one record per key per batch, each writer waiting for a
record that holds its changes (``broker.share_writes``)."""

from __future__ import annotations

import trio
import trio.testing
from kio.schema.errors import ErrorCode

from kcompat.broker.groups.share_writes import Held, ShareWriter
from kcompat.group.share_partition import AckType, SharePartition
from kcompat.group.share_state import ShareStateLog, claim_value, encode_key
from kcompat.wire.records import decode_batch

KEY = ("g", "t", 0)


class FakeLog:
    """A state partition whose appends are held until ``release`` (one Raft
    round in flight), folded into a ``ShareStateLog`` as they commit."""

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[bytes] = []
        self.gate = trio.Event()
        self.fail = fail
        self.log = ShareStateLog()
        self.offset = 0
        self.log.apply(encode_key(KEY), claim_value("n"), self.offset)  # generation 1
        self.offset += 1

    async def append(self, _index: int, batch: bytes) -> ErrorCode:
        self.batches.append(batch)
        await self.gate.wait()
        if self.fail:
            return ErrorCode.request_timed_out
        for record in decode_batch(memoryview(batch)):
            self.log.apply(record.key, record.value, self.offset)
            self.offset += 1
        return ErrorCode.none

    def records(self) -> int:
        return sum(len(decode_batch(memoryview(b))) for b in self.batches)


def run_writes(fake: FakeLog, requests: int) -> tuple[Held, list[list[tuple[Held, ErrorCode]]]]:
    """An initial full write, then ``requests`` requests that each acquire and
    acknowledge records and write, all while the first batch is in flight."""
    results: list[list[tuple[Held, ErrorCode]]] = []

    async def main() -> None:
        nursery_box: list[trio.Nursery] = []

        def spawn(fn, *args) -> bool:  # type: ignore[no-untyped-def]
            nursery_box[0].start_soon(fn, *args)
            return True

        writer = ShareWriter(fake.append, spawn, lambda: 1000)
        held = Held(KEY, SharePartition(0), generation=1, term=1, state_index=0)
        box.append(held)

        async def request(i: int) -> None:
            got = held.machine.acquire(f"m{i}", 10, 1000, ((o, None) for o in range(100)), 100)
            if i % 2:
                first, last = got[0].first_offset, got[-1].last_offset
                held.machine.acknowledge(f"m{i}", [(first, last, (int(AckType.ACCEPT),))], 1000)
            results.append(await writer.write([(held, False)]))

        async with trio.open_nursery() as nursery:
            nursery_box.append(nursery)
            nursery.start_soon(lambda: _first(writer, held))
            await trio.testing.wait_all_tasks_blocked()
            for i in range(requests):
                nursery.start_soon(request, i)
            await trio.testing.wait_all_tasks_blocked()
            assert len(fake.batches) == 1  # the others wait for the first one
            fake.gate.set()

    async def _first(writer: ShareWriter, held: Held) -> None:
        results.append(await writer.write([(held, True)], initial=True))

    box: list[Held] = []
    trio.run(main)
    return box[0], results


def test_requests_during_a_round_share_one_record() -> None:
    fake = FakeLog()
    held, results = run_writes(fake, 8)
    assert fake.records() == 2  # the initial snapshot, then one update for all eight
    assert len(fake.batches) == 2
    assert all(r == [] for r in results)
    assert held.seq == 2
    # the folded state is the machine's: nothing of the eight requests is lost
    folded = fake.log.machine(KEY)
    assert folded is not None and folded.snapshot() == held.machine.snapshot()
    assert not held.machine.has_update


def test_a_failed_batch_fails_every_request_that_joined_it() -> None:
    fake = FakeLog(fail=True)
    held, results = run_writes(fake, 4)
    assert fake.records() == 1  # the key is broken: its update is not sent
    assert len(results) == 5
    assert all(r == [(held, r[0][1])] and r[0][1] != ErrorCode.none for r in results)
    assert held.broken


def test_a_request_that_changed_nothing_does_not_wait() -> None:
    async def main() -> None:
        writer = ShareWriter(FakeLog().append, lambda *_: False, lambda: 0)
        held = Held(KEY, SharePartition(0), generation=1, term=1, state_index=0)
        assert await writer.write([(held, False)]) == []
        assert writer.records_written == 0

    trio.run(main)



def run_late_writer(fail: bool) -> list[tuple[Held, ErrorCode]]:
    """A request changes the machine, then (awaiting something else) asks for
    its write only after another request's batch took that change: what the
    late request's write answers once the batch is done."""
    fake = FakeLog(fail=fail)
    late: list[list[tuple[Held, ErrorCode]]] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            def spawn(fn, *args) -> bool:  # type: ignore[no-untyped-def]
                nursery.start_soon(fn, *args)
                return True

            writer = ShareWriter(fake.append, spawn, lambda: 1000)
            held = Held(KEY, SharePartition(0), generation=1, term=1, state_index=0)
            held.machine.take_update()
            got = held.machine.acquire("m", 10, 1000, ((o, None) for o in range(10)), 10)
            held.machine.acknowledge("m", [(got[0].first_offset, got[-1].last_offset,
                                            (int(AckType.ACCEPT),))], 1000)
            nursery.start_soon(writer.write, [(held, False)])  # the other request
            await trio.testing.wait_all_tasks_blocked()
            assert len(fake.batches) == 1 and not held.machine.has_update  # in flight

            async def the_late_one() -> None:
                late.append(await writer.write([(held, False)]))
            nursery.start_soon(the_late_one)
            await trio.testing.wait_all_tasks_blocked()
            assert not late  # it waits for the batch that holds its change
            fake.gate.set()
        # and a request after the batch failed fails too (its change was in it)
        if fail:
            late.append(await writer.write([(held, False)]))
            assert late[-1] == [(held, ErrorCode.unknown_server_error)]

    trio.run(main)
    return late[0]


def test_a_request_whose_change_a_batch_took_waits_for_that_batch() -> None:
    assert run_late_writer(fail=False) == []


def test_a_request_whose_change_was_in_a_lost_batch_fails() -> None:
    failed = run_late_writer(fail=True)
    assert len(failed) == 1 and failed[0][1] == ErrorCode.request_timed_out
