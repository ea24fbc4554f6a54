"""A replica's log opens in a worker thread, not on the event loop (recovery
syncs files and may scan segments: hundreds of ms on a busy disk), and a
replica deleted while its log opens is closed and deleted, not installed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from kcompat.broker.controller import admin
from kcompat.broker.host.broker import Broker
from kcompat.log.partition_log import PartitionLog
from kcompat.testing import running


def _spy_opens(monkeypatch: pytest.MonkeyPatch, gate: threading.Event | None = None
               ) -> list[tuple[str, int]]:
    """Each partition log opened (its directory's name, the opening thread);
    an open of ``slow-*`` waits for ``gate``."""
    opened: list[tuple[str, int]] = []
    original = PartitionLog.open.__func__  # type: ignore[attr-defined]

    def spy(cls: type[PartitionLog], directory: Path, *args: Any) -> PartitionLog:
        opened.append((directory.name, threading.get_ident()))
        if gate is not None and directory.name.startswith("slow-"):
            assert gate.wait(10.0)
        return original(cls, directory, *args)  # type: ignore[no-any-return]

    monkeypatch.setattr(PartitionLog, "open", classmethod(spy))
    return opened


def test_a_replica_log_opens_off_the_event_loop(broker: Broker,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    opened = _spy_opens(monkeypatch)

    async def body() -> int:
        await running.create_topic(broker, "t", 3)
        # CreateTopics answers once this broker's replicas are open
        assert {("t", i) for i in range(3)} <= set(broker.state.partitions)
        await broker.cluster.wait_leaders("t", 5.0)
        return threading.get_ident()

    loop_thread = running.run(broker, body)
    threads = {thread for name, thread in opened if name.startswith("t-")}
    assert len([name for name, _ in opened if name.startswith("t-")]) == 3
    assert loop_thread not in threads


def test_a_replica_deleted_while_its_log_opens_is_not_installed(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gate = threading.Event()
    _spy_opens(monkeypatch, gate)
    rt = broker.cluster

    async def body() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(running.create_topic, broker, "slow", 1)
            with trio.fail_after(10):
                while not rt.opening:
                    await trio.sleep(0.01)
            [(gid, (topic, _voters))] = rt.opening.items()
            assert topic == "slow"
            nursery.start_soon(admin.delete_topic, broker.controller, "slow")
            with trio.fail_after(10):  # applied (the call returns once the opens are done)
                while "slow" in broker.state.topics:
                    await trio.sleep(0.01)
            gate.set()
            with trio.fail_after(10):
                while rt.opening:
                    await trio.sleep(0.01)
            assert gid not in rt.groups
            assert ("slow", 0) not in broker.state.partitions
            await running.create_topic(broker, "after", 1)  # the opens go on
            assert ("after", 0) in broker.state.partitions
            nursery.cancel_scope.cancel()

    running.run(broker, body)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("slow")]


def test_a_slow_open_does_not_hold_up_the_others(broker: Broker,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Logs open a few at once (a restart opens every replica): one stuck on a
    slow disk leaves the others to open."""
    gate = threading.Event()
    _spy_opens(monkeypatch, gate)
    rt = broker.cluster

    async def body() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(running.create_topic, broker, "slow", 1)
            with trio.fail_after(10):
                while not rt.opening:
                    await trio.sleep(0.01)
            nursery.start_soon(running.create_topic, broker, "fast", 2)
            with trio.fail_after(10):
                while {("fast", 0), ("fast", 1)} - set(broker.state.partitions):
                    await trio.sleep(0.01)
            assert ("slow", 0) not in broker.state.partitions  # still opening
            gate.set()
            with trio.fail_after(10):
                while ("slow", 0) not in broker.state.partitions:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    try:
        running.run(broker, body)
    finally:
        gate.set()
