"""A state machine that fails takes its partition offline, not the broker;
a long replay is fed in turns that leave the loop to the other tasks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
from kio.schema.errors import ErrorCode as E
from prometheus_client import CollectorRegistry, generate_latest

from kcompat.broker.host.broker import Broker
from kcompat.broker.replication.group import OfflineMachines
from kcompat.log.partition_log import PartitionLog
from kcompat.testing import running
from kcompat.wire.batch import BatchHeader
from kcompat.wire.records import encode_batch


class Poisoned:
    """A machine over the topic ``poisoned`` whose partition 0 fails on the
    record ``b"boom"``; it counts what it applied per partition."""

    def __init__(self) -> None:
        self.applied: dict[int, int] = {0: 0, 1: 0}
        self.leading: set[int] = set()

    def apply(self, index: int, batch: memoryview, header: BatchHeader) -> None:
        if index == 0 and b"boom" in bytes(batch):
            raise ValueError("a bug in this machine")
        self.applied[index] += header.records_count

    def on_role(self, index: int, leading: bool) -> None:
        (self.leading.add if leading else self.leading.discard)(index)

    def restore(self, index: int, start: int) -> None:
        """Nothing to restore."""


def test_a_failing_machine_takes_its_partition_offline_not_the_broker(broker: Broker) -> None:
    machine = Poisoned()
    broker.cluster.machines["poisoned"] = machine
    registry = CollectorRegistry()
    registry.register(OfflineMachines(broker.cluster.groups))

    async def body() -> None:
        await running.create_topic(broker, "poisoned", 2)
        await running.create_topic(broker, "plain", 1)
        await broker.cluster.wait_leaders("poisoned", 5.0)
        append = broker.calls.append_locally
        for index in (0, 1):
            assert (await append("poisoned", index, encode_batch([(None, b"ok", (), 1)]),
                                 5.0))[0] == E.none
        assert machine.leading == {0, 1}
        code, _ = await append("poisoned", 0, encode_batch([(None, b"boom", (), 1)]), 5.0)
        assert code == E.not_coordinator  # committed, but its machine is offline
        assert broker.cluster.serving_machine("poisoned", 0) == E.not_coordinator
        assert machine.leading == {1}
        # the broker goes on: the other partition of the machine, plain topics, metadata
        for _ in range(3):
            assert (await append("poisoned", 1, encode_batch([(None, b"ok", (), 1)]),
                                 5.0))[0] == E.none
        assert (await append("plain", 0, encode_batch([(None, b"x", (), 1)]), 5.0))[0] == E.none
        await running.create_topic(broker, "after", 1)
        assert broker.cluster.serving_machine("poisoned", 1) is None

    running.run(broker, body)
    assert machine.applied == {0: 1, 1: 4}
    text = generate_latest(registry).decode()
    assert ('kcompat_state_machine_offline{error="ValueError: a bug in this machine",'
            'partition="poisoned-0"} 1.0') in text


def _written_then_closed(broker: Broker, batches: int) -> None:
    """``batches`` committed batches of one record in ``poisoned-1`` (its
    machine a ``Poisoned``), then the broker closed: what a restart replays."""
    broker.cluster.machines["poisoned"] = Poisoned()

    async def write() -> None:
        await running.create_topic(broker, "poisoned", 2)
        await broker.cluster.wait_leaders("poisoned", 5.0)
        for _ in range(batches):
            await broker.calls.append_locally("poisoned", 1, encode_batch([(None, b"v", (), 1)]),
                                              5.0)

    running.run(broker, write)
    broker.close()


def test_a_long_replay_is_fed_in_turns(broker: Broker) -> None:
    """500 committed batches, replayed to a machine that takes 1 ms a batch:
    other tasks run between the turns, each well under the 50 ms budget, and
    the broker is ready (its metadata applied) before the replay ends; the
    runtime says it is settling until then."""
    _written_then_closed(broker, 500)
    again = Broker(broker.config)  # a restart: every batch is replayed to a new machine
    slow = Poisoned()
    apply = slow.apply

    def slow_apply(index: int, batch: memoryview, header: BatchHeader) -> None:
        import time
        time.sleep(0.001)
        apply(index, batch, header)

    slow.apply = slow_apply  # type: ignore[method-assign]
    again.cluster.machines["poisoned"] = slow
    turns: list[int] = []
    ready_at: list[int] = []
    settling: list[bool] = []

    async def watch() -> None:
        while 1 not in slow.leading:
            turns.append(slow.applied[1])
            await trio.sleep(0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)  # from before the broker's first turn
            async with running.running(again):
                ready_at.append(slow.applied[1])  # the controller started: the broker serves
                settling.append(again.cluster.settling)  # its machine's group is not loaded
                with trio.fail_after(60):
                    while 1 not in slow.leading:
                        await trio.sleep(0.01)
                settling.append(again.cluster.settling)

    try:
        trio.run(main)
    finally:
        again.close()
    assert slow.applied[1] == 500
    fed = [b - a for a, b in zip(turns, turns[1:], strict=False) if b > a]
    assert len(fed) >= 10  # the watcher ran between turns of the replay
    assert max(fed) <= 40  # about 20 batches (20 ms) a turn
    assert ready_at[0] < 500  # ready while the replay went on: the metadata log went first
    # ``settling`` (what the codec warm-up waits for) while it went on, not after
    assert settling == [True, False]


def test_heartbeats_go_by_the_clock_not_by_ticks(broker: Broker,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy loop ticks late: here the driver's ticks (100 ms asked) come
    700 ms apart. A heartbeat every 20 ticks (2 s asked) then came every 14 s,
    past the 9 s session, and the broker fenced itself (issue 31); by the
    clock it comes every 2.1 s."""
    from kcompat.broker.controller import lifecycle as lifecycle_module

    async def body() -> None:
        lc = broker.controller.lifecycle
        heard: list[float] = []
        hear = lc.membership.heartbeat
        monkeypatch.setattr(lc.membership, "heartbeat",
                            lambda hb, brokers, now: heard.append(now) or hear(hb, brokers, now))
        clock = [lifecycle_module._clock_ms()]
        monkeypatch.setattr(lifecycle_module, "_clock_ms", lambda: clock[0])
        for tick in range(1, 41):  # no await: the driver's own ticks do not interleave
            clock[0] += 700
            lc.heartbeat(tick)
        gaps = [b - a for a, b in zip(heard, heard[1:], strict=False)]
        assert len(heard) >= 12 and max(gaps) <= 2100

    running.run(broker, body)


def test_a_replay_that_finds_no_batch_takes_the_partition_offline(
        broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log says batches are committed where none can be read (the
    segment lost its bytes under the broker): the partition goes offline
    with its reason, as a failing machine does, and the driver does not spin
    on it — the broker goes on serving."""
    _written_then_closed(broker, 20)
    cut: list[Path] = []
    opened = PartitionLog.open.__func__  # type: ignore[attr-defined]

    def open_then_lose_the_bytes(cls: type[PartitionLog], directory: Path, *args: object,
                                 **kwargs: object) -> PartitionLog:
        plog: PartitionLog = opened(cls, directory, *args, **kwargs)
        if directory.name == "poisoned-1":  # loaded: it says 20 batches are there
            for segment_file in directory.glob("*.log"):
                os.truncate(segment_file, 0)
                cut.append(segment_file)
        return plog

    monkeypatch.setattr(PartitionLog, "open", classmethod(open_then_lose_the_bytes))
    again = Broker(broker.config)
    again.cluster.machines["poisoned"] = Poisoned()

    def offline() -> list[str]:
        return [g.broken for g in again.cluster.groups.values()
                if g.name == "poisoned-1" and g.broken is not None]

    async def body() -> None:
        with trio.fail_after(20):
            while not offline():
                await trio.sleep(0.01)
        assert again.cluster.serving_machine("poisoned", 1) is not None
        await running.create_topic(again, "after", 1)  # the driver is not spinning
        assert (await again.calls.append_locally("after", 0, encode_batch([(None, b"x", (), 1)]),
                                                 5.0))[0] == E.none

    try:
        running.run(again, body)
    finally:
        again.close()
    assert cut and "offset 0" in offline()[0]
